"""The Optuna study behind the search: storage, workers, dead trials, and reading trials back.

Each trial carries user attributes the loop relies on: "key" and "candidate" (what was tried),
"worker" (who runs it), "heartbeat" (wall time, refreshed while it is measured), "outcome"
(the `TrialOutcome`, once told), "reused_from" (when an earlier measurement was reused),
"waiting_for" (while another worker's trial measures the same candidate: this one then reuses
its outcome) and "as_written" (on the trial that measures the model's config exactly as
written).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import socket
import sqlite3
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, Trial, TrialState
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from common.invariant import InvariantError, present
from tuner.candidate import Candidate
from tuner.pruning import SaturationPruner
from tuner.search_types import SearchError, SearchSettings, TrialOutcome, TrialRecord

log = logging.getLogger(__name__)

KEY, CANDIDATE, WORKER, HEARTBEAT = "key", "candidate", "worker", "heartbeat"
OUTCOME, REUSED_FROM, SURPLUS = "outcome", "reused_from", "surplus"
WAITING_FOR, MEASURING = "waiting_for", "measuring"
AS_WRITTEN = "as_written"
_OBJECTIVE = "objective"
_WORKER_PREFIX = "worker:"
_SQLITE_TIMEOUT_S = 60
_CONNECT_TIMEOUT_S = 10


def sqlite_url(path: Path) -> str:
    """The storage URL of a SQLite file (absolute, so the study does not move with the cwd)."""
    return f"sqlite:///{path.resolve()}"


def open_storage(url: str | None) -> optuna.storages.BaseStorage | None:
    """An RDB storage for `url` (None: in memory); SearchError naming the URL (its password
    hidden) when it cannot be opened, or the extra to install when its driver is missing.

    A SQLite file gets its folder created, a generous lock timeout (several workers may write
    to one file), write-ahead logging with synchronous=NORMAL (each of Optuna's many small
    commits then costs no fsync, and a killed process still leaves a consistent database: only
    a power cut may lose the last commits), and transactions that take the write lock as they
    begin: Optuna reads a trial's state and writes the next one in one transaction "for
    update", which SQLite, having no row locks, would otherwise let two workers interleave,
    both popping the same queued trial or both telling the same trial. A server (PostgreSQL)
    gets its pooled connections checked before use: a long run outlives a server restart or
    an idle timeout."""
    if url is None:
        return None
    shown = printable_url(url)
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise SearchError(f"study storage {shown} is not a storage URL: {exc}") from None
    engine_kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
            engine_kwargs["creator"] = functools.partial(_connect_sqlite, database)
        else:
            engine_kwargs["connect_args"] = {"timeout": _SQLITE_TIMEOUT_S}
    else:
        engine_kwargs["pool_pre_ping"] = True
        if parsed.get_backend_name() == "postgresql":
            engine_kwargs["connect_args"] = {"connect_timeout": _CONNECT_TIMEOUT_S}
    for attempt in range(5):
        try:
            storage = optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs)
            if "creator" in engine_kwargs:
                event.listen(storage.engine, "begin", _begin_immediate)
            return storage
        except ImportError as exc:
            raise SearchError(_missing_driver(url, exc)) from None
        except ArgumentError as exc:  # no such kind of database
            hint = " (PostgreSQL's is postgresql://)" if parsed.drivername == "postgres" else ""
            raise SearchError(
                f"study storage {shown} is not a usable storage URL{hint}: {exc}"
            ) from None
        except SQLAlchemyError as exc:
            # Two workers creating the tables of a new study storage at once: one of them loses.
            if attempt == 4:
                reason = str(exc).split("\n(Background on this error")[0]
                raise SearchError(f"cannot open study storage {shown}: {reason}") from None
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def printable_url(url: str) -> str:
    """The storage URL as it may be shown: its password, if any, masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url if "@" not in url else "(an unparsable storage URL)"


def _missing_driver(url: str, exc: ImportError) -> str:
    shown = printable_url(url)
    cause = exc.__cause__ if isinstance(exc.__cause__, ImportError) else exc
    module = cause.name or "its database driver"
    if make_url(url).get_backend_name() == "postgresql" and module == "psycopg":
        return (
            f"study storage {shown} needs PostgreSQL's driver psycopg, which is not installed: "
            "pip install 'autotune[postgres]'"
        )
    return f"study storage {shown} needs the Python module {module}, which is not installed"


def _connect_sqlite(database: str) -> sqlite3.Connection:
    connection = sqlite3.connect(database, timeout=_SQLITE_TIMEOUT_S, check_same_thread=False)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    # sqlite3 would begin its own deferred transactions; SQLAlchemy's "begin" event does it.
    connection.isolation_level = None
    return connection


