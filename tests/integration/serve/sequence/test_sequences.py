"""Stateful models through the sequence batcher, served by a real server and called with
tritonclient over HTTP and gRPC: running sums per sequence (the accumulator's control inputs,
implicit state in ONNX and python models), both strategies, string ids, the backlog, idle
sequences losing their slot, and Triton's errors for requests outside a sequence."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(300)

STATE_PY_CONFIG = """
name: "state_py"
backend: "python"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  direct { }
  state [ {
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32 dims: [ 1 ]
    initial_state { name: "hundred" data_type: TYPE_FP32 dims: [ 1 ] data_file: "hundred" }
  } ]
}
instance_group [ { count: 1 kind: KIND_CPU } ]
"""

STATE_PY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            total = state + value
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", total), pb_utils.Tensor("STATE_OUT", total)
            ]))
        return responses
"""


def _copy_model(root: Path, source: str, name: str, edit: Callable[[str], str]) -> None:
    target = root / name
    shutil.copytree(BUNDLED_REPOSITORY / source, target)
    config = (target / "config.pbtxt").read_text()
    (target / "config.pbtxt").write_text(edit(config.replace(f'"{source}"', f'"{name}"')))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("sequences")
    root = base / "repository"
    root.mkdir()
    for model in ("accumulator", "stateful_sum"):
        shutil.copytree(BUNDLED_REPOSITORY / model, root / model)
    _copy_model(
        root,
        "accumulator",
        "accumulator_oldest",
        lambda c: c.replace("direct { }", "oldest { max_candidate_sequences: 4 }"),
    )
    _copy_model(
        root,
        "accumulator",
        "accumulator_idle",
        lambda c: c.replace("10000000", "100000"),  # 0.1 s
    )
    _copy_model(  # one instance, one slot: every other sequence waits in the backlog
        root,
        "accumulator",
        "accumulator_backlog",
        lambda c: c.replace("max_batch_size: 8", "max_batch_size: 1"),
    )
    state_py = root / "state_py"
    (state_py / "1").mkdir(parents=True)
    (state_py / "1" / "model.py").write_text(STATE_PY_MODEL)
    (state_py / "config.pbtxt").write_text(STATE_PY_CONFIG)
    (state_py / "initial_state").mkdir()
    (state_py / "initial_state" / "hundred").write_bytes(
        np.array([100], dtype=np.float32).tobytes()
    )
    running = start_server(root, base / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


class Client:
    """One sequence-aware call over HTTP or gRPC: the OUTPUT value, or the error raised."""

    def __init__(self, server: RunningServer, protocol: str) -> None:
        self.protocol = protocol
        self._module = httpclient if protocol == "http" else grpcclient
        url = server.url if protocol == "http" else server.grpc_url
        self._client = self._module.InferenceServerClient(url)

    def infer(
        self,
        model: str,
        value: float,
        sequence_id: int | str = 0,
        start: bool = False,
        end: bool = False,
    ) -> float:
        tensor = self._module.InferInput("INPUT", [1, 1], "FP32")
        tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
        result = self._client.infer(
            model, [tensor], sequence_id=sequence_id, sequence_start=start, sequence_end=end
        )
        output = result.as_numpy("OUTPUT")
        assert output.shape == (1, 1)
        return float(output[0, 0])

    def close(self) -> None:
        self._client.close()


@pytest.fixture(params=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[Client]:
    made = Client(server, request.param)
    try:
        yield made
    finally:
        made.close()


def _error(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as caught:
        call()
    return caught.value


def _invalid_argument(client: Client, error: InferenceServerException) -> None:
    expected = "400" if client.protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    assert str(error.status()) == expected


@pytest.mark.parametrize("model", ["accumulator", "accumulator_oldest"])
def test_interleaved_sequences_each_get_their_own_running_sum(client: Client, model: str) -> None:
    ids = [101, 102, 103]
    sums = dict.fromkeys(ids, 0.0)
    for step in range(4):
        for n, sequence in enumerate(ids):
            value = float(10 * n + step + 1)
            sums[sequence] += value
            got = client.infer(model, value, sequence, start=step == 0, end=step == 3)
            assert got == sums[sequence], (sequence, step)


@pytest.mark.parametrize("model", ["accumulator", "accumulator_oldest", "stateful_sum"])
def test_concurrent_sequences_sum_correctly(server: RunningServer, model: str) -> None:
    def run(sequence: int) -> list[float]:
        client = Client(server, "grpc" if sequence % 2 else "http")
        try:
            return [
                client.infer(model, sequence * 10 + k, sequence, start=k == 0, end=k == 4)
                for k in range(5)
            ]
        finally:
            client.close()

    with ThreadPoolExecutor(12) as pool:
        results = dict(zip(range(1, 13), pool.map(run, range(1, 13)), strict=True))
    for sequence, outputs in results.items():
        assert outputs == list(np.cumsum([sequence * 10 + k for k in range(5)]).astype(float))


def test_string_sequence_ids(client: Client) -> None:
    assert client.infer("accumulator", 1, "conversation-a", start=True) == 1
    assert client.infer("accumulator", 5, "conversation-b", start=True) == 5
    assert client.infer("accumulator", 2, "conversation-a") == 3
    assert client.infer("accumulator", 5, "conversation-b", end=True) == 10
    assert client.infer("accumulator", 3, "conversation-a", end=True) == 6


def test_a_new_sequence_without_start_is_refused_and_the_server_keeps_serving(
    client: Client,
) -> None:
    error = _error(lambda: client.infer("accumulator", 1, 424242))
    _invalid_argument(client, error)
    assert error.message() == (
        "inference request for sequence 424242 to model 'accumulator' must specify the START "
        "flag on the first request of the sequence"
    )
    assert client.infer("accumulator", 7, 424242, start=True, end=True) == 7


def test_a_request_without_a_sequence_id_is_refused(client: Client) -> None:
    error = _error(lambda: client.infer("accumulator", 1))
    _invalid_argument(client, error)
    assert error.message() == (
        "inference request to model 'accumulator' must specify a non-zero or non-empty "
        "correlation ID"
    )


def test_an_idle_sequence_loses_its_slot(client: Client) -> None:
    sequence = 5150 if client.protocol == "http" else 5151
    assert client.infer("accumulator_idle", 1, sequence, start=True) == 1
    pause = 0.02
    for _ in range(10):  # each request that still finds the sequence resets its idle clock
        time.sleep(pause)
        try:
            client.infer("accumulator_idle", 1, sequence)
        except InferenceServerException as error:
            _invalid_argument(client, error)
            assert "must specify the START flag" in str(error.message())
            break
        pause *= 2
    else:
        pytest.fail("the idle sequence kept its slot")
    assert client.infer("accumulator_idle", 4, sequence, start=True, end=True) == 4


@pytest.mark.parametrize(("model", "start_value"), [("stateful_sum", 0.0), ("state_py", 100.0)])
def test_implicit_state_carries_across_requests(
    client: Client, model: str, start_value: float
) -> None:
    first, second = (61, 62) if client.protocol == "http" else (63, 64)
    assert client.infer(model, 1, first, start=True) == start_value + 1
    assert client.infer(model, 10, second, start=True) == start_value + 10
    assert client.infer(model, 2, first) == start_value + 3
    assert client.infer(model, 20, second, end=True) == start_value + 30
    assert client.infer(model, 3, first, end=True) == start_value + 6
    assert client.infer(model, 5, first, start=True, end=True) == start_value + 5  # reset


def test_more_sequences_than_slots_wait_in_the_backlog(server: RunningServer) -> None:
    def run(sequence: int) -> list[float]:
        client = Client(server, "http" if sequence % 2 else "grpc")
        try:
            return [
                client.infer("accumulator_backlog", k + 1, sequence, start=k == 0, end=k == 2)
                for k in range(3)
            ]
        finally:
            client.close()

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(run, range(901, 907)))
    assert results == [[1.0, 3.0, 6.0]] * 6
