"""Decoupled python models (model_transaction_policy { decoupled: true }) served by a real
server: any number of responses per request over gRPC ModelStreamInfer, on both gRPC front
ends, and a clear refusal over unary gRPC and HTTP."""

from __future__ import annotations

import queue
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.perf_analyzer import LOOSE_STABILITY, perf_analyzer_path
from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

REPEAT_CONFIG = """\
name: "repeat"
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

# IN[0] = n >= 0 sends n responses (OUT = 0..n-1) from a thread of the model, after execute has
# returned, then the bare final flag; n = -1 sends one response and raises in execute; n = -2
# sends its only response with the final flag, then tries once more.
REPEAT_MODEL = """\
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            sender = request.get_response_sender()
            if n == -1:
                sender.send(self._out(0))
                raise pb_utils.TritonModelException("repeat: -1 fails mid-stream")
            if n == -2:
                sender.send(self._out(7), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                try:
                    sender.send(self._out(8))
                except pb_utils.TritonModelException as exc:
                    message = str(exc).encode()
                else:
                    message = b"no error"
                with open(self.report, "wb") as handle:
                    handle.write(message)
                continue
            thread = threading.Thread(target=self._stream, args=(sender, n))
            thread.start()
            self.threads.append(thread)
        return None

    def _stream(self, sender, n):
        for i in range(n):
            sender.send(self._out(i))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @staticmethod
    def _out(value):
        out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
        return pb_utils.InferenceResponse(output_tensors=[out])

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""

FINAL = "triton_final_response"


def write_repeat(repository: Path) -> Path:
    """The `repeat` model; returns where it reports what sending after the final flag raised."""
    model = repository / "repeat"
    (model / "1").mkdir(parents=True)
    report = repository / "after_final.txt"
    source = REPEAT_MODEL.replace(
        "        self.threads = []\n",
        f"        self.threads = []\n        self.report = {str(report)!r}\n",
    )
    (model / "1" / "model.py").write_text(source)
    (model / "config.pbtxt").write_text(REPEAT_CONFIG)
    return report


@pytest.fixture(scope="module", params=["native", "grpcio"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, Path]]:
    root = tmp_path_factory.mktemp("decoupled")
    report = write_repeat(root / "repository")
    running = start_server(
        root / "repository", root / "server.log", "--grpc-front-end", request.param
    )
    try:
        yield running, report
    finally:
        stop_server(running)


@pytest.fixture
def server(served: tuple[RunningServer, Path]) -> RunningServer:
    return served[0]


class Stream:
    """A tritonclient.grpc stream whose results are read back in order."""

    def __init__(self, server: RunningServer) -> None:
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.results: queue.Queue[tuple[Any, InferenceServerException | None]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, n: int, request_id: str, empty_final: bool = False) -> None:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([n], dtype=np.int32))
        self.client.async_stream_infer(
            "repeat", [tensor], request_id=request_id, enable_empty_final_response=empty_final
        )

    def next(self) -> tuple[Any, InferenceServerException | None]:
        return self.results.get(timeout=30)

    def close(self) -> None:
        self.client.stop_stream()
        self.client.close()


@pytest.fixture
def stream(server: RunningServer) -> Iterator[Stream]:
    opened = Stream(server)
    try:
        yield opened
    finally:
        opened.close()


def _final(result: Any) -> bool | None:
    parameters = result.get_response().parameters
    return parameters[FINAL].bool_param if FINAL in parameters else None


def test_n_responses_per_request_with_their_ids(stream: Stream) -> None:
    stream.send(4, "four")
    answers = [stream.next() for _ in range(4)]
    assert [error for _, error in answers] == [None] * 4
    assert [result.get_response().id for result, _ in answers] == ["four"] * 4
    assert [int(result.as_numpy("OUT")[0]) for result, _ in answers] == [0, 1, 2, 3]
    assert [_final(result) for result, _ in answers] == [False] * 4
    # The bare final flag sends nothing unless the request asked for it.
    stream.send(0, "none")
    stream.send(1, "one")
    result, error = stream.next()
    assert error is None and result.get_response().id == "one"