def _begin_immediate(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN IMMEDIATE")


def open_study(settings: SearchSettings, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
    """Create the study, or load it (resume) when `load_if_exists`; SearchError when it exists
    and may not be resumed, or was made for another objective."""
    storage = open_storage(settings.storage)
    where = printable_url(settings.storage) if settings.storage else "memory"
    try:
        study = optuna.create_study(
            storage=storage,
            sampler=sampler,
            study_name=settings.study_name,
            direction="maximize",
            load_if_exists=settings.load_if_exists,
            pruner=SaturationPruner(),
        )
    except optuna.exceptions.DuplicatedStudyError:
        raise SearchError(
            f"study '{settings.study_name}' already exists in {where}: resume it or choose "
            "another study name"
        ) from None
    _check_objective(study, settings)
    return study


def objective_of(settings: SearchSettings) -> dict[str, str]:
    """What a study is made for: the budget, the constraints and the run's fingerprint,
    stored on the study so that a resume with another objective is refused."""
    objective = {"latency": settings.budget.describe(), "limit_us": f"{settings.budget.limit_us:g}"}
    if settings.min_throughput is not None:
        objective["min_throughput"] = f"{settings.min_throughput:g}"
    if settings.max_gpu_memory_bytes is not None:
        objective["max_gpu_memory_bytes"] = str(settings.max_gpu_memory_bytes)
    return objective | dict(settings.fingerprint)


def stored_objective(url: str, study_name: str) -> dict[str, str] | None:
    """The objective a study in `url` was made for (None when there is no such study, or it
    holds none yet): to refuse a resume before doing any work for it."""
    storage = present(open_storage(url), "a URL always opens a storage")
    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:  # Optuna's "no such study"
        return None
    stored = study.user_attrs.get(_OBJECTIVE)
    return dict(stored) if isinstance(stored, dict) else None


def _check_objective(study: optuna.Study, settings: SearchSettings) -> None:
    wanted = objective_of(settings)
    stored = study.user_attrs.get(_OBJECTIVE)
    if stored is None:
        study.set_user_attr(_OBJECTIVE, wanted)
    elif stored != wanted:
        changed = ", ".join(
            f"{k}: {stored.get(k, '(none)')} -> {wanted.get(k, '(none)')}"
            for k in sorted(set(stored) | set(wanted))
            if stored.get(k) != wanted.get(k)
        )
        raise SearchError(
            f"study '{settings.study_name}' was made for another objective ({changed}); "
            "use another study name to start afresh"
        )


class Worker:
    """This process's identity in the study; its rank among the study's workers spreads
    parallel workers over different seeds and grid points."""

    def __init__(self, study: optuna.Study) -> None:
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        started = time.time()
        study.set_user_attr(f"{_WORKER_PREFIX}{self.id}", started)
        workers = sorted(
            (float(value), name)
            for name, value in study.user_attrs.items()
            if name.startswith(_WORKER_PREFIX)
        )
        self.rank = [name for _, name in workers].index(f"{_WORKER_PREFIX}{self.id}")

    def attrs(self) -> dict[str, Any]:
        return {"host": self.host, "pid": self.pid, "id": self.id}


def tell_first(
    study: optuna.Study,
    trial: Trial,
    value: float | None = None,
    *,
    state: TrialState | None = None,
) -> bool:
    """Tell `trial`; False when another worker finished it first (it took the trial for dead:
    no heartbeat for `stale_after_s`, or no claim within `claim_within_s` of its ask)."""
    try:
        study.tell(trial, value, state=state)
    except optuna.exceptions.UpdateFinishedTrialError:
        return False
    except ValueError:
        # Optuna reads the stored state before it writes: a finished trial is refused here.
        if _is_finished(study, trial.number):
            return False
        raise
    return True


def _is_finished(study: optuna.Study, number: int) -> bool:
    return any(
        t.number == number and t.state.is_finished() for t in study.get_trials(deepcopy=False)
    )


def fail_stale_trials(
    study: optuna.Study,
    stale_after_s: float,
    now: float | None = None,
    claim_within_s: float = math.inf,
) -> list[int]:
    """Mark RUNNING trials whose process is gone as FAIL (they hold no outcome, so they are
    neither reused nor counted): on this host when the pid is dead, anywhere when the
    heartbeat (or the start, before the first beat) is older than `stale_after_s`, and a
    trial no worker claimed within `claim_within_s` of being asked (a worker claims its trial
    at once: its asker died in between)."""
    now = time.time() if now is None else now
    host = socket.gethostname()
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if not _is_stale(trial, host, stale_after_s, now, claim_within_s):
            continue
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            study.tell(trial.number, state=TrialState.FAIL, skip_if_finished=True)
            failed.append(trial.number)
    if failed:
        log.info(
            "study %s: trials %s were left running by a dead process; marked failed",
            study.study_name,
            failed,
        )
    return failed


def _is_stale(
    trial: FrozenTrial, host: str, stale_after_s: float, now: float, claim_within_s: float
) -> bool:
    worker = trial.user_attrs.get(WORKER)
    started = trial.datetime_start
    if worker is None and started is not None and now - started.timestamp() > claim_within_s:
        return True
    if isinstance(worker, Mapping) and worker.get("host") == host:
        pid = int(worker.get("pid", 0))
        if pid != os.getpid() and not _pid_alive(pid):
            return True
    beat = trial.user_attrs.get(HEARTBEAT)
    if beat is None and trial.datetime_start is not None:
        beat = trial.datetime_start.timestamp()
    return beat is not None and now - float(beat) > stale_after_s


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def heartbeat(trial: Trial, interval_s: float) -> Iterator[None]:
    """Refresh the trial's heartbeat from a thread while the body runs."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval_s):
            try:
                trial.set_user_attr(HEARTBEAT, time.time())
            except Exception as exc:  # storage busy or trial taken over: keep measuring
                log.debug("heartbeat of trial %d failed: %s", trial.number, exc)

    trial.set_user_attr(HEARTBEAT, time.time())
    thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def record_of(trial: FrozenTrial, settings: SearchSettings) -> TrialRecord:
    """A stored trial as the loop and the reports see it; an outcome stored but never told (its
    process died first) is dropped."""
    attrs = trial.user_attrs
    candidate = Candidate.from_json(attrs[CANDIDATE]) if CANDIDATE in attrs else None
    outcome = TrialOutcome.from_json(attrs[OUTCOME]) if OUTCOME in attrs else None
    state = trial.state.name
    if outcome is not None and state != _TOLD_AS[outcome.status]:
        outcome = None  # stored, but the process died before telling it: not a result
    duration = trial.duration.total_seconds() if trial.duration is not None else None
    worker = attrs.get(WORKER)
    return TrialRecord(
        number=trial.number,
        state=state,  # type: ignore[arg-type]  # TrialState names are the Literal's values
        candidate=candidate,
        outcome=outcome,
        feasible=state == "COMPLETE" and outcome is not None and settings.feasible(outcome),
        duration_s=duration,
        reused_from=attrs.get(REUSED_FROM),
        worker=str(worker.get("id", "")) if isinstance(worker, Mapping) else "",
        as_written=bool(attrs.get(AS_WRITTEN, False)),
        measuring=bool(attrs.get(MEASURING, False)),
        waiting=WAITING_FOR in attrs,
    )


_TOLD_AS = {"ok": "COMPLETE", "pruned": "PRUNED", "failed": "FAIL"}


def counts(record: TrialRecord) -> bool:
    """Whether a trial counts toward n_trials: a measurement, done or under way. Reused
    outcomes cost nothing and interrupted trials gave nothing, so neither counts. A running
    trial counts once its worker has decided to measure it (see `TrialRecord.undecided`: a
    worker deciding whether the last measurement is still to take waits for earlier trials
    to decide first)."""
    if record.state == "RUNNING":
        return record.measuring
    return record.outcome is not None and record.reused_from is None


def best_of(records: list[TrialRecord]) -> TrialRecord | None:
    """Highest throughput among feasible trials; ties go to the lower latency, then the
    earlier trial."""
    feasible = [r for r in records if r.feasible and r.outcome is not None]
    return min(feasible, key=_rank, default=None)


def _rank(record: TrialRecord) -> tuple[float, float, int]:
    outcome = present(record.outcome, "only finished trials are ranked")
    latency = outcome.latency_us if outcome.latency_us is not None else 0.0
    return (-outcome.throughput, latency, record.number)


@contextlib.contextmanager
def quiet_experimental() -> Iterator[None]:
    """Silence Optuna's ExperimentalWarning for the TPE options used here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        yield


class FixedSampler(optuna.samplers.BaseSampler):
    """Answers every suggestion from `params`, set before each ask: grid mode's sampler.

    A parameter it was not given (a trial popped from the queue takes another branch) gets
    the first choice, which keeps the candidate inside the space."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, optuna.distributions.BaseDistribution]:
        return {}

    def sample_relative(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        search_space: dict[str, optuna.distributions.BaseDistribution],
    ) -> dict[str, Any]:
        return {}

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: optuna.distributions.BaseDistribution,
    ) -> Any:
        if param_name in self.params:
            return self.params[param_name]
        if not isinstance(param_distribution, optuna.distributions.CategoricalDistribution):
            raise InvariantError("every parameter of the space is categorical")
        return param_distribution.choices[0]
