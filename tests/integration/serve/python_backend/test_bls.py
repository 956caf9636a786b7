"""BLS over a real server: a Triton-style python model calls an ONNX model with exec() and
async_exec() (the calls go through the callee's dynamic batcher), a decoupled python model
with exec(decoupled=True), a missing model (an error response, not an exception), and asks
whether models are ready; in explicit model control it loads and unloads another model."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.serve.python_backend.test_decoupled import write_repeat
from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

# The bundled `simple` ONNX model (INT32[16] add / sub) under a config whose batcher waits for
# four requests, so calls made together batch.
ADDER_CONFIG = """\
name: "adder"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
instance_group [ { count: 1, kind: KIND_CPU } ]
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }
"""

BLS_CONFIG = """\
name: "bls"
backend: "python"
max_batch_size: 0
input [
  { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "B" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "SUM" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "DIFF" data_type: TYPE_INT32 dims: [ -1 ] },
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }
]
"""

# MODE says what execute does with A and B:
#   sync      one exec() on adder: SUM = A + B, DIFF = A - B
#   async     four async_exec() at once (they batch in adder): SUM / DIFF of the four, joined
#   stream    exec(decoupled=True) on repeat with IN = A[0]: COUNT = responses with tensors
#   missing   exec() on a model that does not exist: its error becomes this request's error
#   ready     COUNT = [is_model_ready(adder), is_model_ready(nope)] as 2 bits
#   load      load_model(adder), then COUNT = is_model_ready(adder)
#   unload    unload_model(adder), then COUNT = is_model_ready(adder)
BLS_MODEL = """\
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


def adder_request(a, b, outputs=("OUTPUT0", "OUTPUT1")):
    return pb_utils.InferenceRequest(
        model_name="adder",
        requested_output_names=list(outputs),
        inputs=[pb_utils.Tensor("INPUT0", a[None, :]), pb_utils.Tensor("INPUT1", b[None, :])],
    )


def out(sum_=None, diff=None, count=0):
    empty = np.zeros(0, dtype=np.int32)
    tensors = [
        pb_utils.Tensor("COUNT", np.array([count], dtype=np.int32)),
        pb_utils.Tensor("SUM", empty if sum_ is None else sum_.reshape(-1)),
        pb_utils.Tensor("DIFF", empty if diff is None else diff.reshape(-1)),
    ]
    return pb_utils.InferenceResponse(output_tensors=tensors)


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            responses.append(await getattr(self, "run_" + mode)(a, b))
        return responses

    async def run_sync(self, a, b):
        response = adder_request(a, b).exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        get = lambda name: pb_utils.get_output_tensor_by_name(response, name).as_numpy()
        return out(get("OUTPUT0"), get("OUTPUT1"))

    async def run_async(self, a, b):
        calls = [adder_request(a + i, b).async_exec() for i in range(4)]
        answers = await asyncio.gather(*calls)
        for answer in answers:
            if answer.has_error():
                raise pb_utils.TritonModelException(answer.error().message())
        get = lambda r, name: pb_utils.get_output_tensor_by_name(r, name).as_numpy()
        sums = np.concatenate([get(r, "OUTPUT0") for r in answers], axis=None)
        diffs = np.concatenate([get(r, "OUTPUT1") for r in answers], axis=None)
        return out(sums, diffs, len(answers))

    async def run_stream(self, a, b):
        request = pb_utils.InferenceRequest(
            model_name="repeat",
            requested_output_names=["OUT"],
            inputs=[pb_utils.Tensor("IN", a[:1].copy())],
        )
        count = 0
        for response in request.exec(decoupled=True):
            if response.has_error():
                raise pb_utils.TritonModelException(response.error().message())
            if response.output_tensors():
                count += 1
        return out(count=count)

    async def run_missing(self, a, b):
        request = pb_utils.InferenceRequest(
            model_name="nope", requested_output_names=["X"], inputs=[pb_utils.Tensor("X", a)]
        )
        response = request.exec()
        if not response.has_error():
            return out(count=-1)
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError("callee failed: " + response.error().message())
        )

    async def run_ready(self, a, b):
        bits = 2 * pb_utils.is_model_ready("adder") + pb_utils.is_model_ready("nope")
        return out(count=bits)

    async def run_load(self, a, b):
        pb_utils.load_model("adder")
        return out(count=int(pb_utils.is_model_ready("adder")))

    async def run_unload(self, a, b):
        pb_utils.unload_model("adder")
        return out(count=int(pb_utils.is_model_ready("adder")))
