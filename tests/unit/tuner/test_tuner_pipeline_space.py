"""A pipeline's joint search space: the composition of its steps' own spaces, every decision
named after its model, searched by one study."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.model_config import read_config_file
from tests.conftest import BUNDLED_REPOSITORY
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate, join_steps, step_candidate
from tuner.duration import Duration
from tuner.pipeline_space import PipelineGridError, PipelineSpace
from tuner.search import run_search
from tuner.search_types import SearchSettings, TrialContext, TrialOutcome
from tuner.space import Platform, SearchSpace, SpaceOptions, build_space, grid

PLATFORM = Platform(cpu_count=2)


def _config(model: str, name: str | None = None) -> mc.ModelConfig:
    config = read_config_file(BUNDLED_REPOSITORY / model / "config.pbtxt")
    config.name = name or model
    return config


def _space(config: mc.ModelConfig, **options: Any) -> SearchSpace:
    settings = {"precisions": ("fp32",), "delays_us": (0, 500), "tune_preferred": False}
    return build_space(config, PLATFORM, SpaceOptions(**(settings | options)))


def _pipeline(**options: Any) -> PipelineSpace:
    """digits (onnxruntime) -> add_sub_py (python): the two kinds of step."""
    return PipelineSpace(
        "pipe", (_space(_config("digits"), **options), _space(_config("add_sub_py"), **options))
    )


class _Recorder:
    """A trial that answers each suggestion with its first choice and keeps the names."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        self.names.append(name)
        return choices[0]


def test_every_parameter_is_named_after_its_model() -> None:
    trial = _Recorder()
    candidate = _pipeline().suggest(trial)
    assert trial.names and all(n.split(".")[0] in ("digits", "add_sub_py") for n in trial.names)
    assert "digits.instance_count" in trial.names
    assert "add_sub_py.instance_count" in trial.names
    assert "digits.intra_op_thread_count[instances=1]" in trial.names  # onnxruntime only
    assert not any(n.startswith("add_sub_py.intra_op") for n in trial.names)
    assert all("." in name for name in candidate)
    assert candidate.key.startswith("add_sub_py[") and " digits[" in candidate.key


def test_the_joint_space_is_the_product_of_the_steps_spaces() -> None:
    space = _pipeline()
    digits, python = space.steps
    assert space.size == digits.size * python.size
    points = grid(space)
    assert len(points) == space.size == len(set(points))
    for point in points:
        parts = space.split(point)
        assert parts["digits"] in digits and parts["add_sub_py"] in python
        assert join_steps(parts) == point
        assert point in space


def test_a_step_is_tuned_by_the_rules_of_its_own_space() -> None:
    space = _pipeline()
    alone = _space(_config("digits"))
    assert space.steps[0] == alone
    assert {step_candidate(p, "digits") for p in grid(space)} == set(grid(alone))


def test_max_batch_size_never_goes_below_the_ensembles() -> None:
    space = _pipeline(min_batch_size=8)
    digits, python = space.steps
    assert digits.batching is not None and python.batching is not None
    assert digits.batching.max_batch_sizes == (8, 16, 32, 64)
    assert python.batching.max_batch_sizes == (8,)  # its own cap: the config's 8
    for point in grid(space):
        for part in space.split(point).values():
            if part.get("dynamic_batching"):
                assert int(part["max_batch_size"]) >= 8  # type: ignore[arg-type]
    # Nothing between the ensemble's size and the cap: batching is left as written.
    assert _space(_config("add_sub_py"), min_batch_size=16).batching is None


def test_params_round_trip_and_a_foreign_part_is_refused_naming_the_step() -> None:
    space = _pipeline()
    for candidate in space.prior_candidates():
        params = space.params_for(candidate)
        assert all(name.startswith(("digits.", "add_sub_py.")) for name in params)
    bad = space.default_candidate().replace(**{"digits.instance_count": 64})
    with pytest.raises(ValueError, match=r"'pipe' step 'digits'.*instance_count=64"):
        space.params_for(bad)
    assert bad not in space
    extra = space.default_candidate().replace(**{"other.instance_count": 1})
    assert extra not in space


def test_as_written_is_each_steps_own_or_nothing() -> None:
    space = _pipeline()
    digits, python = space.steps
    if len(digits.as_written()) and len(python.as_written()):
        assert space.as_written() == join_steps(
            {"digits": digits.as_written(), "add_sub_py": python.as_written()}
        )
    outside = _config("digits")
    outside.dynamic_batching.preferred_batch_size.extend([4, 8])  # no point of the space
    mixed = PipelineSpace("pipe", (_space(outside), python))
    assert len(mixed.steps[0].as_written()) == 0
    assert mixed.as_written() == Candidate()  # changes no step
    assert mixed.prior_candidates()[0] == mixed.default_candidate()


def test_a_model_cannot_be_two_steps_and_a_huge_grid_is_refused() -> None:
    digits = _space(_config("digits"))
    with pytest.raises(ValueError, match="twice"):
        PipelineSpace("pipe", (digits, digits))
    big = PipelineSpace(
        "pipe",
        tuple(
            _space(_config("digits", name), precisions=("fp32",), delays_us=(0, 100, 500, 1000))
            for name in ("a", "b", "c")
        ),
    )
    with pytest.raises(PipelineGridError, match=r"use --search climb \(or another sampler\)"):
        grid(big)


def test_one_study_searches_every_step_jointly() -> None:
    space = _pipeline()
    seen: list[Candidate] = []

    def evaluate(candidate: Candidate, _context: TrialContext | None = None) -> TrialOutcome:
        seen.append(candidate)
        parts = space.split(candidate)
        instances = sum(int(parts[m].get("instance_count") or 1) for m in parts)  # type: ignore[arg-type]
        return TrialOutcome("ok", throughput=100.0 * instances, latency_us=1_000.0)

    settings = SearchSettings(
        budget=LatencyBudget(95, Duration(5_000)), study_name="pipe", n_trials=6, seed=0
    )
    result = run_search(space, evaluate, settings)
    assert len(seen) == 6
    assert result.best is not None and result.best.candidate is not None
    measured = [t for t in result.trials if t.candidate is not None and len(t.candidate)]
    assert measured and all(t.candidate in space for t in measured if t.candidate is not None)
