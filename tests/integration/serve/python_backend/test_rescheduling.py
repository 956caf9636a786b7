"""Request rescheduling (pb_utils `set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`)
on a real server, through tritonclient over HTTP and gRPC.

With `sequence_batching { iterative_sequence: true }` a request the model releases for
rescheduling comes back, the same request (id, correlation id, inputs), in a later batch: a
model that is not decoupled returns None in its place meanwhile; a decoupled one streams a
response from each execution. Without iterative_sequence the request fails with Triton's error.
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

ITERATIVE = "sequence_batching { iterative_sequence: true }"
NOT_CONFIGURED = (
    "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not "
    "configured to handle such a flag."
)
FINAL = "triton_final_response"

COUNTER_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 4
input [ {{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "SEEN" data_type: TYPE_STRING dims: [ -1 ] }}
]
{batching}
"""

# Counts to N by rescheduling its request N - 1 times, then answers COUNT = N and SEEN = what
# each execution saw ("request id:correlation id:flags"). N < 0 misuses the API: it sets
# RESCHEDULE and still returns a response.
COUNTER_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils

RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


class TritonPythonModel:
    def initialize(self, args):
        self.seen = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            key = request.correlation_id() or request.request_id()
            seen = self.seen.setdefault(key, [])
            seen.append(f"{request.request_id()}:{key}:{request.flags()}")
            if 0 <= n and len(seen) < n:
                request.set_release_flags(RESCHEDULE)
                responses.append(None)
                continue
            if n < 0:
                request.set_release_flags(RESCHEDULE)
            del self.seen[key]
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("COUNT", np.array([[len(seen)]], dtype=np.int32)),
                pb_utils.Tensor("SEEN", np.array([seen], dtype=np.object_)),
            ]))
        return responses
"""

GENERATOR_CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 2
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "N" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
{batching}
"""

# Triton's README pattern: each execution sends one response (OUT = 1, 2, ..., N) and
# reschedules the request before returning, until the N-th, after which it sends the final flag.
GENERATOR_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.sent = {}

    def execute(self, requests):
        for request in requests:
            n = int(pb_utils.get_input_tensor_by_name(request, "N").as_numpy().reshape(-1)[0])
            key = request.correlation_id() or request.request_id()
            count = self.sent.pop(key, 0) + 1
            sender = request.get_response_sender()
            out = pb_utils.Tensor("OUT", np.array([[count]], dtype=np.int32))
            sender.send(pb_utils.InferenceResponse([out]))
            if count < n:
                self.sent[key] = count
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def _write(repository: Path, name: str, config: str, model: str, batching: str) -> None:
    folder = repository / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config.format(name=name, batching=batching))
    (folder / "1" / "model.py").write_text(model)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("rescheduling")
    repository = root / "repository"
    _write(repository, "counter", COUNTER_CONFIG, COUNTER_MODEL, ITERATIVE)
    _write(repository, "counter_plain", COUNTER_CONFIG, COUNTER_MODEL, "")
    _write(repository, "generator", GENERATOR_CONFIG, GENERATOR_MODEL, ITERATIVE)
    _write(repository, "generator_plain", GENERATOR_CONFIG, GENERATOR_MODEL, "")
    running = start_server(repository, root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


Infer = Callable[[str, int, str], dict[str, np.ndarray]]


def _http_infer(server: RunningServer) -> Infer:
    def infer(model: str, n: int, request_id: str) -> dict[str, np.ndarray]:
        tensor = httpclient.InferInput("N", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[n]], dtype=np.int32))
        with httpclient.InferenceServerClient(server.url, network_timeout=60) as client:
            result = client.infer(model, [tensor], request_id=request_id)
        return {name: result.as_numpy(name) for name in ("COUNT", "SEEN")}

    return infer


def _grpc_infer(server: RunningServer) -> Infer:
    def infer(model: str, n: int, request_id: str) -> dict[str, np.ndarray]:
        tensor = grpcclient.InferInput("N", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[n]], dtype=np.int32))
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer(model, [tensor], request_id=request_id, client_timeout=60)
        return {name: result.as_numpy(name) for name in ("COUNT", "SEEN")}

    return infer


@pytest.fixture(params=["http", "grpc"])
def infer(request: pytest.FixtureRequest, server: RunningServer) -> Infer:
    return _http_infer(server) if request.param == "http" else _grpc_infer(server)


def _seen(outputs: dict[str, np.ndarray]) -> list[str]:
    return [item.decode() for item in outputs["SEEN"].reshape(-1)]


def test_a_request_rescheduled_until_the_model_answers(infer: Infer) -> None:
    outputs = infer("counter", 5, "five")
    assert outputs["COUNT"].tolist() == [[5]]
    seen = _seen(outputs)
    # The same request each time, under one correlation id the server gave it; START only on
    # its first execution (Triton clears the flags of a rescheduled request).
    correlation = seen[0].split(":")[1]
    assert int(correlation) > 0
    assert seen == [f"five:{correlation}:1"] + [f"five:{correlation}:0"] * 4