"""

A = np.arange(16, dtype=np.int32)
B = np.full(16, 3, dtype=np.int32)


def write_repository(root: Path) -> Path:
    repository = root / "repository"
    adder = repository / "adder"
    (adder / "1").mkdir(parents=True)
    shutil.copy(BUNDLED_REPOSITORY / "simple" / "1" / "model.onnx", adder / "1" / "model.onnx")
    (adder / "config.pbtxt").write_text(ADDER_CONFIG)
    bls = repository / "bls"
    (bls / "1").mkdir(parents=True)
    (bls / "1" / "model.py").write_text(BLS_MODEL)
    (bls / "config.pbtxt").write_text(BLS_CONFIG)
    write_repeat(repository)
    return repository


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("bls")
    running = start_server(write_repository(root), root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def call_bls(server: RunningServer, mode: str, a: np.ndarray = A) -> httpclient.InferResult:
    inputs = [
        httpclient.InferInput("MODE", [1], "BYTES"),
        httpclient.InferInput("A", [16], "INT32"),
        httpclient.InferInput("B", [16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(np.array([mode.encode()], dtype=object))
    inputs[1].set_data_from_numpy(a)
    inputs[2].set_data_from_numpy(B)
    with httpclient.InferenceServerClient(server.url, network_timeout=60) as client:
        return client.infer("bls", inputs)


def adder_stats(server: RunningServer) -> tuple[int, int]:
    with httpclient.InferenceServerClient(server.url) as client:
        stats = client.get_inference_statistics("adder")["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def test_sync_exec_calls_the_onnx_model(server: RunningServer) -> None:
    result = call_bls(server, "sync")
    np.testing.assert_array_equal(result.as_numpy("SUM"), A + B)
    np.testing.assert_array_equal(result.as_numpy("DIFF"), A - B)


def test_async_exec_calls_run_together_and_batch_in_the_callee(server: RunningServer) -> None:
    inferences, executions = adder_stats(server)
    result = call_bls(server, "async")
    np.testing.assert_array_equal(
        result.as_numpy("SUM"), np.concatenate([A + i + B for i in range(4)])
    )
    np.testing.assert_array_equal(
        result.as_numpy("DIFF"), np.concatenate([A + i - B for i in range(4)])
    )
    after = adder_stats(server)
    # Four calls in one batch: one execution. Called one after another, the batcher would
    # have waited its full queue delay for each and run four.
    assert after == (inferences + 4, executions + 1)


def test_decoupled_exec_iterates_every_response(server: RunningServer) -> None:
    a = A.copy()
    a[0] = 5
    result = call_bls(server, "stream", a)
    assert result.as_numpy("COUNT").tolist() == [5]


def test_a_missing_callee_is_an_error_response(server: RunningServer) -> None:
    with pytest.raises(Exception, match=r"callee failed: .*nope") as raised:
        call_bls(server, "missing")
    assert "callee failed" in str(raised.value)
    np.testing.assert_array_equal(call_bls(server, "sync").as_numpy("SUM"), A + B)


def test_is_model_ready(server: RunningServer) -> None:
    assert call_bls(server, "ready").as_numpy("COUNT").tolist() == [2]


def test_load_and_unload_need_explicit_model_control(server: RunningServer) -> None:
    with pytest.raises(Exception, match="explicit"):
        call_bls(server, "unload")


def test_load_and_unload_from_a_model(tmp_path: Path) -> None:
    repository = write_repository(tmp_path)
    running = start_server(
        repository,
        tmp_path / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "bls",
    )
    try:
        assert call_bls(running, "ready").as_numpy("COUNT").tolist() == [0]
        assert call_bls(running, "load").as_numpy("COUNT").tolist() == [1]
        np.testing.assert_array_equal(call_bls(running, "sync").as_numpy("SUM"), A + B)
        assert call_bls(running, "unload").as_numpy("COUNT").tolist() == [0]
        with pytest.raises(Exception, match="adder"):
            call_bls(running, "sync")
    finally:
        stop_server(running)
