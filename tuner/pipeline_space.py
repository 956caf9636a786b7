"""The joint search space of a pipeline: an ensemble's composing models tuned together.

It is the composition of the steps' own spaces (`tuner.space.SearchSpace`, built for each
composing model by the same rules as when it is tuned alone): walking it walks each step's
space in pipeline order, with every decision named after its model ("digits.instance_count",
"digits.max_batch_size"), so one Optuna study learns all of them at once and a candidate says
which model each value belongs to (`tuner.candidate.step_candidate` takes one model's part).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tuner.candidate import Candidate, ParamValue, join_steps, qualified, step_candidate
from tuner.errors import TunerError
from tuner.space import Chooser, SearchSpace, SuggestingTrial, contains

# An exhaustive grid over several models multiplies their sizes: beyond this many points
# `--search grid` is refused for a pipeline (Optuna's search is the way there).
MAX_GRID_POINTS = 20_000


class PipelineGridError(TunerError):
    """The pipeline's grid is too large to enumerate (the run cannot tune it with --search
    grid: exit 1)."""


@dataclass(frozen=True)
class PipelineSpace:
    """The steps' spaces, in pipeline order, searched as one."""

    model_name: str  # the ensemble's
    steps: tuple[SearchSpace, ...]

    def __post_init__(self) -> None:
        names = [step.model_name for step in self.steps]
        if not names:
            raise ValueError(f"'{self.model_name}': a pipeline needs at least one step")
        if len(set(names)) != len(names):
            raise ValueError(f"'{self.model_name}': a model appears twice among {names}")

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(step.model_name for step in self.steps)

    def walk(self, choose: Chooser) -> Candidate:
        """Each step's decisions in order, named after its model."""
        parts = {}
        for step in self.steps:
            model = step.model_name

            def named(field: str, name: str, choices: Sequence[ParamValue], m: str = model) -> Any:
                return choose(qualified(m, field), qualified(m, name), choices)

            parts[model] = step.walk(named)
        return join_steps(parts)

    def suggest(self, trial: SuggestingTrial) -> Candidate:
        return self.walk(lambda _field, name, choices: trial.suggest_categorical(name, choices))

    def params_for(self, candidate: Candidate) -> dict[str, ParamValue]:
        """The Optuna parameters of `candidate`; ValueError naming the model whose part is
        not in its space."""
        params: dict[str, ParamValue] = {}
        for step in self.steps:
            model = step.model_name
            try:
                own = step.params_for(step_candidate(candidate, model))
            except ValueError as exc:
                raise ValueError(f"'{self.model_name}' step '{model}': {exc}") from None
            params |= {qualified(model, name): value for name, value in own.items()}
        return params

    def __contains__(self, candidate: object) -> bool:
        if not isinstance(candidate, Candidate) or not contains(self, candidate):
            return False
        return self._split(candidate) == candidate

    def split(self, candidate: Candidate) -> dict[str, Candidate]:
        """model -> its plain candidate (empty: its config as written), in pipeline order."""
        return {step.model_name: step_candidate(candidate, step.model_name) for step in self.steps}

    def _split(self, candidate: Candidate) -> Candidate:
        return join_steps(self.split(candidate))

    @property
    def size(self) -> int:
        return math.prod(step.size for step in self.steps)

    def grid_points(self) -> tuple[Candidate, ...]:
        return self._grid

    @functools.cached_property
    def _grid(self) -> tuple[Candidate, ...]:
        if self.size > MAX_GRID_POINTS:
            raise PipelineGridError(
                f"'{self.model_name}': the joint grid of {' x '.join(self.models)} has "
                f"{self.size} points (more than {MAX_GRID_POINTS}); use --search climb "
                "(or another sampler)"
            )
        default = self.default_candidate()
        grids = [step.grid_points() for step in self.steps]
        points = (
            join_steps(dict(zip(self.models, combo, strict=True)))
            for combo in itertools.product(*grids)
        )
        return (default, *(p for p in points if p != default))

    def default_candidate(self) -> Candidate:
        return join_steps({s.model_name: s.default_candidate() for s in self.steps})

    def as_written(self) -> Candidate:
        """Every step's config exactly as written; the empty candidate (nothing changed
        anywhere) when some step's config is no point of its space."""
        parts = {step.model_name: step.as_written() for step in self.steps}
        if any(len(part) == 0 for part in parts.values()):
            return Candidate()
        return join_steps(parts)

    def prior_candidates(self) -> list[Candidate]:
        """The i-th prior of every step together (a step with fewer priors repeats its last),
        so the search starts from each step's own starting points."""
        priors = [step.prior_candidates() for step in self.steps]
        longest = max(len(p) for p in priors)
        joint = [
            join_steps(
                {
                    step.model_name: own[min(i, len(own) - 1)]
                    for step, own in zip(self.steps, priors, strict=True)
                }
            )
            for i in range(longest)
        ]
        return list(dict.fromkeys(joint))

    def describe_sizes(self) -> str:
        """Each step's size, named after its model ("digits 12 x add_sub_py 4")."""
        return " x ".join(f"{s.model_name} {s.size}" for s in self.steps)

    def describe(self) -> list[str]:
        """Each step's lines, prefixed with its model, then the joint size."""
        lines = []
        for step in self.steps:
            own = step.describe()
            lines += [f"{step.model_name}: {line}" for line in own[:-1]]
        lines.append(f"{self.size} candidates ({' x '.join(str(s.size) for s in self.steps)})")
        return lines
