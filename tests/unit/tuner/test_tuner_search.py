"""The tuner's search loop against a fake, deterministic evaluation (no server)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from serve.config.model_config import read_config_file
from tests.conftest import BUNDLED_REPOSITORY
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.duration import Duration
from tuner.search import run_search
from tuner.search_study import WORKER, fail_stale_trials, open_storage, sqlite_url, tell_first
from tuner.search_types import (
    ProgressEvent,
    SearchError,
    SearchSettings,
    TrialContext,
    TrialOutcome,
)
from tuner.space import Platform, SearchSpace, SpaceOptions, build_space, grid

ROOT = Path(__file__).resolve().parents[3]
BUDGET = LatencyBudget(95, Duration(2_000))
SPEED = {"fp32": 1.0, "fp16": 0.9, "int8": 2.5}


def digits_space(**options: object) -> SearchSpace:
    base = read_config_file(BUNDLED_REPOSITORY / "digits" / "config.pbtxt")
    settings = {"precisions": ("fp32", "fp16", "int8"), "latency_limit": Duration(2_000)} | options
    return build_space(base, Platform(cpu_count=2), SpaceOptions(**settings))  # type: ignore[arg-type]


def small_space() -> SearchSpace:
    return digits_space(precisions=("fp32", "int8"), delays_us=(0, 500), tune_preferred=False)


def tiny_space() -> SearchSpace:
    return digits_space(precisions=("fp32",), delays_us=(0,))


def fake_measure(candidate: Candidate, _context: TrialContext | None = None) -> TrialOutcome:
    """A made-up model: batching, instances and int8 raise throughput; batches and the queue
    delay cost latency; fp16 fails the accuracy check; very slow configs are cut short."""
    speed = SPEED[str(candidate["precision"])]
    instances, threads = int(candidate["instance_count"]), int(candidate["intra_op_thread_count"])  # type: ignore[arg-type]
    parallel = instances + 0.5 * (threads - 1)
    throughput, latency = 1000 * speed * parallel, 300 / speed
    if candidate["dynamic_batching"]:
        size = int(candidate["max_batch_size"])  # type: ignore[arg-type]
        delay = int(candidate["max_queue_delay_microseconds"])  # type: ignore[arg-type]
        preferred = candidate["preferred_batch_size"] is not None
        throughput *= (1 + 0.5 * math.log2(size)) * (1 + 0.3 * delay / 5000)
        throughput *= 0.95 if preferred else 1.0
        latency = (300 + 50 * size) / speed / (1 + 0.3 * (threads - 1)) + 0.8 * delay
        latency += 100 if preferred else 0
    accuracy_ok = candidate["precision"] != "fp16"
    status = "pruned" if latency > 2 * BUDGET.limit_us else "ok"
    return TrialOutcome(status, throughput, latency, accuracy_ok, {"p50_us": latency / 2})


class Counting:
    """The fake evaluation, counting calls per candidate."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: Counter[str] = Counter()
        self.delay_s = delay_s
        self.lock = threading.Lock()

    def __call__(self, candidate: Candidate, _context: TrialContext | None = None) -> TrialOutcome:
        with self.lock:
            self.calls[candidate.key] += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        return fake_measure(candidate)


def settings(**changes: object) -> SearchSettings:
    values: dict[str, object] = {"budget": BUDGET, "study_name": "digits", "n_trials": 20}
    return SearchSettings(**(values | changes))  # type: ignore[arg-type]


def grid_optimum(space: SearchSpace) -> float:
    plain = settings()
    return max(o.throughput for o in map(fake_measure, grid(space)) if plain.feasible(o))


