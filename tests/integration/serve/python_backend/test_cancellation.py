"""Request cancellation end to end, on a real server with python models: a client that goes away
(an HTTP connection closed, a gRPC call or stream cancelled) cancels its request. Running, the
model sees `request.is_cancelled()` / `response_sender.is_cancelled()` turn True; still queued,
it never runs and counts as a CANCELED failure. Every front end: the native HTTP and gRPC ones,
and uvicorn with grpcio.

The models note what they do in a log file (`run N`, `cancelled N`) and wait in bounded loops
for a release file or their cancellation, so the test decides the order of events; waits are
bounded and nothing asserts durations.
"""

from __future__ import annotations

import queue
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families

from tests.support.raw_http import json_infer, read_responses
from tests.support.server_process import RunningServer, connect, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

WAIT_S = 20.0  # upper bound of every wait; a test that needs it has already failed

_NOTE = """\
import os
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils

FOLDER = FOLDER_PATH
BOUND_S = 10.0  # a model never waits longer than this for its release or its cancellation


def note(line):
    with open(os.path.join(FOLDER, "log"), "a") as handle:
        handle.write(line + "\\n")


def released(value):
    return os.path.exists(os.path.join(FOLDER, f"release_{value}"))


def out(value):
    tensor = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
    return pb_utils.InferenceResponse(output_tensors=[tensor])
"""

WATCH_CONFIG = """\
name: "watch"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

# Each request runs until its release file appears (OUT = IN) or it is cancelled (a CANCELLED
# error), one at a time: a second request waits in the queue.
WATCH_MODEL = (
    _NOTE
    + """

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            note(f"run {value}")
            deadline = time.monotonic() + BOUND_S
            while not released(value) and time.monotonic() < deadline:
                if request.is_cancelled():
                    note(f"cancelled {value}")
                    error = pb_utils.TritonError("gone", pb_utils.TritonError.CANCELLED)
                    responses.append(pb_utils.InferenceResponse(error=error))
                    break
                time.sleep(0.02)
            else:
                responses.append(out(value))
        return responses
