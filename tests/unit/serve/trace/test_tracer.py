"""The tracer's request path and its files: stamps from the scheduler's points, Triton's trace
JSON, log_frequency files, and what is written when settings change or the server stops."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from serve.backends.base import BatchTimes
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse, OutputTensor
from serve.trace.settings import TraceValues
from serve.trace.tracer import Tracer


def _tracer(tmp_path: Path, **settings: str) -> tuple[Tracer, Path]:
    file = tmp_path / "trace.json"
    tracer = Tracer(TraceValues(file=str(file)))  # as --trace-config triton,file=... gives it
    values = {"trace_level": "TIMESTAMPS", "trace_rate": "1"} | settings
    tracer.update("", {k: v.split("+") for k, v in values.items()})
    return tracer, file


def _run(tracer: Tracer, request_id: str = "", fail: bool = False) -> list[object]:
    """One request through attach -> the batcher's points -> completion."""
    request = InferRequest("simple", "", {"INPUT0": np.arange(4, dtype=np.int32)}, id=request_id)
    results: list[object] = []
    done = tracer.attach(request, 1, results.append)
    trace = request.trace
    assert trace is not None
    times = BatchTimes(compute_input_ns=10, compute_infer_ns=100, compute_output_ns=10)
    queued = time.monotonic_ns() + 1_000  # after REQUEST_START, as in the server
    times.start_ns = queued + 1_000
    times.end_ns = times.start_ns + 500
    trace.compute(queued, times.start_ns, times)
    output = OutputTensor("OUTPUT0", "INT32", np.arange(4, dtype=np.int32) * 2)
    done(ServeError.internal("boom") if fail else InferResponse("simple", "1", [output]))
    return results


def _stamps(entries: list[dict], trace_id: int) -> list[tuple[str, int]]:
    return [
        (e["timestamps"][0]["name"], e["timestamps"][0]["ns"])
        for e in entries
        if e["id"] == trace_id and "timestamps" in e
    ]


def test_a_trace_has_tritons_shape_and_ordered_stamps(tmp_path: Path) -> None:
    tracer, file = _tracer(tmp_path)
    results = _run(tracer, "req-7")
    assert isinstance(results[0], InferResponse)  # the caller's completion still runs
    assert not file.exists()  # log_frequency 0: written at stop or on a setting change
    tracer.close()
    entries = json.loads(file.read_text())
    assert entries[0] == {
        "id": 1,
        "model_name": "simple",
        "model_version": 1,
        "request_id": "req-7",
    }
    stamps = _stamps(entries, 1)
    assert [name for name, _ in stamps] == [
        "REQUEST_START",
        "QUEUE_START",
        "COMPUTE_START",
        "COMPUTE_INPUT_END",
        "COMPUTE_OUTPUT_START",
        "COMPUTE_END",
        "REQUEST_END",
    ]
    ns = [value for _, value in stamps]
    assert ns == sorted(ns)
    assert ns[3] - ns[2] == 10 and ns[4] - ns[3] == 100  # input, then infer durations


def test_tensors_level_records_inputs_and_outputs(tmp_path: Path) -> None:
    tracer, file = _tracer(tmp_path, trace_level="TENSORS")
    _run(tracer)
    tracer.close()
    entries = json.loads(file.read_text())
    tensors = {e["activity"]: e["tensor"] for e in entries if "activity" in e}
    assert tensors["TENSOR_QUEUE_INPUT"] == {
        "name": "INPUT0",
        "data": "0,1,2,3",
        "shape": "4",
        "dtype": "INT32",
    }
    assert tensors["TENSOR_BACKEND_OUTPUT"]["data"] == "0,2,4,6"
    assert not any("timestamps" in e for e in entries)  # TENSORS alone: no timestamps


def test_log_frequency_writes_numbered_files(tmp_path: Path) -> None:
    tracer, file = _tracer(tmp_path, log_frequency="2")
    for _ in range(5):
        _run(tracer)
    first = json.loads((tmp_path / "trace.json.0").read_text())
    second = json.loads((tmp_path / "trace.json.1").read_text())
    assert [e["id"] for e in first if "model_name" in e] == [1, 2]
    assert [e["id"] for e in second if "model_name" in e] == [3, 4]
    assert not (tmp_path / "trace.json.2").exists()
    tracer.close()  # the fifth trace is written at stop
    third = json.loads((tmp_path / "trace.json.2").read_text())
    assert [e["id"] for e in third if "model_name" in e] == [5]
    assert not file.exists()


def test_a_spent_count_writes_its_traces_at_once(tmp_path: Path) -> None:
    tracer, file = _tracer(tmp_path, trace_count="2")
    _run(tracer)
    assert not file.exists()
    _run(tracer, fail=True)  # failed requests are traced too
    entries = json.loads(file.read_text())
    assert [e["id"] for e in entries if "model_name" in e] == [1, 2]


def test_a_setting_change_writes_what_was_collected_and_the_file_grows(tmp_path: Path) -> None:
    tracer, file = _tracer(tmp_path)
    _run(tracer)
    tracer.update("", {"trace_rate": ["1"]})  # replaced: the old setting writes its trace
    assert [e["id"] for e in json.loads(file.read_text()) if "model_name" in e] == [1]
    _run(tracer)
    tracer.close()
    assert [e["id"] for e in json.loads(file.read_text()) if "model_name" in e] == [1, 2]


def test_a_request_failing_before_the_queue_is_still_written(tmp_path: Path) -> None:
    tracer, file = _tracer(tmp_path)
    request = InferRequest("simple", "", {})
    tracer.attach(request, 1, lambda result: None)
    tracer.detach(request)  # the DataPlane does this when submit raises
    tracer.detach(request)  # once only
    tracer.close()
    entries = json.loads(file.read_text())
    assert [n for n, _ in _stamps(entries, 1)] == ["REQUEST_START"]