def test_optuna_finds_the_feasible_optimum() -> None:
    space = digits_space()
    optimum = grid_optimum(space)
    ratios, passed_over = [], 0
    for seed in range(5):
        result = run_search(space, Counting(), settings(n_trials=50, seed=seed))
        assert result.best is not None and result.best.feasible
        outcome = result.best.outcome
        assert outcome is not None
        assert outcome.latency_us is not None and outcome.latency_us <= BUDGET.limit_us
        assert outcome.accuracy_ok
        ratios.append(outcome.throughput / optimum)
        # configs faster than the best were all infeasible
        faster = [
            t for t in result.trials if t.outcome and t.outcome.throughput > outcome.throughput
        ]
        assert not any(t.feasible for t in faster)
        passed_over += len(faster)
    assert passed_over > 0
    assert min(ratios) >= 0.85, ratios
    assert sum(ratios) / len(ratios) >= 0.93, ratios


def test_runs_are_reproducible_with_a_seed() -> None:
    space = digits_space()
    keys = [
        [
            t.candidate.key
            for t in run_search(space, fake_measure, settings(seed=7)).trials
            if t.candidate
        ]
        for _ in range(2)
    ]
    assert keys[0] == keys[1]


def test_priors_are_the_first_trials() -> None:
    space = digits_space()
    priors = space.prior_candidates()
    result = run_search(space, fake_measure, settings(n_trials=len(priors) + 2))
    first = [t.candidate for t in result.trials[: len(priors)]]
    assert first == priors
    # digits' config is a point of its space: the first prior is the config as written
    assert [t.as_written for t in result.trials] == [True] + [False] * (len(priors) + 1)
    assert result.trials[0].candidate == space.as_written() == space.default_candidate()


def slow_digits_space(delays: tuple[int, ...] = (0, 500)) -> SearchSpace:
    """digits as SLOW_DIGITS_CONFIG has it: a 40 ms queue delay (beyond every delay tried)
    waiting for a full batch of 64, so its config as written is no point of the space."""
    base = read_config_file(BUNDLED_REPOSITORY / "digits" / "config.pbtxt")
    base.dynamic_batching.max_queue_delay_microseconds = 40_000
    base.dynamic_batching.preferred_batch_size.append(64)
    options = SpaceOptions(
        precisions=("fp32", "int8"), delays_us=delays, latency_limit=Duration(2_000)
    )
    return build_space(base, Platform(cpu_count=2), options)


class AsWritten(Counting):
    """The fake evaluation, and the config as written measured as a 40 ms one."""

    def __call__(self, candidate: Candidate, _context: TrialContext | None = None) -> TrialOutcome:
        if len(candidate) == 0:
            with self.lock:
                self.calls["as written"] += 1
            return TrialOutcome("pruned", 60.0, 40_000.0, True, {"p50_us": 40_000.0})
        return super().__call__(candidate)


def test_the_config_as_written_is_trial_0_even_outside_the_space(tmp_path: Path) -> None:
    space = slow_digits_space()
    assert space.as_written() == Candidate()  # snapped, it would be measured with 500 us
    storage = sqlite_url(tmp_path / "study.db")
    evaluate = AsWritten()
    result = run_search(space, evaluate, settings(n_trials=6, storage=storage))
    first = result.trials[0]
    assert first.number == 0 and first.as_written and first.candidate == Candidate()
    assert first.outcome is not None and first.outcome.latency_us == 40_000.0
    assert first.state == "PRUNED" and not first.feasible
    assert [t.number for t in result.trials if t.as_written] == [0]
    assert all(t.candidate in space for t in result.trials[1:])
    assert result.best is not None and not result.best.as_written
    assert evaluate.calls["as written"] == 1 and sum(evaluate.calls.values()) == 6
    told = _load("digits", storage)[0]
    assert told.params == {} and told.user_attrs["as_written"] is True
    assert told.constraints["latency"] == pytest.approx(40_000 / 2_000 - 1)

    again = AsWritten()
    resumed = run_search(space, again, settings(n_trials=8, storage=storage))
    assert again.calls["as written"] == 0 and sum(again.calls.values()) == 2
    assert [t.number for t in resumed.trials if t.as_written] == [0]


def test_grid_mode_measures_the_config_as_written_first() -> None:
    space = slow_digits_space((0,))
    evaluate = AsWritten()
    result = run_search(space, evaluate, settings(mode="grid", n_trials=None))
    assert result.trials[0].as_written and result.trials[0].candidate == Candidate()
    assert evaluate.calls["as written"] == 1
    assert sorted(k for k in evaluate.calls if k != "as written") == sorted(
        c.key for c in grid(space)
    )