"""
)

WATCH_STREAM_CONFIG = """\
name: "watch_stream"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Sends OUT = IN at once, then watches its sender until it is cancelled (or released), then
# sends the final flag; from a thread of its own, after execute returned.
WATCH_STREAM_MODEL = (
    _NOTE
    + """

class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            value = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            thread = threading.Thread(target=self._watch, args=(sender, value))
            thread.start()
            self.threads.append(thread)
        return None

    def _watch(self, sender, value):
        note(f"run {value}")
        sender.send(out(value))
        deadline = time.monotonic() + BOUND_S
        while not released(value) and time.monotonic() < deadline:
            if sender.is_cancelled():
                note(f"cancelled {value}")
                break
            time.sleep(0.02)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""
)

CANCEL_CALLEE_CONFIG = """\
name: "cancel_callee"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# Calls watch_stream (BLS, decoupled), cancels it after its first response, reads the rest:
# OUT = the first response's OUT.
CANCEL_CALLEE_MODEL = (
    _NOTE
    + """

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN")
            call = pb_utils.InferenceRequest(
                model_name="watch_stream", requested_output_names=["OUT"], inputs=[value]
            )
            answers = call.exec(decoupled=True)
            first = next(answers)
            answers.cancel()
            rest = list(answers)
            if first.has_error() or any(r.has_error() for r in rest):
                error = pb_utils.TritonError("watch_stream answered an error")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            got = pb_utils.get_output_tensor_by_name(first, "OUT").as_numpy()
            responses.append(out(int(got[0])))
        return responses
"""
)


@dataclass
class Served:
    server: RunningServer
    folder: Path

    @property
    def log(self) -> list[str]:
        path = self.folder / "log"
        return path.read_text().splitlines() if path.exists() else []

    def wait_logged(self, line: str) -> None:
        wait_for(lambda: line in self.log, f"the model to log {line!r}")

    def release(self, value: int) -> None:
        (self.folder / f"release_{value}").touch()

    def metric(self, name: str, **labels: str) -> float:
        text = httpx.get(f"http://{self.server.metrics_url}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if family.name == name and labels.items() <= sample.labels.items():
                    return float(sample.value)
        raise AssertionError(f"no metric {name} {labels}")

    def cancelled_count(self) -> float:
        return self.metric("nv_inference_request_failure", model="watch", reason="CANCELED")

    def wait_queued(self, count: int) -> None:
        wait_for(
            lambda: self.metric("nv_inference_pending_request_count", model="watch") == count,
            f"{count} request(s) waiting in watch's queue",
        )


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _write(repository: Path, name: str, config: str, model: str, folder: Path) -> None:
    (repository / name / "1").mkdir(parents=True)
    (repository / name / "config.pbtxt").write_text(config)
    source = model.replace("FOLDER_PATH", repr(str(folder)))
    (repository / name / "1" / "model.py").write_text(source)


@pytest.fixture(
    scope="module", params=[("native", "native"), ("uvicorn", "grpcio")], ids=lambda p: "+".join(p)
)
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    http_front_end, grpc_front_end = request.param
    root = tmp_path_factory.mktemp("cancellation")
    folder = root / "notes"
    folder.mkdir()
    repository = root / "repository"
    _write(repository, "watch", WATCH_CONFIG, WATCH_MODEL, folder)
    _write(repository, "watch_stream", WATCH_STREAM_CONFIG, WATCH_STREAM_MODEL, folder)
    _write(repository, "cancel_callee", CANCEL_CALLEE_CONFIG, CANCEL_CALLEE_MODEL, folder)
    running = start_server(
        repository,
        root / "server.log",
        "--http-front-end",
        http_front_end,
        "--grpc-front-end",
        grpc_front_end,
    )
    try:
        yield Served(running, folder)
    finally:
        stop_server(running)


def _in(value: int) -> dict[str, np.ndarray]:
    return {"IN": np.array([value], dtype=np.int32)}


def _send_http(server: RunningServer, value: int) -> socket.socket:
    sock = connect(server)
    sock.sendall(json_infer("watch", f"r{value}", _in(value)))
    return sock


def _grpc_input(value: int) -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    return [tensor]


def _infer_http(server: RunningServer, value: int) -> int:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([value], dtype=np.int32))
    with httpclient.InferenceServerClient(server.url, network_timeout=60) as client:
        return int(client.infer("watch", [tensor]).as_numpy("OUT")[0])


# -- a running request: the model sees is_cancelled() ---------------------------------------------


def test_http_client_gone_mid_request_the_model_sees_is_cancelled(served: Served) -> None:
    sock = _send_http(served.server, 1)
    served.wait_logged("run 1")
    sock.close()
    served.wait_logged("cancelled 1")
    served.release(2)
    assert _infer_http(served.server, 2) == 2  # the instance is free again


def test_grpc_call_cancelled_mid_request_the_model_sees_is_cancelled(served: Served) -> None:
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        call = client.async_infer(
            "watch", _grpc_input(3), lambda result, error: results.put((result, error))
        )
        served.wait_logged("run 3")
        call.cancel()
        served.wait_logged("cancelled 3")
        _, error = results.get(timeout=WAIT_S)
        assert error is not None and "CANCELLED" in str(error.status())


def test_a_model_that_is_never_cancelled_sees_false(served: Served) -> None:
    served.release(4)
    assert _infer_http(served.server, 4) == 4
    assert "cancelled 4" not in served.log


# -- a queued request of a gone client never runs -------------------------------------------------


def test_http_request_queued_then_abandoned_never_runs(served: Served) -> None:
    before = served.cancelled_count()
    slow = _send_http(served.server, 10)
    served.wait_logged("run 10")
    gone = _send_http(served.server, 11)
    served.wait_queued(1)
    gone.close()
    wait_for(lambda: served.cancelled_count() == before + 1, "the CANCELED failure")
    served.wait_queued(0)
    served.release(10)
    (answer,) = read_responses(slow, 1, WAIT_S)
    slow.close()
    assert answer.status == 200
    served.release(12)
    assert _infer_http(served.server, 12) == 12  # a later request runs; the abandoned one not
    runs = [line for line in served.log if line.split()[-1] in ("10", "11", "12")]
    assert runs == ["run 10", "run 12"]


def test_grpc_request_queued_then_cancelled_never_runs(served: Served) -> None:
    before = served.cancelled_count()
    results: queue.Queue[Any] = queue.Queue()
    with grpcclient.InferenceServerClient(served.server.grpc_url) as client:
        client.async_infer(
            "watch", _grpc_input(20), lambda result, error: results.put((result, error))
        )
        served.wait_logged("run 20")
        gone = client.async_infer("watch", _grpc_input(21), lambda result, error: None)
        served.wait_queued(1)
        gone.cancel()
        wait_for(lambda: served.cancelled_count() == before + 1, "the CANCELED failure")
        served.release(20)
        result, error = results.get(timeout=WAIT_S)
        assert error is None and int(result.as_numpy("OUT")[0]) == 20
    served.release(22)
    assert _infer_http(served.server, 22) == 22
    runs = [line for line in served.log if line.split()[-1] in ("20", "21", "22")]
    assert runs == ["run 20", "run 22"]


# -- decoupled models ---------------------------------------------------------------------------


def test_stream_cancelled_the_decoupled_model_sees_its_sender_cancelled(served: Served) -> None:
    results: queue.Queue[Any] = queue.Queue()
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        client.async_stream_infer("watch_stream", _grpc_input(30))
        result, error = results.get(timeout=WAIT_S)  # its first response: it runs
        assert error is None and int(result.as_numpy("OUT")[0]) == 30
        client.stop_stream(cancel_requests=True)
        served.wait_logged("cancelled 30")
    finally:
        client.close()


def test_bls_response_iterator_cancel_cancels_the_callee(served: Served) -> None:
    tensor = httpclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([40], dtype=np.int32))
    with httpclient.InferenceServerClient(served.server.url, network_timeout=60) as client:
        result = client.infer("cancel_callee", [tensor])
    assert int(result.as_numpy("OUT")[0]) == 40
    assert "cancelled 40" in served.log
