"""--traffic-mix: the models served together and each one's share of the requests.

"digits=0.7,resnet18=0.3" names two models of the repository and the share of the total
request rate each receives; shares are any positive numbers, normalised to add up to 1
("digits=7,resnet18=3" is the same mix).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from tuner.errors import TuneUsageError

EXAMPLE = "digits=0.7,resnet18=0.3"
_NORMALISED_TOLERANCE = 1e-6


class TrafficMixError(TuneUsageError):
    """--traffic-mix is not NAME=SHARE pairs of distinct models with shares > 0."""


@dataclass(frozen=True, slots=True)
class TrafficMix:
    """model -> share of the total request rate (adding up to 1), in the order given;
    `given_total` is what the shares as written added up to."""

    shares: Mapping[str, float]
    given_total: float = 1.0

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(self.shares)

    @property
    def normalised(self) -> bool:
        """The shares as written did not add up to 1 (they were scaled to)."""
        return abs(self.given_total - 1.0) > _NORMALISED_TOLERANCE

    def describe(self) -> str:
        """ "digits 70%, resnet18 30%"."""
        return ", ".join(f"{model} {100 * share:.4g}%" for model, share in self.shares.items())


def parse_traffic_mix(text: str) -> TrafficMix:
    """The mix written as "NAME=SHARE,NAME=SHARE"; TrafficMixError naming the bad entry."""
    given: dict[str, float] = {}
    entries = [entry.strip() for entry in text.split(",")]
    for entry in entries:
        if not entry:
            raise TrafficMixError(f"empty entry in '{text}' (expected NAME=SHARE pairs, {EXAMPLE})")
        name, equals, share_text = (part.strip() for part in entry.partition("="))
        if not equals or not name or not share_text:
            raise TrafficMixError(f"entry '{entry}' is not NAME=SHARE (e.g. {EXAMPLE})")
        try:
            share = float(share_text)
        except ValueError:
            raise TrafficMixError(
                f"entry '{entry}': the share '{share_text}' is not a number"
            ) from None
        if not math.isfinite(share) or share <= 0:
            raise TrafficMixError(f"entry '{entry}': the share must be a number > 0")
        if name in given:
            raise TrafficMixError(f"model '{name}' appears twice")
        given[name] = share
    if len(given) < 2:
        raise TrafficMixError(
            f"a traffic mix needs at least two models, got '{text}' (tune one model with -m)"
        )
    total = sum(given.values())
    return TrafficMix({name: share / total for name, share in given.items()}, total)
