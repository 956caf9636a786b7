"""The search methods against a synthetic surface over digits' full space (882 candidates on
2 cores), replayed as the benchmark replays the grid: no server, deterministic seeds."""

from __future__ import annotations

import hashlib
import math
import threading
import time
from dataclasses import replace
from pathlib import Path
from statistics import mean

import optuna
import pytest

from serve.config.model_config import read_config_file
from tests.conftest import BUNDLED_REPOSITORY
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate, ParamValue
from tuner.duration import Duration
from tuner.pipeline_space import PipelineSpace
from tuner.samplers import METHODS, ClimbSampler, make_sampler
from tuner.samplers_replay import Measured, replay, table_optimum
from tuner.search import run_search
from tuner.search_study import sqlite_url
from tuner.search_types import SearchError, SearchSettings, TrialContext, TrialOutcome
from tuner.space import Platform, SearchSpace, SpaceOptions, build_space

BUDGET = LatencyBudget(95, Duration(2_000))
ROW_US = {"fp32": 60.0, "fp16": 75.0, "int8": 32.0}  # compute per row: int8 about halves it
SEEDS = range(6)


def full_space() -> SearchSpace:
    base = read_config_file(BUNDLED_REPOSITORY / "digits" / "config.pbtxt")
    options = SpaceOptions(precisions=("fp32", "fp16", "int8"), max_batch_cap=128)
    return build_space(base, Platform(cpu_count=2), options)


def _texture(key: str) -> float:
    """A fixed +-1% per candidate, as measurements differ: near-ties get an order."""
    digest = hashlib.sha256(key.encode()).digest()
    return 1.0 + 0.02 * (digest[0] / 255 - 0.5)


def surface(candidate: Candidate) -> TrialOutcome:
    """A made-up model on 2 cores with the problem's known shape: a fixed cost per request
    that batching amortises, threads that help less than instances, int8 cheaper per row,
    a latency budget that caps the useful batch (a larger limit only adds tail latency), a
    short queue delay that fills batches and a long one that eats the budget."""
    row = ROW_US[str(candidate["precision"])]
    instances = int(candidate["instance_count"])  # type: ignore[arg-type]
    threads = int(candidate["intra_op_thread_count"])  # type: ignore[arg-type]
    speed = 1.0 + 0.6 * (threads - 1)
    overhead = 250.0  # per request (batch) on the server
    if not candidate["dynamic_batching"]:
        batch_time = overhead + row / speed
        throughput = instances * 1e6 / batch_time
        latency = 2.2 * batch_time
    else:
        limit = int(candidate["max_batch_size"])  # type: ignore[arg-type]
        delay = int(candidate["max_queue_delay_microseconds"])  # type: ignore[arg-type]
        preferred = candidate["preferred_batch_size"]
        room = BUDGET.limit_us * 0.9 - delay
        # the largest batch whose p95 (about 2.2 batch times, plus the delay) fits the budget
        fitting = max(1, int((room / 2.2 - overhead) * speed / (row * 0.5)))
        batch = min(limit, fitting)
        batch_time = overhead + row * (1 + 0.5 * (batch - 1)) / speed
        throughput = instances * batch * 1e6 / batch_time
        throughput *= 1 + 0.08 * math.log10(1 + delay / 100) if delay <= 1000 else 0.97
        if limit > fitting:
            throughput *= 1 - 0.1 * math.log2(limit / fitting)
        if preferred is not None:
            throughput *= 1.03 if preferred == limit // 2 else 0.96
        latency = 2.2 * batch_time + delay
    throughput *= _texture(candidate.key)
    return TrialOutcome("ok", throughput, latency, True, {})


def surface_table(space: SearchSpace) -> dict[str, Measured]:
    return {c.key: Measured(surface(c), 1.0) for c in space.grid_points()}


def settings(**changes: object) -> SearchSettings:
    values: dict[str, object] = {"budget": BUDGET, "study_name": "digits", "n_trials": None}
    return SearchSettings(**(values | changes))  # type: ignore[arg-type]


def quality(method: str, share: float = 0.15) -> tuple[float, float]:
    """Mean over SEEDS of (best / the grid's best, trials / grid size), `share` of the grid
    allowed."""
    space = full_space()
    table = surface_table(space)
    _, optimum = table_optimum(table, settings())
    budget = math.floor(share * space.size)
    runs = [replay(space, table, settings(n_trials=budget), method, seed) for seed in SEEDS]
    return (
        mean(r.best_throughput / optimum for r in runs),
        mean(r.trials / space.size for r in runs),
    )


def test_the_surface_has_a_sharp_feasible_optimum() -> None:
    space = full_space()
    table = surface_table(space)
    assert space.size == 882
    key, optimum = table_optimum(table, settings())
    near = [k for k, m in table.items() if m.outcome.throughput >= 0.98 * optimum]
    assert key and 1 <= len(near) <= 10, len(near)
    assert any(not settings().feasible(m.outcome) for m in table.values())


def test_the_recommended_method_reaches_the_optimum_in_15_percent_of_the_grid() -> None:
    ratio, used = quality("optuna")
    assert ratio >= 0.98, ratio
    assert used <= 0.15, used


def test_a_blind_random_search_of_the_same_budget_does_not() -> None:
    # The surface is hard enough for the goal to mean something.
    ratio, _ = quality("random")
    assert ratio < 0.98, ratio


def test_patience_stops_the_climb_early_near_the_optimum() -> None:
    space = full_space()
    table = surface_table(space)
    _, optimum = table_optimum(table, settings())
    runs = [replay(space, table, settings(patience=30), "optuna", seed) for seed in SEEDS]
    assert all("over the last 30 measured trials" in r.stop_reason for r in runs)
    assert mean(r.trials for r in runs) < 0.15 * space.size
    assert mean(r.best_throughput / optimum for r in runs) >= 0.97