def test_trial_states_follow_the_outcomes(tmp_path: Path) -> None:
    space = tiny_space()

    def evaluate(candidate: Candidate, _context: TrialContext | None = None) -> TrialOutcome:
        if candidate.get("max_batch_size") == 64:
            return TrialOutcome("pruned", 10.0, 9_000.0, True)
        if candidate["instance_count"] == 2:
            return TrialOutcome.failed("server refused the config")
        if candidate.get("max_batch_size") == 32:
            raise RuntimeError("analyzer lost the connection")
        return fake_measure(candidate)

    storage = sqlite_url(tmp_path / "study.db")
    result = run_search(space, evaluate, settings(mode="grid", n_trials=None, storage=storage))
    study = optuna.load_study(study_name="digits", storage=storage)
    assert {t.state for t in study.trials} == {
        TrialState.COMPLETE,
        TrialState.PRUNED,
        TrialState.FAIL,
    }
    by_number = {t.number: t for t in study.trials}
    for record in result.trials:
        trial = by_number[record.number]
        assert record.outcome is not None and record.candidate is not None
        assert trial.state.name == record.state
        if record.candidate.get("max_batch_size") == 64:
            assert record.state == "PRUNED"
            assert trial.constraints["latency"] == pytest.approx(9_000 / 2_000 - 1)
            assert not record.feasible
        elif record.candidate["instance_count"] == 2:
            assert record.state == "FAIL"
            assert record.outcome.message == "server refused the config"
        elif record.candidate.get("max_batch_size") == 32:
            assert record.state == "FAIL"
            assert "RuntimeError: analyzer lost the connection" in record.outcome.message
        else:
            assert record.state == "COMPLETE"
            assert trial.value == pytest.approx(record.outcome.throughput)
            assert set(trial.constraints) == {"latency", "accuracy"}
    assert result.best is not None and result.best.state == "COMPLETE"


def test_infeasible_trials_are_told_with_their_constraints(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "study.db")
    result = run_search(
        small_space(), fake_measure, settings(n_trials=12, min_throughput=5_000, storage=storage)
    )
    constraints = {t.number: t.constraints for t in _load("digits", storage)}
    for record in result.trials:
        assert record.outcome is not None
        told = constraints[record.number]
        assert told["throughput"] == pytest.approx(1 - record.outcome.throughput / 5_000)
        assert told["accuracy"] == (0.0 if record.outcome.accuracy_ok else 1.0)
        assert record.feasible == (record.state == "COMPLETE" and max(told.values()) <= 0)
    assert result.best is not None and result.best.outcome is not None
    assert result.best.outcome.throughput >= 5_000


def _load(name: str, storage: str) -> list[optuna.trial.FrozenTrial]:
    try:
        return optuna.load_study(study_name=name, storage=open_storage(storage)).trials
    except KeyError:  # not created yet
        return []


def test_no_feasible_config_reports_the_lowest_latency() -> None:
    space = small_space()
    tight = settings(budget=LatencyBudget(95, Duration(50)), n_trials=8)
    result = run_search(space, fake_measure, tight)
    assert result.best is None
    lowest = result.lowest_latency
    assert lowest is not None and lowest.outcome is not None
    measured = [t.outcome.latency_us for t in result.trials if t.outcome]
    assert lowest.outcome.latency_us == min(measured)  # type: ignore[type-var]


def test_resume_continues_the_same_study(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "reports" / "run" / "study.db")
    space = digits_space()
    first = Counting()
    run_search(space, first, settings(n_trials=5, storage=storage))
    assert (tmp_path / "reports" / "run" / "study.db").is_file()
    second = Counting()
    result = run_search(space, second, settings(n_trials=8, storage=storage))
    assert sum(second.calls.values()) == 3
    assert not set(first.calls) & set(second.calls)
    measured = [t for t in result.trials if t.reused_from is None]
    assert [t.number for t in measured] == list(range(8))
    assert len(optuna.get_all_study_names(storage)) == 1
    again = Counting()
    result = run_search(space, again, settings(n_trials=8, storage=storage))
    assert not again.calls and result.stop_reason == "8 trials done"