def test_requests_interleave_on_one_stream(stream: Stream) -> None:
    counts = {"a": 5, "b": 3, "c": 6}
    for request_id, n in counts.items():
        stream.send(n, request_id)
    seen: dict[str, list[int]] = {request_id: [] for request_id in counts}
    for _ in range(sum(counts.values())):
        result, error = stream.next()
        assert error is None
        seen[result.get_response().id].append(int(result.as_numpy("OUT")[0]))
    assert seen == {request_id: list(range(n)) for request_id, n in counts.items()}
    assert stream.results.empty()


def test_empty_final_response_when_enabled(stream: Stream) -> None:
    stream.send(2, "ask", empty_final=True)
    answers = [stream.next() for _ in range(3)]
    assert [error for _, error in answers] == [None] * 3
    assert [result.get_response().id for result, _ in answers] == ["ask"] * 3
    assert [_final(result) for result, _ in answers] == [False, False, True]
    assert len(answers[2][0].get_response().outputs) == 0
    # A response sent with the final flag is itself the last, marked final.
    stream.send(-2, "last")
    result, error = stream.next()
    assert error is None and _final(result) is True
    assert int(result.as_numpy("OUT")[0]) == 7


def test_sending_after_final_raises_in_the_model(
    served: tuple[RunningServer, Path], stream: Stream
) -> None:
    stream.send(-2, "after")
    result, error = stream.next()
    assert error is None and int(result.as_numpy("OUT")[0]) == 7
    report = served[1]
    assert "Response sender has been closed" in report.read_text()
    stream.send(1, "still")  # and the model goes on serving
    result, error = stream.next()
    assert error is None and result.get_response().id == "still"


def test_error_mid_stream_reaches_the_client(stream: Stream) -> None:
    stream.send(-1, "boom")
    first, error = stream.next()
    assert error is None and int(first.as_numpy("OUT")[0]) == 0
    _, error = stream.next()
    assert error is not None and "repeat: -1 fails mid-stream" in str(error)
    stream.send(2, "after")
    answers = [stream.next() for _ in range(2)]
    assert [int(result.as_numpy("OUT")[0]) for result, _ in answers] == [0, 1]


def test_unary_grpc_and_http_refuse_decoupled_models(server: RunningServer) -> None:
    tensor = grpcclient.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([2], dtype=np.int32))
    with (
        grpcclient.InferenceServerClient(server.grpc_url) as client,
        pytest.raises(InferenceServerException) as raised,
    ):
        client.infer("repeat", [tensor])
    assert str(raised.value.status()) == "StatusCode.UNIMPLEMENTED"
    assert "ModelInfer RPC doesn't support models with decoupled transaction policy" in str(
        raised.value
    )
    assert "'repeat'" in str(raised.value)
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [2]}]}
    answer = httpx.post(f"{server.base}/v2/models/repeat/infer", json=body, timeout=30)
    assert answer.status_code == 501
    error = answer.json()["error"]
    assert "doesn't support models with decoupled transaction policy" in error
    assert "'repeat'" in error


def test_statistics_count_each_request_once(server: RunningServer) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        before = client.get_inference_statistics("repeat", as_json=True)["model_stats"][0]
        stream = Stream(server)
        try:
            stream.send(3, "s", empty_final=True)  # the end seen: counted by then
            answers = [stream.next() for _ in range(4)]
            assert [error for _, error in answers] == [None] * 4
            assert _final(answers[3][0]) is True
        finally:
            stream.close()
        after = client.get_inference_statistics("repeat", as_json=True)["model_stats"][0]
    success = [
        int(stats["inference_stats"]["success"].get("count", 0)) for stats in (before, after)
    ]
    assert success[1] - success[0] == 1


def test_perf_analyzer_streams_the_decoupled_model(server: RunningServer, tmp_path: Path) -> None:
    data = tmp_path / "input.json"
    data.write_text('{"data": [{"IN": [3]}]}')
    command = [
        str(perf_analyzer_path()),
        *("-m", "repeat", "-u", server.grpc_url, "-i", "grpc", "--streaming"),
        *("--input-data", str(data), "--concurrency-range", "1:2", "-p", "1000"),
        *LOOSE_STABILITY,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=200)
    output = f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, output
    assert "Request concurrency: 2" in result.stdout, output
