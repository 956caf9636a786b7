"""`--profile-export-file`: per-request timestamps, in perf_analyzer's profile export shape.

{"experiments": [{"experiment": {"mode": "concurrency"|"request_rate", "value": N},
                  "requests": [{"timestamp": ns, "request_inputs": {},
                                "response_timestamps": [ns], "response_outputs": []}, ...],
                  "window_boundaries": [ns, ...]}],
 "version": ..., "service_kind": "triton", "endpoint": ""}

Timestamps are nanoseconds since the Unix epoch (src/profile_data_exporter.cc). Every
measurement window of every level is exported, with the requests that ended in it; a failed
request carries an extra "error" message. Inputs and outputs are not recorded.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from analyzer.load.base import RequestRecord
from analyzer.profiler.level import LevelRun


def _version() -> str:
    try:
        return version("autotune")
    except PackageNotFoundError:
        return "unknown"


def _request(record: RequestRecord, offset_ns: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"timestamp": record.start_ns + offset_ns}
    if record.sequence_id:
        entry["sequence_id"] = record.sequence_id
    entry["request_inputs"] = {}
    entry["response_timestamps"] = [record.end_ns + offset_ns]
    entry["response_outputs"] = []
    if not record.ok:
        entry["error"] = record.error
    return entry


def experiment(run: LevelRun, offset_ns: int) -> dict[str, Any]:
    """One level's entry: its mode and value, every request of its windows in start order,
    and the windows' boundaries (epoch nanoseconds)."""
    level = run.level
    if level.concurrency:
        mode: dict[str, Any] = {"mode": "concurrency", "value": level.concurrency}
    else:
        mode = {"mode": "request_rate", "value": level.request_rate}
    records = sorted((r for w in run.windows for r in (*w.ok, *w.failed)), key=lambda r: r.start_ns)
    boundaries = [run.windows[0].start_ns] if run.windows else []
    boundaries += [w.end_ns for w in run.windows]
    return {
        "experiment": mode,
        "requests": [_request(r, offset_ns) for r in records],
        "window_boundaries": [b + offset_ns for b in boundaries],
    }


def profile_export(runs: Sequence[LevelRun], offset_ns: int, endpoint: str = "") -> dict[str, Any]:
    """The export document; `offset_ns` turns record clocks into epoch nanoseconds."""
    return {
        "experiments": [experiment(run, offset_ns) for run in runs],
        "version": _version(),
        "service_kind": "triton",
        "endpoint": endpoint,
    }


def write_profile_export(
    path: Path, runs: Sequence[LevelRun], offset_ns: int, endpoint: str = ""
) -> None:
    """`profile_export` written to `path` as one line of JSON."""
    path.write_text(json.dumps(profile_export(runs, offset_ns, endpoint)) + "\n")
