"""What re-measuring the search's top candidates found (part of the run schema: summary.json's
`remeasure` key): each candidate's figure per repeat, its median and spread, whether it held
the budget, and which one won.

The winner is the best median throughput among the candidates that held the budget, with one
exception: the config as written, when it held, is kept unless the best one's median, and at
least two of its repeats, are above the highest of the as-written's own repeats. Those repeats
were taken at the same moments (interleaved), so their range is the noise of the machine for
that config; a gain inside it is not shown to be a gain, and changing a config that works has a
cost of its own (a diff to review, a reload, a change whose figures may not carry over). The
median on the challenger's side, the whole range on the as-written's: one slow repeat of the
challenger does not keep the config as written, one lucky repeat of the config as written may
(the cautious side). With three repeats each and no difference between the two, a challenger
passes one time in five (the two highest of six repeats both its own), instead of one in two on
the medians alone. A single round measures no noise at all, so it cannot show a gain: when the
time budget allowed one round (or `--remeasure-repeats 1`), a config as written that held is
kept (in the 2026-12-06 digits run on Triton a one-round "gain" of 1.6% was written, and the
written config served the same as the one it replaced, re-measured over three rounds).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.search_types import trial_label

# The rule, in words, for the reports and summary.json.
WINNER_RULE = (
    "the best median throughput among the candidates whose median latency percentile over "
    "the repeats stays within the budget; a candidate over it, or one that failed to load or "
    "measure, is dropped and the next one taken; the config as written, when it held, is kept "
    "unless that median, and at least two repeats of that candidate, are above every one of its "
    "own repeats (a gain within its range, or seen in one round only, is noise)"
)
# A gain over the config as written must show in this many rounds: one measures no noise.
MIN_WINNING_REPEATS = 2


def beats_as_written(challenger: RemeasuredCandidate, as_written: RemeasuredCandidate) -> bool:
    """Whether `challenger`'s median throughput, and at least MIN_WINNING_REPEATS of its
    repeats, are above every repeat of the config as written: a gain beyond the noise the
    as-written's own repeats show, seen in more than one round."""
    gain, noise = challenger.throughput, as_written.throughput
    if gain is None:
        return False
    if noise is None:
        return True
    return gain.median > noise.high and rounds_above(challenger, noise.high) >= MIN_WINNING_REPEATS


def rounds_above(candidate: RemeasuredCandidate, figure: float) -> int:
    """How many of `candidate`'s repeats served more than `figure` infer/s."""
    return sum(value > figure for value in candidate.throughputs)


@dataclass(frozen=True, slots=True)
class Spread:
    """The median and the range of a figure over the repeats."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread | None:
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return None
        return cls(statistics.median(finite), min(finite), max(finite))

    def describe(self, scale: float = 1.0, digits: int = 1) -> str:
        """E.g. '1,234.5 [1,200.1-1,260.3]' (values divided by `scale`)."""
        median, low, high = (v / scale for v in (self.median, self.low, self.high))
        return f"{median:,.{digits}f} [{low:,.{digits}f}-{high:,.{digits}f}]"


@dataclass(frozen=True, slots=True)
class RemeasuredCandidate:
    """One of the top candidates measured again: the trial it came from, the load it was
    measured at (the search's operating point), and per repeat its throughput (infer/s), its
    latency at the budget's percentile and whether the repeat's windows settled. `held` is
    whether it met the budget re-measured; `message` says why not (or why it was dropped)."""

    trial: int
    key: str
    as_written: bool
    concurrency: int
    search_throughput: float
    search_latency_us: float | None
    throughputs: tuple[float, ...] = ()
    latencies_us: tuple[float, ...] = ()
    stable: tuple[bool, ...] = ()
    held: bool = False
    message: str = ""

    @property
    def label(self) -> str:
        return trial_label(self.key, self.as_written)

    @property
    def throughput(self) -> Spread | None:
        return Spread.of(self.throughputs)

    @property
    def latency(self) -> Spread | None:
        return Spread.of(self.latencies_us)

    def to_json(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "key": self.key,
            "as_written": self.as_written,
            "concurrency": self.concurrency,
            "search_throughput": self.search_throughput,
            "search_latency_us": self.search_latency_us,
            "throughputs": list(self.throughputs),
            "latencies_us": list(self.latencies_us),
            "stable": list(self.stable),
            "held": self.held,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemeasuredCandidate:
        latency = data.get("search_latency_us")
        return cls(
            trial=int(data["trial"]),
            key=str(data.get("key") or ""),
            as_written=bool(data.get("as_written")),
            concurrency=int(data["concurrency"]),
            search_throughput=float(data.get("search_throughput") or 0.0),
            search_latency_us=None if latency is None else float(latency),
            throughputs=tuple(float(v) for v in data.get("throughputs") or ()),
            latencies_us=tuple(float(v) for v in data.get("latencies_us") or ()),
            stable=tuple(bool(v) for v in data.get("stable") or ()),
            held=bool(data.get("held")),
            message=str(data.get("message") or ""),
        )


@dataclass(frozen=True, slots=True)
class RemeasureResult:
    """The re-measure of a run: the candidates in the order they were measured in each round,
    the rounds done (of `repeats` asked: the time budget may cut them short), the windows
    used, the winner's trial number (None when no candidate held the budget) and the trial
    the search had found best."""

    repeats: int
    rounds: int
    windows: str
    candidates: tuple[RemeasuredCandidate, ...]
    winner: int | None
    search_best: int | None
    rule: str = WINNER_RULE
    note: str = ""  # how the rounds ended when fewer than asked; loads lowered, and why

    def candidate(self, trial: int | None) -> RemeasuredCandidate | None:
        return next((c for c in self.candidates if c.trial == trial), None)

    @property
    def kept_as_written_over(self) -> RemeasuredCandidate | None:
        """The held candidate with a better median than the config as written that won
        anyway (its gain within the as-written's range); None when there is none."""
        winner = self.candidate(self.winner)
        if winner is None or not winner.as_written or winner.throughput is None:
            return None
        better = [
            c
            for c in self.candidates
            if c.held and c.throughput and c.throughput.median > winner.throughput.median
        ]
        return max(better, key=lambda c: c.throughput.median if c.throughput else 0.0, default=None)

    @property
    def changed_winner(self) -> bool:
        """The re-measure chose another configuration than the search's best."""
        return self.winner is not None and self.winner != self.search_best

    def to_json(self) -> dict[str, Any]:
        return {
            "repeats": self.repeats,
            "rounds": self.rounds,
            "windows": self.windows,
            "rule": self.rule,
            "winner": self.winner,
            "search_best": self.search_best,
            "note": self.note,
            "candidates": [c.to_json() for c in self.candidates],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RemeasureResult:
        winner, best = data.get("winner"), data.get("search_best")
        return cls(
            repeats=int(data["repeats"]),
            rounds=int(data.get("rounds") or 0),
            windows=str(data.get("windows") or ""),
            candidates=tuple(
                RemeasuredCandidate.from_json(c) for c in data.get("candidates") or ()
            ),
            winner=None if winner is None else int(winner),
            search_best=None if best is None else int(best),
            rule=str(data.get("rule") or WINNER_RULE),
            note=str(data.get("note") or ""),
        )