def test_concurrent_requests_keep_their_own_counts(infer: Infer) -> None:
    counts = {"one": 1, "three": 3, "four": 4, "six": 6, "seven": 7}
    with ThreadPoolExecutor(len(counts)) as pool:
        futures = {rid: pool.submit(infer, "counter", n, rid) for rid, n in counts.items()}
        outputs = {rid: future.result(timeout=60) for rid, future in futures.items()}
    correlations = set()
    for rid, n in counts.items():
        assert outputs[rid]["COUNT"].tolist() == [[n]]
        seen = _seen(outputs[rid])
        assert len(seen) == n
        assert {entry.rsplit(":", 2)[0] for entry in seen} == {rid}
        correlations.add(seen[0].split(":")[1])
    assert len(correlations) == len(counts)


def test_a_client_sequence_id_is_the_model_correlation_id(server: RunningServer) -> None:
    tensor = grpcclient.InferInput("N", [1, 1], "INT32")
    tensor.set_data_from_numpy(np.array([[3]], dtype=np.int32))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer(
            "counter", [tensor], request_id="mine", sequence_id=4242, sequence_start=True
        )
    assert _seen({"SEEN": result.as_numpy("SEEN")}) == ["mine:4242:1", "mine:4242:0", "mine:4242:0"]


def _expect_error(infer: Infer, model: str, n: int) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as raised:
        infer(model, n, "bad")
    return raised.value


def test_rescheduling_without_iterative_sequence_fails_the_request(infer: Infer) -> None:
    error = _expect_error(infer, "counter_plain", 3)
    assert NOT_CONFIGURED in error.message()
    assert error.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    # One that needs no rescheduling is answered as usual.
    assert infer("counter_plain", 1, "fine")["COUNT"].tolist() == [[1]]


def test_a_response_for_a_rescheduled_request_is_an_error(infer: Infer) -> None:
    error = _expect_error(infer, "counter", -1)
    assert (
        "Expected a None object in the execute function return list for rescheduled request, "
        "found type '<class " in error.message()
    )
    assert error.status() in ("500", "StatusCode.INTERNAL")
    assert infer("counter", 2, "after")["COUNT"].tolist() == [[2]]


class Stream:
    """A tritonclient.grpc stream whose results are read back in order."""

    def __init__(self, server: RunningServer) -> None:
        self.client = grpcclient.InferenceServerClient(server.grpc_url)
        self.results: queue.Queue[tuple[Any, InferenceServerException | None]] = queue.Queue()
        self.client.start_stream(callback=lambda result, error: self.results.put((result, error)))

    def send(self, model: str, n: int, request_id: str) -> None:
        tensor = grpcclient.InferInput("N", [1, 1], "INT32")
        tensor.set_data_from_numpy(np.array([[n]], dtype=np.int32))
        self.client.async_stream_infer(
            model, [tensor], request_id=request_id, enable_empty_final_response=True
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


def _final(result: Any) -> bool:
    parameters = result.get_response().parameters
    return FINAL in parameters and parameters[FINAL].bool_param


def test_a_decoupled_model_streams_between_reschedules(stream: Stream) -> None:
    stream.send("generator", 4, "gen")
    answers = [stream.next() for _ in range(5)]
    assert [error for _, error in answers] == [None] * 5
    assert [result.get_response().id for result, _ in answers] == ["gen"] * 5
    assert [int(result.as_numpy("OUT")[0, 0]) for result, _ in answers[:4]] == [1, 2, 3, 4]
    assert [_final(result) for result, _ in answers] == [False] * 4 + [True]
    assert len(answers[4][0].get_response().outputs) == 0
    assert stream.results.empty()


def test_decoupled_requests_interleave_on_one_stream(stream: Stream) -> None:
    counts = {"a": 3, "b": 5, "c": 1}
    for request_id, n in counts.items():
        stream.send("generator", n, request_id)
    seen: dict[str, list[int]] = {request_id: [] for request_id in counts}
    finals: dict[str, int] = dict.fromkeys(counts, 0)
    for _ in range(sum(counts.values()) + len(counts)):
        result, error = stream.next()
        assert error is None
        request_id = result.get_response().id
        assert finals[request_id] == 0, "a response after the final one"
        if _final(result):
            finals[request_id] += 1
        else:
            seen[request_id].append(int(result.as_numpy("OUT")[0, 0]))
    assert seen == {request_id: list(range(1, n + 1)) for request_id, n in counts.items()}
    assert finals == dict.fromkeys(counts, 1)


def test_a_decoupled_model_without_iterative_sequence_gets_the_error(stream: Stream) -> None:
    stream.send("generator_plain", 3, "plain")
    first, error = stream.next()
    assert error is None and int(first.as_numpy("OUT")[0, 0]) == 1
    _, error = stream.next()
    assert error is not None and NOT_CONFIGURED in str(error)
