"""How much the machine's speed moved while the exhaustive grid of benchmarks/tuner_quality.py
was measured.

The grid takes over an hour on 2 cores; a shared machine (other processes, or other virtual
machines on the same host) can slow it by half for minutes at a time, and then candidates
measured at different moments are not comparable (the first full grid of digits, 2026-12-02,
saw the same kind of candidate measured 1.5x faster in its last 20 minutes than in its first
hour). So the grid is measured in chunks, and before the first and after every chunk one
reference candidate (the config as written) is measured again on a fresh server, warmed by a
first measurement that is not kept: the spread of those measurements (highest / lowest) is the
grid's drift, kept with the grid's results and printed with every comparison made against it.
On this machine two such measurements a minute apart differed by up to 14% (2026-12-02), so the
limit (1.10) flags any grid measured while the host was noisy.

Scaling each candidate by the reference measured around it was tried on the second grid
(2026-12-02) and made things worse: consecutive references four minutes apart differed by up
to 1.8x (6.9k to 16.3k infer/s over the grid), far more than the machine's slow drift, so the
scaling carried one reference's noise into every candidate near it. What decides is the live
re-measure of the winners, interleaved on one server (benchmarks/tuner_quality.py).

The series is kept beside the grid, benchmarks/results/tuner_quality-<model>-<space>.reference.json
(results_record's header, the model, the drift and every reference measurement: its time,
throughput and status). Used by benchmarks/tuner_quality.py; not a script.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from results_record import header, write_record

from tuner.evaluate import EvaluationSettings
from tuner.group_evaluate import GroupEvaluator
from tuner.group_members import add_variants, prepare_member
from tuner.model_run import model_evaluator
from tuner.run import Hooks, TuneOptions
from tuner.server_control import TuningServer, tuning_server
from tuner.space import SearchSpace


class Setup(Protocol):
    """What these functions need of tuner_quality's Setup: one model's benchmark."""

    @property
    def model(self) -> str: ...

    @property
    def options(self) -> TuneOptions: ...

    @property
    def space(self) -> SearchSpace: ...

    @property
    def stem(self) -> Path: ...


# Above this drift (highest / lowest reference throughput) the grid's figures are flagged.
DRIFT_LIMIT = 1.10


@dataclass(frozen=True)
class LiveModel:
    """A private tuning server with the model and its precision variants, and the trial
    evaluator that loads and measures candidates on it."""

    server: TuningServer
    evaluator: GroupEvaluator
    evaluation: EvaluationSettings


@contextmanager
def live_model(bench: Setup) -> Iterator[LiveModel]:
    member = prepare_member(bench.options, bench.model, Hooks(), alone=True)
    work = Path(tempfile.mkdtemp(prefix="tuner-quality-"))
    try:
        with tuning_server(member.opened.path, work, work / "server.log") as server:
            add_variants(server, [member])
            evaluation = bench.options.evaluation.for_model(member.base)
            evaluator = model_evaluator(member, server, bench.options.budget, evaluation)
            yield LiveModel(server, evaluator, evaluation)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def reference_path(bench: Setup) -> Path:
    return bench.stem.with_suffix(".reference.json")


def load_reference(bench: Setup) -> list[dict[str, object]]:
    """The grid's reference series (time, throughput, status of each measurement), from the
    record `write_reference` wrote or, in files written before 2026-12-05, the bare list."""
    path = reference_path(bench)
    if not path.is_file():
        return []
    document = json.loads(path.read_text())
    series: list[dict[str, object]] = (
        document if isinstance(document, list) else document["measurements"]
    )
    return series


def write_reference(bench: Setup, series: list[dict[str, object]]) -> Path:
    """`series` as <stem>.reference.json: results_record's header, the model, the drift over
    the series and its limit, and every measurement."""
    path = reference_path(bench)
    record = {
        **header("grid_drift"),
        "model": bench.model,
        "drift": drift(series),
        "drift_limit": DRIFT_LIMIT,
        "measurements": series,
    }
    return write_record(path.stem, record, path.parent)


def measure_reference(bench: Setup) -> None:
    """Measure the config as written once more and append it to the grid's reference series."""
    with live_model(bench) as live:
        live.evaluator(bench.space.as_written())  # warms the fresh server (a cold one is slower)
        outcome = live.evaluator(bench.space.as_written())
    series = load_reference(bench)
    series.append(
        {
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            "throughput": outcome.throughput,
            "status": outcome.status,
        }
    )
    write_reference(bench, series)
    print(f"{bench.model}: reference (config as written) {outcome.throughput:,.0f} infer/s")


def drift(series: list[dict[str, object]]) -> float | None:
    """Highest / lowest reference throughput; None with fewer than two measurements."""
    rates = [float(str(m["throughput"])) for m in series if m.get("status") == "ok"]
    rates = [r for r in rates if r > 0]
    if len(rates) < 2:
        return None
    return max(rates) / min(rates)


def describe_drift(series: list[dict[str, object]]) -> str:
    spread = drift(series)
    if spread is None:
        return "drift unknown (fewer than two reference measurements)"
    verdict = (
        ""
        if spread <= DRIFT_LIMIT
        else (
            f": OVER {DRIFT_LIMIT:.2f}, the machine's speed moved while the grid was measured;"
            " its figures do not compare candidates fairly (measure it again on a quiet machine)"
        )
    )
    return f"drift {spread:.2f} over {len(series)} reference measurements{verdict}"
