"""A candidate another worker is measuring is waited for and reused, not measured twice."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import optuna
from optuna.trial import TrialState

from tests.unit.tuner.test_tuner_search import Counting, fake_measure, settings, small_space
from tuner.candidate import Candidate
from tuner.search import run_search
from tuner.search_study import (
    CANDIDATE,
    HEARTBEAT,
    KEY,
    MEASURING,
    OUTCOME,
    WAITING_FOR,
    WORKER,
    open_storage,
    sqlite_url,
)
from tuner.search_types import TrialContext, TrialOutcome


def test_a_candidate_in_flight_elsewhere_is_waited_for_and_reused(tmp_path: Path) -> None:
    storage = sqlite_url(tmp_path / "study.db")
    space = small_space()
    wanted = space.prior_candidates()[-1]
    study = optuna.create_study(
        storage=open_storage(storage), study_name="digits", direction="maximize"
    )
    # Another live worker (this process, as far as stale checks go) measures `wanted` now...
    other = study.ask()
    other.set_user_attr(WORKER, {"host": socket.gethostname(), "pid": os.getpid(), "id": "other"})
    other.set_user_attr(HEARTBEAT, time.time())
    other.set_user_attr(KEY, wanted.key)
    other.set_user_attr(CANDIDATE, wanted.to_json())
    other.set_user_attr(MEASURING, True)
    # ...and the same candidate waits in the queue: this worker asks it first.
    study.enqueue_trial(
        space.params_for(wanted), user_attrs={KEY: wanted.key, CANDIDATE: wanted.to_json()}
    )
    measured_here = threading.Event()
    counting = Counting()

    def evaluate(candidate: Candidate, context: TrialContext | None = None) -> TrialOutcome:
        if candidate.key == wanted.key:
            measured_here.set()
        return counting(candidate, context)

    def finish_other() -> None:
        # Tell the other worker's trial once this worker waits for it, or has measured the
        # candidate itself (the bug this guards).
        watcher = optuna.load_study(study_name="digits", storage=open_storage(storage))
        deadline = time.monotonic() + 60
        while not measured_here.is_set() and time.monotonic() < deadline:
            if any(WAITING_FOR in t.user_attrs for t in watcher.get_trials(deepcopy=False)):
                break
            time.sleep(0.05)
        outcome = fake_measure(wanted)
        other.set_user_attr(OUTCOME, outcome.to_json())
        study.tell(other, outcome.throughput)

    finisher = threading.Thread(target=finish_other)
    finisher.start()
    try:
        result = run_search(space, evaluate, settings(n_trials=3, storage=storage))
    finally:
        finisher.join(timeout=120)
    assert wanted.key not in counting.calls, "measured while another worker measured it"
    (reused,) = [t for t in result.trials if t.number == 1]
    assert reused.reused_from == other.number
    trials = optuna.load_study(study_name="digits", storage=open_storage(storage)).trials
    assert trials[1].user_attrs[WAITING_FOR] == other.number
    assert all(t.state != TrialState.RUNNING for t in trials)
