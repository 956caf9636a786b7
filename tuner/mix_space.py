"""The joint search space of a traffic mix: models served together, sharing the cores.

It is a `PipelineSpace` (the models' own spaces composed, every decision named after its
model) with the machine's constraint: the cores the models' instances use, instances x
threads summed over the models (a model without a thread parameter counts one core per
instance), stay within the core count.

The constraint is enforced in the walk, not by the search: each model, in the mix's order,
chooses among the instance and thread counts that fit in the cores the earlier models left,
keeping one core for each model after it. Every candidate the search proposes can then be
served as it is, so no trial is spent measuring (or told as infeasible) a configuration the
machine cannot hold, and a grid enumerates only the valid points. A choice whose list was
narrowed this way is a parameter of its own, named with the cores it had
("simple.instance_count[cores=1]"): Optuna's categorical parameters keep one list of choices
per name.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tuner.candidate import (
    INSTANCE_COUNT,
    THREAD_COUNT,
    Candidate,
    ParamValue,
    join_steps,
    qualified,
)
from tuner.errors import TunerError
from tuner.pipeline_space import MAX_GRID_POINTS, PipelineGridError, PipelineSpace
from tuner.space import Chooser, replayed_params, snapping


class MixSpaceError(TunerError):
    """The models cannot share the machine (fewer cores than models)."""


def cores_used(candidate: Mapping[str, ParamValue]) -> int:
    """The cores one model's plain candidate takes: instances x threads (one per instance
    without a thread count)."""
    instances = candidate.get(INSTANCE_COUNT)
    threads = candidate.get(THREAD_COUNT)
    count = instances if isinstance(instances, int) and not isinstance(instances, bool) else 1
    per = threads if isinstance(threads, int) and not isinstance(threads, bool) else 1
    return count * per


@dataclass(frozen=True)
class MixSpace(PipelineSpace):
    """The models' spaces searched as one, their instances x threads within `cores`."""

    cores: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cores < len(self.steps):
            raise MixSpaceError(
                f"{len(self.steps)} models ({', '.join(self.models)}) cannot share "
                f"{self.cores} core(s): each instance needs one"
            )

    def walk(self, choose: Chooser) -> Candidate:
        """Each model's decisions in order, its instance and thread counts narrowed to the
        cores left (one kept for each later model)."""
        parts = {}
        left = self.cores
        for index, step in enumerate(self.steps):
            budget = left - (len(self.steps) - index - 1)
            parts[step.model_name] = step.walk(_within_cores(choose, step.model_name, budget))
            left -= cores_used(parts[step.model_name])
        return join_steps(parts)

    def params_for(self, candidate: Candidate) -> dict[str, ParamValue]:
        """The Optuna parameters of `candidate`; ValueError when it is not a point of the
        mix's space (a model's part outside its space, or more cores than the machine)."""
        return replayed_params(self.walk, candidate, f"'{self.model_name}' on {self.cores} cores")

    @property
    def size(self) -> int:
        """Combinations of the models' points whose cores add up to at most `cores`."""
        ways: Counter[int] = Counter({0: 1})  # cores used so far -> combinations
        for step in self.steps:
            own = Counter(cores_used(point) for point in step.grid_points())
            joined: Counter[int] = Counter()
            for (used, count), (more, n) in itertools.product(ways.items(), own.items()):
                if used + more <= self.cores:
                    joined[used + more] += count * n
            ways = joined
        return sum(ways.values())

    @functools.cached_property
    def _grid(self) -> tuple[Candidate, ...]:
        size = self.size
        if size > MAX_GRID_POINTS:
            raise PipelineGridError(
                f"'{self.model_name}': the joint grid of {' x '.join(self.models)} on "
                f"{self.cores} cores has {size} points (more than {MAX_GRID_POINTS}); "
                "use --search climb (or another sampler)"
            )
        default = self.default_candidate()
        points = (
            join_steps(dict(zip(self.models, combo, strict=True)))
            for combo in itertools.product(*(step.grid_points() for step in self.steps))
            if sum(cores_used(point) for point in combo) <= self.cores
        )
        return (default, *(p for p in points if p != default))

    def default_candidate(self) -> Candidate:
        """Each model's own config as a point of its space, then fitted into the cores."""
        return self.walk(snapping(dict(super().default_candidate())))

    def as_written(self) -> Candidate:
        """Every model's config exactly as written when together they are a point of the
        mix's space; else the empty candidate (each model as written, whatever the cores)."""
        joint = super().as_written()
        return joint if len(joint) and joint in self else Candidate()

    def prior_candidates(self) -> list[Candidate]:
        """The models' own starting points together, each fitted into the cores."""
        fitted = [self.walk(snapping(dict(prior))) for prior in super().prior_candidates()]
        return list(dict.fromkeys(fitted))

    def describe_sizes(self) -> str:
        return f"{super().describe_sizes()}, instances x threads within {self.cores} cores"

    def describe(self) -> list[str]:
        lines = super().describe()
        lines[-1] = (
            f"{self.size} candidates with instances x threads within {self.cores} cores "
            f"(of {' x '.join(str(s.size) for s in self.steps)} without the limit)"
        )
        return lines


def _within_cores(choose: Chooser, model: str, budget: int) -> Chooser:
    """`choose` for one model's walk, its instance and thread counts narrowed to `budget`
    cores (named apart when narrowed); the other decisions pass through, qualified."""
    instances = 1

    def narrowed(field: str, name: str, choices: Sequence[ParamValue]) -> Any:
        nonlocal instances
        allowed: Sequence[ParamValue] = choices
        if field == INSTANCE_COUNT:
            allowed = [c for c in choices if isinstance(c, int) and c <= budget]
        elif field == THREAD_COUNT:
            allowed = [c for c in choices if isinstance(c, int) and c * instances <= budget]
        if len(allowed) != len(choices):
            name = f"{name}[cores={budget}]"
        value = choose(qualified(model, field), qualified(model, name), allowed)
        if field == INSTANCE_COUNT and isinstance(value, int):
            instances = value
        return value

    return narrowed