def test_climb_neighbours_are_one_decision_away() -> None:
    space = full_space()
    sampler = ClimbSampler(space, settings(), seed=0)
    start = space.prior_candidates()[0]  # mbs=64, db=on, delay=0, inst=1, thr=1, fp32
    keys = {c.key for c in sampler.neighbours(start)}
    assert "mbs=32,db=on,pbs=none,delay=0,inst=1,thr=1,prec=fp32" in keys
    assert "mbs=128,db=on,pbs=none,delay=0,inst=1,thr=1,prec=fp32" in keys
    assert "mbs=64,db=on,pbs=none,delay=100,inst=1,thr=1,prec=fp32" in keys
    assert "mbs=64,db=on,pbs=none,delay=0,inst=1,thr=2,prec=fp32" in keys
    assert "mbs=64,db=on,pbs=none,delay=0,inst=2,thr=1,prec=fp32" in keys
    assert "mbs=64,db=on,pbs=none,delay=0,inst=1,thr=1,prec=int8" in keys
    assert "db=off,inst=1,thr=1,prec=fp32" in keys
    assert len(keys) == 8
    assert all(c in space for c in sampler.neighbours(start))
    # batching back on takes the model's own max_batch_size
    values: dict[str, ParamValue] = {"dynamic_batching": False, "instance_kind": "KIND_CPU"}
    off = Candidate(values | {"instance_count": 2, "intra_op_thread_count": 1, "precision": "int8"})
    assert "mbs=64,db=on,pbs=none,delay=0,inst=2,thr=1,prec=int8" in {
        c.key for c in sampler.neighbours(off)
    }


@pytest.mark.parametrize("method", [m for m in METHODS if m not in ("grid", "gp")])
def test_every_method_searches_within_the_space(method: str) -> None:
    space = full_space()
    # 9 priors, then 2 of the method's own
    result = run_search(space, lambda c, _ctx: surface(c), settings(n_trials=11, method=method))
    assert len([t for t in result.trials if t.outcome and t.reused_from is None]) == 11
    assert all(t.candidate in space for t in result.trials if t.candidate)
    assert result.best is not None


def test_gp_is_optunas_gp_sampler_or_names_what_is_missing() -> None:
    try:
        sampler = make_sampler("gp", full_space(), settings(), 0)
    except SearchError as exc:  # torch is no base dependency
        assert "--search gp needs" in str(exc)
    else:
        assert isinstance(sampler, optuna.samplers.GPSampler)


def test_an_unknown_method_or_missing_packages_name_the_flag() -> None:
    space = full_space()
    with pytest.raises(SearchError, match="--search 'annealing' is not a sampler"):
        make_sampler("annealing", space, settings(), 0)
    with pytest.raises(SearchError, match="--search gp needs torch"):
        make_sampler("gp", space, settings(), 0, find_spec=lambda name: None)


def test_the_climb_resumes_without_measuring_anything_twice(tmp_path: Path) -> None:
    space = full_space()
    stored = settings(storage=sqlite_url(tmp_path / "study.db"))
    calls: list[str] = []

    def evaluate(candidate: Candidate, _context: TrialContext) -> TrialOutcome:
        calls.append(candidate.key)
        return surface(candidate)

    first = run_search(space, evaluate, replace(stored, n_trials=11))
    second = run_search(space, evaluate, replace(stored, n_trials=15))
    assert first.measured_here == 11 and second.measured_here == 4
    assert len(calls) == len(set(calls)) == 15
    assert first.best is not None and first.best.outcome is not None
    assert second.best is not None and second.best.outcome is not None
    assert second.best.outcome.throughput >= first.best.outcome.throughput


def test_two_climbing_workers_split_one_study(tmp_path: Path) -> None:
    space = full_space()
    stored = settings(storage=sqlite_url(tmp_path / "study.db"), n_trials=14)
    calls: list[str] = []
    lock = threading.Lock()

    def evaluate(candidate: Candidate, _context: TrialContext) -> TrialOutcome:
        with lock:
            calls.append(candidate.key)
        time.sleep(0.02)
        return surface(candidate)

    workers = [
        threading.Thread(target=run_search, args=(space, evaluate, stored)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    result = run_search(space, evaluate, stored)  # reads the study back: nothing left to do
    measured = [t for t in result.trials if t.outcome is not None and t.reused_from is None]
    assert len(measured) == 14
    assert len({t.worker for t in measured}) == 2


def test_the_climb_walks_a_pipelines_joint_space() -> None:
    def step(model: str) -> SearchSpace:
        base = read_config_file(BUNDLED_REPOSITORY / model / "config.pbtxt")
        options = SpaceOptions(precisions=("fp32",), delays_us=(0, 500), tune_preferred=False)
        return build_space(base, Platform(cpu_count=2), options)

    space = PipelineSpace("pipe", (step("digits"), step("add_sub_py")))
    sampler = ClimbSampler(space, settings(), seed=0)
    start = space.prior_candidates()[0]
    neighbours = sampler.neighbours(start)
    assert neighbours and all(c in space for c in neighbours)
    # one decision of one step moved: the other step's part is unchanged
    for candidate in neighbours:
        changed = [m for m, part in space.split(candidate).items() if part != space.split(start)[m]]
        assert len(changed) == 1

    def evaluate(candidate: Candidate, _context: TrialContext) -> TrialOutcome:
        return TrialOutcome("ok", 100.0 + len(candidate.key), 1_000.0)

    result = run_search(space, evaluate, settings(n_trials=12, method="climb"))
    measured = [t for t in result.trials if t.outcome and t.reused_from is None]
    assert len(measured) == 12 and all(t.candidate in space for t in measured)
