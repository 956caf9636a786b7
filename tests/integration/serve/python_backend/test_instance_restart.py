"""A python model instance whose stub process is killed in the middle of a request, on a real
server with two instances: the request gets an error naming the killed stub, the other instance
serves meanwhile, the killed instance comes back in a new process and every request succeeds
again; the server stays ready and leaves no stub process behind when it stops."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

MODEL = "holder"

HOLDER_CONFIG = """\
name: "holder"
backend: "python"
max_batch_size: 0
input [ { name: "HOLD" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
parameters { key: "signal_dir" value { string_value: "%s" } }
"""

# HOLD = 1 announces the stub's pid in <signal_dir>/<pid>.held and waits (60 s at most) for
# <pid>.release; HOLD = 0 answers at once. Both answer the pid of the stub that ran them.
HOLDER_MODEL = """\
import json
import os
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.signal_dir = Path(parameters["signal_dir"]["string_value"])

    def execute(self, requests):
        responses = []
        for request in requests:
            hold = pb_utils.get_input_tensor_by_name(request, "HOLD").as_numpy()
            if hold[0]:
                self._hold()
            pid = np.array([os.getpid()], dtype=np.int64)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]))
        return responses

    def _hold(self):
        pid = os.getpid()
        announced = self.signal_dir / f"{pid}.held.tmp"
        announced.write_text(str(pid))
        announced.rename(self.signal_dir / f"{pid}.held")
        release = self.signal_dir / f"{pid}.release"
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
"""


class Holder:
    """Sends holding and quick requests to the `holder` model and tells held stubs to go on."""

    def __init__(self, server: RunningServer, signal_dir: Path) -> None:
        self.server = server
        self.signal_dir = signal_dir
        self._pool = ThreadPoolExecutor(max_workers=6)
        self._announced: set[int] = set()

    def hold(self, transport: str) -> Future[int]:
        """A request that keeps its stub busy until released; its future gives the stub's pid
        or raises the request's InferenceServerException."""
        infer = _grpc_infer if transport == "grpc" else _http_infer
        return self._pool.submit(infer, self.server, 1)

    def quick(self, count: int) -> list[Future[int]]:
        """`count` concurrent quick requests (HTTP and gRPC alternately)."""
        infers: list[Callable[[RunningServer, int], int]] = [_http_infer, _grpc_infer]
        return [self._pool.submit(infers[i % 2], self.server, 0) for i in range(count)]

    def held_pid(self, held: Future[int], timeout: float = 60.0) -> int:
        """The pid of the stub that announced the `held` request."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if held.done():
                outcome = held.exception() or f"PID {held.result()}"
                raise AssertionError(f"the held request ended before holding: {outcome}")
            for path in self.signal_dir.glob("*.held"):
                pid = int(path.stem.removesuffix(".held"))
                if pid not in self._announced:
                    self._announced.add(pid)
                    return pid
            time.sleep(0.02)
        raise AssertionError(f"no stub announced a held request within {timeout:g} s")

    def release(self, pid: int) -> None:
        (self.signal_dir / f"{pid}.release").touch()

    def close(self) -> None:
        for pid in self._announced:
            self.release(pid)
        self._pool.shutdown(wait=True)


def _request_value(hold: int) -> np.ndarray:
    return np.array([hold], dtype=np.int32)


def _http_infer(server: RunningServer, hold: int) -> int:
    tensor = httpclient.InferInput("HOLD", [1], "INT32")
    tensor.set_data_from_numpy(_request_value(hold))
    with httpclient.InferenceServerClient(server.url, network_timeout=120) as client:
        return int(client.infer(MODEL, [tensor]).as_numpy("PID")[0])


def _grpc_infer(server: RunningServer, hold: int) -> int:
    tensor = grpcclient.InferInput("HOLD", [1], "INT32")
    tensor.set_data_from_numpy(_request_value(hold))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        return int(client.infer(MODEL, [tensor], client_timeout=120).as_numpy("PID")[0])


@pytest.fixture
def signal_dir(tmp_path: Path) -> Path:
    path = tmp_path / "signals"
    path.mkdir()
    return path


@pytest.fixture
def server(tmp_path: Path, signal_dir: Path) -> Iterator[RunningServer]:
    model = tmp_path / "repository" / MODEL
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(HOLDER_CONFIG % signal_dir)
    (model / "1" / "model.py").write_text(HOLDER_MODEL)
    running = start_server(tmp_path / "repository", tmp_path / "server.log")
    try:
        yield running
    finally:
        if running.process.poll() is None:
            stop_server(running)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: set[int], timeout: float = 30.0) -> set[int]:
    """The pids still running after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = {pid for pid in pids if not _gone(pid)}
        if not alive:
            return alive
        time.sleep(0.05)
    return {pid for pid in pids if not _gone(pid)}


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_killed_stub_fails_its_request_and_its_instance_restarts(
    server: RunningServer, signal_dir: Path, transport: str
) -> None:
    holder = Holder(server, signal_dir)
    try:
        held = holder.hold(transport)
        killed = holder.held_pid(held)
        server_children = psutil.Process(server.process.pid).children(recursive=True)
        assert killed in {child.pid for child in server_children}

        # The other instance serves while this one is busy.
        meanwhile = {future.result(timeout=60) for future in holder.quick(6)}
        assert len(meanwhile) == 1 and killed not in meanwhile
        (other,) = meanwhile
        assert not held.done()

        os.kill(killed, signal.SIGKILL)
        with pytest.raises(InferenceServerException) as raised:
            held.result(timeout=60)
        error = raised.value
        expected_status = "StatusCode.INTERNAL" if transport == "grpc" else "500"
        assert error.status() == expected_status, str(error)
        assert f"pid {killed}" in error.message(), error.message()
        assert "SIGKILL" in error.message(), error.message()
        assert MODEL in error.message(), error.message()

        with httpclient.InferenceServerClient(server.url) as client:
            assert client.is_server_ready()
            assert client.is_model_ready(MODEL)

        # Both instances serve again: one holds, the other answers everything else.
        held_again = holder.hold(transport)
        holding = holder.held_pid(held_again)
        answering = {future.result(timeout=60) for future in holder.quick(6)}
        assert len(answering) == 1
        pids_now = {holding, *answering}
        assert len(pids_now) == 2 and other in pids_now
        (restarted,) = pids_now - {other}
        assert restarted != killed
        holder.release(holding)
        assert held_again.result(timeout=60) == holding
        assert {future.result(timeout=60) for future in holder.quick(6)} <= pids_now
    finally:
        holder.close()

    assert stop_server(server) == 0
    assert _wait_gone({killed, *pids_now}) == set()