def test_resume_refuses_another_objective(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "study.db")
    run_search(small_space(), fake_measure, settings(n_trials=2, storage=storage))
    with pytest.raises(SearchError, match=r"p95 <= 2 ms -> p95 <= 3 ms"):
        run_search(
            small_space(),
            fake_measure,
            settings(budget=LatencyBudget(95, Duration(3_000)), storage=storage),
        )
    with pytest.raises(SearchError, match="already exists"):
        run_search(small_space(), fake_measure, settings(storage=storage, load_if_exists=False))


def test_measured_candidates_are_not_measured_again() -> None:
    space = small_space()  # 3 x 2 x 13 = 78 candidates: TPE soon proposes repeats
    counting = Counting()
    result = run_search(space, counting, settings(n_trials=40, seed=1, method="tpe"))
    assert max(counting.calls.values()) == 1
    reused = [t for t in result.trials if t.reused_from is not None]
    assert reused and result.reused_here == len(reused)
    by_number = {t.number: t for t in result.trials}
    for trial in reused:
        original = by_number[trial.reused_from]  # type: ignore[index]
        assert trial.candidate == original.candidate and trial.outcome == original.outcome
        assert trial.state == original.state
    assert result.measured_here == len(counting.calls)


def test_the_search_stops_when_the_space_is_measured() -> None:
    space = small_space()
    counting = Counting()
    result = run_search(space, counting, settings(n_trials=500, seed=2))
    assert len(counting.calls) <= space.size
    assert result.stop_reason in (
        "every candidate of the space has been measured",
        "converged (25 proposals in a row were measured already)",
    )


def test_grid_mode_measures_every_candidate_once() -> None:
    space = small_space()
    counting = Counting()
    result = run_search(space, counting, settings(mode="grid", n_trials=None))
    assert sorted(counting.calls) == sorted(c.key for c in grid(space))
    assert set(counting.calls.values()) == {1}
    assert result.best is not None and result.best.outcome is not None
    assert result.best.outcome.throughput == grid_optimum(space)
    assert result.stop_reason == "every candidate of the space has been measured"


def test_time_budget_stops_before_a_trial_that_cannot_finish() -> None:
    now = [0.0]

    def slow(candidate: Candidate, _context: TrialContext | None = None) -> TrialOutcome:
        now[0] += 10.0
        return fake_measure(candidate)

    result = run_search(
        small_space(),
        slow,
        settings(n_trials=50, time_budget=Duration.from_s(35)),
        clock=lambda: now[0],
    )
    assert result.measured_here == 3  # at 30 s, 5 s are left and a trial takes 10
    assert result.stop_reason.startswith("time budget spent")


def test_progress_reports_each_trial() -> None:
    events: list[ProgressEvent] = []
    run_search(small_space(), fake_measure, settings(n_trials=3), progress=events.append)
    assert [e.kind for e in events] == ["start"] + ["trial_start", "trial_end"] * 3 + ["end"]
    assert [e.done for e in events if e.kind == "trial_end"] == [1, 2, 3]
    assert events[-1].stop_reason == "3 trials done" and events[-1].best is not None
    assert all(e.total == 3 for e in events)


def test_interrupted_evaluation_is_failed_and_measured_again_on_resume(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "study.db")

    def interrupted(candidate: Candidate, _context: TrialContext | None = None) -> TrialOutcome:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_search(small_space(), interrupted, settings(storage=storage))
    trial = _load("digits", storage)[0]
    assert trial.state == TrialState.FAIL and "outcome" not in trial.user_attrs
    counting = Counting()
    # the priors the first run queued come first, then the config as written again
    n_trials = len(small_space().prior_candidates()) + 1
    result = run_search(small_space(), counting, settings(n_trials=n_trials, storage=storage))
    assert trial.user_attrs["key"] in counting.calls
    assert sum(1 for t in result.trials if t.interrupted) == 1


