"""A traffic mix's joint search space: the models' own spaces composed, their instances x
threads within the cores (enforced in the walk), searched by one study."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.model_config import read_config_file
from tests.conftest import BUNDLED_REPOSITORY
from tuner.candidate import INSTANCE_COUNT, Candidate, join_steps, step_candidate
from tuner.mix_space import MixSpace, MixSpaceError, cores_used
from tuner.space import Platform, SearchSpace, SpaceOptions, build_space, grid


def _config(model: str) -> mc.ModelConfig:
    config = read_config_file(BUNDLED_REPOSITORY / model / "config.pbtxt")
    config.name = model
    return config


def _space(model: str, cores: int) -> SearchSpace:
    options = SpaceOptions(precisions=("fp32",), delays_us=(0, 500), tune_preferred=False)
    return build_space(_config(model), Platform(cpu_count=cores), options)


def _mix(cores: int, models: Sequence[str] = ("digits", "add_sub_py")) -> MixSpace:
    """digits (onnxruntime: instances x threads) and add_sub_py (python: no thread count)."""
    return MixSpace("mix", tuple(_space(m, cores) for m in models), cores=cores)


def _cores(space: MixSpace, candidate: Candidate) -> int:
    return sum(cores_used(step_candidate(candidate, m)) for m in space.models)


@pytest.mark.parametrize("cores", [2, 3, 4, 8])
def test_every_point_fits_the_cores_and_every_fitting_combination_is_a_point(cores: int) -> None:
    space = _mix(cores)
    points = grid(space)
    assert len(points) == len(set(points)) == space.size
    assert all(_cores(space, p) <= cores for p in points)
    assert all(p in space for p in points)
    digits, python = space.steps
    fitting = {
        join_steps({"digits": a, "add_sub_py": b})
        for a in digits.grid_points()
        for b in python.grid_points()
        if cores_used(a) + cores_used(b) <= cores
    }
    assert set(points) == fitting
    assert space.size < digits.size * python.size  # the limit removes some


def test_a_combination_over_the_cores_is_not_a_point() -> None:
    space = _mix(4)
    digits, python = space.steps
    big_digits = next(p for p in digits.grid_points() if cores_used(p) == 4)
    any_python = python.grid_points()[0]
    over = join_steps({"digits": big_digits, "add_sub_py": any_python})
    assert over not in space
    with pytest.raises(ValueError, match="4 cores"):
        space.params_for(over)


def test_on_two_cores_each_model_gets_one() -> None:
    space = _mix(2)
    for point in grid(space):
        assert {m: cores_used(step_candidate(point, m)) for m in space.models} == {
            "digits": 1,
            "add_sub_py": 1,
        }


class _Recorder:
    """A trial that answers each suggestion with its last choice and keeps the names."""

    def __init__(self) -> None:
        self.asked: dict[str, list[Any]] = {}

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        self.asked[name] = list(choices)
        return choices[-1]


def test_a_narrowed_choice_is_a_parameter_of_its_own() -> None:
    trial = _Recorder()
    candidate = _mix(4).suggest(trial)
    # digits takes the most it may (3 cores: one kept for add_sub_py), add_sub_py the rest.
    assert trial.asked["digits.instance_count[cores=3]"] == [1, 2, 3]
    assert trial.asked["add_sub_py.instance_count[cores=1]"] == [1]
    assert _cores(_mix(4), candidate) <= 4


def test_priors_and_the_default_fit_the_cores() -> None:
    space = _mix(2)
    assert space.default_candidate() in space
    assert all(prior in space for prior in space.prior_candidates())


def test_the_config_as_written_is_kept_only_when_it_fits() -> None:
    # digits as written: 1 instance x 1 thread; add_sub_py: its instance group as written.
    assert _mix(8).as_written() in _mix(8)
    base_python = _config("add_sub_py")
    count = base_python.instance_group[0].count if base_python.instance_group else 1
    if count + 1 > 2:
        assert _mix(2).as_written() == Candidate()


def test_optuna_samples_only_points_that_fit() -> None:
    space = _mix(4)
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.TPESampler(seed=1, n_startup_trials=5)
    )
    for _ in range(25):
        trial = study.ask()
        candidate = space.suggest(trial)
        assert candidate in space
        study.tell(trial, float(step_candidate(candidate, "digits")[INSTANCE_COUNT]))


def test_more_models_than_cores_is_an_error_naming_them() -> None:
    with pytest.raises(MixSpaceError, match="digits, add_sub_py"):
        MixSpace("mix", (_space("digits", 1), _space("add_sub_py", 1)), cores=1)
