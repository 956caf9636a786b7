"""`--grpc-front-end grpcio` (grpcio's own server) serves the same service as the default
native front end: metadata, infer, errors with their codes, and a stream with a bad request."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer, start_server, stop_server


@pytest.fixture(scope="module")
def client(
    repository_copy: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[grpcclient.InferenceServerClient]:
    log_path = tmp_path_factory.mktemp("grpcio") / "server.log"
    server: RunningServer = start_server(repository_copy, log_path, "--grpc-front-end", "grpcio")
    try:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            yield client
    finally:
        stop_server(server)


def _inputs(first: np.ndarray) -> list[grpcclient.InferInput]:
    inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", np.ones_like(first))):
        tensor = grpcclient.InferInput(name, list(array.shape), "INT32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def test_metadata_and_infer(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_ready()
    assert [t.name for t in client.get_model_metadata("simple").inputs] == ["INPUT0", "INPUT1"]
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    result = client.infer("simple", _inputs(a), request_id="x1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 1)
    assert result.get_response().id == "x1"


@pytest.mark.parametrize(
    ("model", "shape", "status", "named"),
    [
        ("missing", (1, 16), "StatusCode.NOT_FOUND", "missing"),
        ("simple", (1, 15), "StatusCode.INVALID_ARGUMENT", "INPUT0"),
    ],
)
def test_errors_keep_their_codes(
    client: grpcclient.InferenceServerClient,
    model: str,
    shape: tuple[int, int],
    status: str,
    named: str,
) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.infer(model, _inputs(np.zeros(shape, np.int32)))
    assert info.value.status() == status
    assert named in str(info.value)
    assert client.is_model_ready("simple")


def test_stream_answers_each_id_and_survives_a_bad_request(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for k in range(10):
            shape = (1, 15) if k == 5 else (1, 16)
            client.async_stream_infer(
                "simple", _inputs(np.full(shape, k, np.int32)), request_id=f"r{k}"
            )
        got = [answers.get(timeout=60) for _ in range(10)]
    finally:
        client.stop_stream()
    ids = {r.get_response().id for r, e in got if isinstance(r, grpcclient.InferResult)}
    errors = [str(e) for r, e in got if e is not None]
    assert ids == {f"r{k}" for k in range(10) if k != 5}
    assert len(errors) == 1 and "INPUT0" in errors[0]