def test_stale_running_trials_do_not_block_a_resume(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "study.db")
    run_search(small_space(), fake_measure, settings(n_trials=2, storage=storage))
    study = optuna.load_study(study_name="digits", storage=storage)
    dead = study.ask()  # left by a process that is gone
    dead.set_user_attr(WORKER, {"host": os.uname().nodename, "pid": _dead_pid(), "id": "x"})
    silent = study.ask()  # another host's, whose heartbeat stopped long ago
    silent.set_user_attr(WORKER, {"host": "elsewhere", "pid": 1, "id": "y"})
    silent.set_user_attr("heartbeat", time.time() - 3_600)
    alive = study.ask()  # another host's, still beating
    alive.set_user_attr(WORKER, {"host": "elsewhere", "pid": 1, "id": "z"})
    alive.set_user_attr("heartbeat", time.time())
    assert fail_stale_trials(study, stale_after_s=120) == [dead.number, silent.number]
    study.tell(alive, state=TrialState.FAIL)
    result = run_search(small_space(), fake_measure, settings(n_trials=4, storage=storage))
    assert result.stop_reason == "4 trials done"
    assert all(t.state != "RUNNING" for t in result.trials)


def test_a_trial_asked_but_never_claimed_does_not_count(tmp_path: Path) -> None:
    # A process killed between asking a trial and claiming it leaves it RUNNING with no
    # worker: once claim_within_s has passed, the next run fails it, so it does not stand for
    # a measurement (its heartbeat staleness would take minutes).
    storage = sqlite_url(tmp_path / "study.db")
    run_search(small_space(), fake_measure, settings(n_trials=2, storage=storage))
    study = optuna.load_study(study_name="digits", storage=storage)
    orphan = study.ask()
    counting = Counting()
    time.sleep(0.05)
    resumed = replace(settings(n_trials=4, storage=storage), claim_within_s=0.01)
    result = run_search(small_space(), counting, resumed)
    assert len(counting.calls) == 2
    assert result.stop_reason == "4 trials done"
    (failed,) = [t for t in result.trials if t.number == orphan.number]
    assert failed.interrupted


def test_a_trial_asked_but_never_claimed_does_not_count_even_at_once(tmp_path: Path) -> None:
    # Resumed within claim_within_s of the orphan's ask (a run killed in its ask and started
    # again at once): the orphan might still be claimed, so it is waited for until
    # claim_within_s has passed (not for the minutes its heartbeat would take to go stale),
    # then failed, and it never stands for a measurement.
    storage = sqlite_url(tmp_path / "study.db")
    run_search(small_space(), fake_measure, settings(n_trials=2, storage=storage))
    study = optuna.load_study(study_name="digits", storage=storage)
    orphan = study.ask()
    counting = Counting()
    resumed = replace(settings(n_trials=4, storage=storage), claim_within_s=1.0)
    began = time.monotonic()
    result = run_search(small_space(), counting, resumed)
    assert time.monotonic() - began < 60  # the heartbeat's stale_after_s is 120 s
    assert len(counting.calls) == 2
    assert result.stop_reason == "4 trials done"
    (failed,) = [t for t in result.trials if t.number == orphan.number]
    assert failed.interrupted


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


_WORKER_SCRIPT = """
import sys, time
from pathlib import Path
from tests.unit.tuner import test_tuner_search as t
from tuner.search import run_search
mode, storage, n_trials, delay = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
if len(sys.argv) > 6:  # a start line: say ready, then wait for the go
    barrier = Path(sys.argv[6])
    (barrier / f"ready-{sys.argv[7]}").touch()
    deadline = time.monotonic() + 60
    while not (barrier / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
space = t.tiny_space() if mode == "grid" else t.small_space()
result = run_search(space, t.Counting(delay), t.settings(
    mode=mode, storage=storage, n_trials=n_trials or None, seed=int(sys.argv[5])))
print("measured", result.measured_here, flush=True)
"""


