"""A python model that answers one request of a dynamically batched batch with
pb_utils.InferenceResponse(error=pb_utils.TritonError(...)): only that request fails, with the
model's message and the status its error code maps to (INVALID_ARG: 400 / INVALID_ARGUMENT; the
default code: 500 / INTERNAL); the other requests of the same batch get their outputs. The
statistics extension shows that they ran as one batch."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(180)

BATCH = 4
# The batch goes out when BATCH requests are queued; the delay only bounds a test that fails.
JUDGE_CONFIG = f"""\
name: "judge"
backend: "python"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "DOUBLED" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "BATCH" data_type: TYPE_INT32 dims: [ 1 ] }}
]
dynamic_batching {{ preferred_batch_size: [ {BATCH} ] max_queue_delay_microseconds: 10000000 }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

# X < 0 fails its request with INVALID_ARG, X > 100 with the default code (INTERNAL); the
# others get DOUBLED = 2 X and BATCH = how many requests execute got together.
JUDGE_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            value = int(x[0, 0])
            if value < 0:
                error = pb_utils.TritonError(
                    f"X is negative ({value})", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
            elif value > 100:
                error = pb_utils.TritonError(f"X is too big ({value})")
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                batch = np.full(x.shape, len(requests), dtype=np.int32)
                responses.append(pb_utils.InferenceResponse([
                    pb_utils.Tensor("DOUBLED", (x * 2).astype(np.int32)),
                    pb_utils.Tensor("BATCH", batch),
                ]))
        return responses
"""

VALUES = [5, -3, 7, 500]  # one batch: two answers, one INVALID_ARG, one default-code error


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("batch_errors")
    model = root / "repository" / "judge"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(JUDGE_CONFIG)
    (model / "1" / "model.py").write_text(JUDGE_MODEL)
    running = start_server(root / "repository", root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def _statistics(server: RunningServer) -> dict[str, Any]:
    with httpclient.InferenceServerClient(server.url) as client:
        stats: dict[str, Any] = client.get_inference_statistics("judge")["model_stats"][0]
    return stats


def _batch_count(stats: dict[str, Any], size: int) -> int:
    for entry in stats.get("batch_stats", []):
        if int(entry["batch_size"]) == size:
            return int(entry["compute_infer"]["count"])
    return 0


def _check_one_batch(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert after["execution_count"] - before["execution_count"] == 1
    assert after["inference_count"] - before["inference_count"] == BATCH
    assert _batch_count(after, BATCH) - _batch_count(before, BATCH) == 1
    success, fail = (
        after["inference_stats"][key]["count"] - before["inference_stats"][key]["count"]
        for key in ("success", "fail")
    )
    assert (success, fail) == (2, 2)


def test_one_request_of_a_batch_fails_over_http(server: RunningServer) -> None:
    before = _statistics(server)
    with httpclient.InferenceServerClient(server.url, concurrency=BATCH) as client:
        pending = []
        for value in VALUES:
            tensor = httpclient.InferInput("X", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            pending.append(client.async_infer("judge", [tensor]))
        outcomes: list[Any] = []
        for request in pending:
            try:
                outcomes.append(request.get_result())
            except InferenceServerException as exc:
                outcomes.append(exc)
    ok_5, negative, ok_7, too_big = outcomes
    for result, value in ((ok_5, 5), (ok_7, 7)):
        assert not isinstance(result, InferenceServerException), result
        assert result.as_numpy("DOUBLED").tolist() == [[2 * value]]
        assert result.as_numpy("BATCH").tolist() == [[BATCH]]
    assert isinstance(negative, InferenceServerException)
    assert negative.status() == "400"
    assert "X is negative (-3)" in negative.message()
    assert isinstance(too_big, InferenceServerException)
    assert too_big.status() == "500"
    assert "X is too big (500)" in too_big.message()
    _check_one_batch(before, _statistics(server))


def test_one_request_of_a_batch_fails_over_grpc(server: RunningServer) -> None:
    before = _statistics(server)
    answers: queue.Queue[tuple[int, Any, InferenceServerException | None]] = queue.Queue()
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        for index, value in enumerate(VALUES):
            tensor = grpcclient.InferInput("X", [1, 1], "INT32")
            tensor.set_data_from_numpy(np.array([[value]], dtype=np.int32))
            client.async_infer(
                "judge",
                [tensor],
                callback=lambda result, error, index=index: answers.put((index, result, error)),
            )
        received = sorted((answers.get(timeout=60) for _ in VALUES), key=lambda a: a[0])
    (_, ok_5, error_5), (_, _, negative), (_, ok_7, error_7), (_, _, too_big) = received
    assert error_5 is None and error_7 is None, (error_5, error_7)
    assert ok_5.as_numpy("DOUBLED").tolist() == [[10]]
    assert ok_7.as_numpy("DOUBLED").tolist() == [[14]]
    assert ok_5.as_numpy("BATCH").tolist() == ok_7.as_numpy("BATCH").tolist() == [[BATCH]]
    assert negative is not None and too_big is not None
    assert negative.status() == "StatusCode.INVALID_ARGUMENT"
    assert "X is negative (-3)" in negative.message()
    assert too_big.status() == "StatusCode.INTERNAL"
    assert "X is too big (500)" in too_big.message()
    _check_one_batch(before, _statistics(server))
