"""A python model's own is_ready() decides its readiness over HTTP and gRPC: asked at load, then
again when a readiness check finds the last answer older than a second; an error, a non-bool or
no answer is "not ready". Models without is_ready() are ready once loaded."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(180)

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""

# Ready while FLAG exists; `broken` raises, `vague` answers a string.
MODEL = """\
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", value)])
            )
        return responses

    def is_ready(self):
        if "{name}" == "broken":
            raise RuntimeError("the cache is cold")
        if "{name}" == "vague":
            return "yes"
        return os.path.exists({flag!r})
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    root = tmp_path_factory.mktemp("readiness")
    flag = root / "flag"
    repository = root / "repository"
    for name in ("flagged", "broken", "vague"):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(CONFIG.format(name=name))
        source = MODEL.format(name=name, flag=str(flag))
        (repository / name / "1" / "model.py").write_text(source)
    running = start_server(repository, root / "server.log", "--strict-readiness", "false")
    try:
        yield running, flag
    finally:
        stop_server(running)


def http_ready(server: RunningServer, model: str) -> bool:
    return httpx.get(f"{server.base}/v2/models/{model}/ready", timeout=10).status_code == 200


def grpc_ready(server: RunningServer, model: str) -> bool:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        return bool(client.is_model_ready(model))


def becomes(expected: bool, check: Callable[[], bool], within_s: float = 20.0) -> bool:
    """Whether `check()` gives `expected` within `within_s` (readiness is renewed in the
    background, so a change shows on a later check)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if check() == expected:
            return True
        time.sleep(0.2)
    return False


def test_the_model_decides_and_changes_are_seen(served: tuple[RunningServer, Path]) -> None:
    server, flag = served
    assert not http_ready(server, "flagged")  # asked at load: no flag yet
    assert not grpc_ready(server, "flagged")
    flag.touch()
    assert becomes(True, lambda: http_ready(server, "flagged"))
    assert grpc_ready(server, "flagged")
    flag.unlink()
    assert becomes(False, lambda: grpc_ready(server, "flagged"))


def test_an_error_or_a_non_bool_is_not_ready(served: tuple[RunningServer, Path]) -> None:
    server, _ = served
    for _ in range(3):  # asked again and again, still no
        assert not http_ready(server, "broken")
        assert not http_ready(server, "vague")
        time.sleep(0.5)
    assert "the cache is cold" in server.log_path.read_text()
    assert "returned str, not a bool" in server.log_path.read_text()


def test_a_model_that_says_not_ready_still_answers_requests(
    served: tuple[RunningServer, Path],
) -> None:
    server, _ = served
    body = {"inputs": [{"name": "IN", "shape": [1], "datatype": "INT32", "data": [7]}]}
    answer = httpx.post(f"{server.base}/v2/models/broken/infer", json=body, timeout=30)
    assert answer.status_code == 200
    assert answer.json()["outputs"][0]["data"] == [7]