def _worker(
    mode: str, storage: str, n_trials: int, delay_s: float, seed: int, start_line: str = ""
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            _WORKER_SCRIPT,
            mode,
            storage,
            str(n_trials),
            str(delay_s),
            str(seed),
            *start_line.split(),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_killed_run_resumes(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "study.db")
    # A measurement longer than the test: the kill always lands inside it, however slowly the
    # polling below reads the study (with 0.5 s trials a busy machine let one finish between
    # the read and the kill, and the kill found no trial running).
    process = _worker("optuna", storage, 10, 600, 0)
    deadline = time.monotonic() + 60
    while not (
        (tmp_path / "study.db").exists()
        and any(
            t.state == TrialState.RUNNING and "heartbeat" in t.user_attrs
            for t in _load("digits", storage)
        )
    ):
        assert time.monotonic() < deadline, "no trial was ever measured"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert any(t.state == TrialState.RUNNING for t in _load("digits", storage))
    result = run_search(small_space(), Counting(), settings(n_trials=10, storage=storage))
    assert result.stop_reason == "10 trials done"
    assert sum(t.interrupted for t in result.trials) >= 1
    assert all(t.state != "RUNNING" for t in result.trials)


@pytest.mark.parametrize("mode", ["optuna", "grid"])
def test_processes_sharing_a_study_split_the_trials(tmp_path: Path, mode: str) -> None:
    storage = sqlite_url(tmp_path / "shared.db")
    n_trials = 12 if mode == "optuna" else 0
    # Both start searching together (a slow start of one, on a busy machine, would otherwise
    # leave it nothing to do).
    workers = [_worker(mode, storage, n_trials, 0.1, 0, f"{tmp_path} {index}") for index in (0, 1)]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{i}").exists() for i in (0, 1)):
        assert time.monotonic() < deadline, "the workers never started"
        time.sleep(0.01)
    (tmp_path / "go").touch()
    measured = []
    for process in workers:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        measured.append(int(out.split()[-1]))
    assert all(m > 0 for m in measured), measured
    trials = _load("digits", storage)
    assert all(t.state != TrialState.RUNNING for t in trials)
    counted = [t for t in trials if "outcome" in t.user_attrs and "reused_from" not in t.user_attrs]
    # No trial lost or run twice: every measurement is a trial of the study.
    assert len(counted) == sum(measured)
    if mode == "optuna":
        assert len(counted) == 12
    else:
        assert {t.user_attrs["key"] for t in counted} == {c.key for c in grid(tiny_space())}


def test_threads_sharing_a_study_split_the_trials(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "shared.db")
    results = []
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            results.append(
                run_search(
                    small_space(), Counting(0.02), settings(n_trials=10, storage=storage, seed=seed)
                )
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    assert sum(r.measured_here for r in results) == 10
    assert all(r.measured_here > 0 for r in results)


@pytest.mark.parametrize("state", [None, TrialState.FAIL, TrialState.PRUNED])
def test_a_trial_another_worker_told_first_is_not_told_again(
    tmp_path: Path, state: TrialState | None
) -> None:
    # The race CI met with two workers on SQLite: the other worker's tell lands after this
    # worker set the trial's attributes and before its own tell.
    storage = sqlite_url(tmp_path / "shared.db")
    mine = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    theirs = optuna.load_study(study_name="s", storage=storage)
    trial = mine.ask()
    theirs.tell(trial.number, 2.0)
    value = 1.0 if state is None else None
    assert tell_first(mine, trial, value, state=state) is False
    assert theirs.trials[trial.number].value == 2.0


@pytest.mark.parametrize("step", ["pop the queued trial", "tell the trial"])
def test_two_workers_on_one_sqlite_file_never_both_take_a_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    # Optuna reads a trial's state, then writes the new one, in one transaction "for update";
    # SQLite has no row locks, so unless the transaction takes the write lock as it begins,
    # two workers both read WAITING (or RUNNING) and both pop (or tell) the trial: CI once
    # counted 14 measurements for 12 trials. Worker A is held between its read and its write
    # until worker B has read too, or for 2 s when B cannot read (the fix).
    url = sqlite_url(tmp_path / "shared.db")
    storage_a, storage_b = open_storage(url), open_storage(url)
    assert isinstance(storage_a, optuna.storages.RDBStorage)
    assert isinstance(storage_b, optuna.storages.RDBStorage)
    study_a = optuna.create_study(study_name="s", storage=storage_a, direction="maximize")
    study_b = optuna.load_study(study_name="s", storage=storage_b)
    study_a.enqueue_trial({})
    if step == "tell the trial":
        trial = study_a.ask()
    a_has_read, b_has_read = threading.Event(), threading.Event()
    checked_by_a = storage_a.check_trial_is_updatable
    checked_by_b = storage_b.check_trial_is_updatable

    def a_checks(trial_id: int, state: TrialState) -> None:
        checked_by_a(trial_id, state)
        if not a_has_read.is_set():
            a_has_read.set()
            b_has_read.wait(timeout=2)

    def b_checks(trial_id: int, state: TrialState) -> None:
        b_has_read.set()
        checked_by_b(trial_id, state)

    monkeypatch.setattr(storage_a, "check_trial_is_updatable", a_checks)
    monkeypatch.setattr(storage_b, "check_trial_is_updatable", b_checks)
    outcome: dict[str, int | bool] = {}

    def worker_b() -> None:
        assert a_has_read.wait(timeout=30)
        if step == "pop the queued trial":
            outcome["b"] = study_b.ask().number
        else:
            outcome["b"] = tell_first(study_b, trial, 2.0)  # the same trial, told through B

    thread = threading.Thread(target=worker_b)
    thread.start()
    if step == "pop the queued trial":
        outcome["a"] = study_a.ask().number
    else:
        outcome["a"] = tell_first(study_a, trial, 1.0)
    thread.join(timeout=30)
    if step == "pop the queued trial":
        assert outcome["a"] != outcome["b"], outcome
    else:
        assert sorted([outcome["a"], outcome["b"]]) == [False, True], outcome
        told = study_a.trials[trial.number].value
        assert told == (1.0 if outcome["a"] else 2.0)


def test_a_worker_waits_for_an_earlier_trial_to_decide_before_taking_the_last_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race CI met (15 measurements for 14 trials): worker A has asked the trial of the
    # last measurement but not yet claimed it; worker B, looking then, counted it for nothing
    # and measured one more. A is held between its ask and its claim until B has finished,
    # or for 1 s when B waits for A's decision (the fix).
    storage = sqlite_url(tmp_path / "shared.db")
    counting = Counting()
    assert run_search(small_space(), counting, settings(n_trials=1, storage=storage)).measured_here
    b_done = threading.Event()
    claim = optuna.trial.Trial.set_user_attr

    def a_claims_late(trial: optuna.trial.Trial, key: str, value: object) -> None:
        if key == WORKER and threading.current_thread().name == "A":
            b_done.wait(timeout=1)
        claim(trial, key, value)

    monkeypatch.setattr(optuna.trial.Trial, "set_user_attr", a_claims_late)
    results = {}

    def work(name: str) -> None:
        results[name] = run_search(small_space(), counting, settings(n_trials=2, storage=storage))
        if name == "B":
            b_done.set()

    a = threading.Thread(target=work, args=("A",), name="A")
    a.start()
    deadline = time.monotonic() + 30
    while not any(t.state == TrialState.RUNNING for t in _load("digits", storage)):
        assert time.monotonic() < deadline, "worker A never asked its trial"
        time.sleep(0.01)
    b = threading.Thread(target=work, args=("B",), name="B")
    b.start()
    for thread in (a, b):
        thread.join(timeout=60)
    assert results["A"].measured_here == 1 and results["B"].measured_here == 0, results
    assert sum(counting.calls.values()) == 2


def test_telling_a_trial_wrongly_still_raises(tmp_path: Path) -> None:
    study = optuna.create_study(storage=sqlite_url(tmp_path / "s.db"), direction="maximize")
    with pytest.raises(ValueError, match="state"):
        tell_first(study, study.ask(), state=TrialState.WAITING)
