"""gRPC message size limits: Triton's (2 GiB - 1) by default, --grpc-max-message-bytes when
given; a message over the limit is refused and the server keeps serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, server_on_links

SMALL_LIMIT = 1024  # simple's batch of 8 carries 1024 bytes of tensors; a batch of 1, 128


def _input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def test_a_resnet18_batch_over_grpcs_default_limit_passes(
    server: RunningServer, repository_copy: Path
) -> None:
    """A batch of 8 images is ~4.8 MB: over grpcio's own 4 MiB default receive limit."""
    images = np.random.default_rng(3).random((8, 3, 224, 224), dtype=np.float32)
    assert images.nbytes > 4 * 2**20
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("resnet18", [_input("input", images, "FP32")])
    session = ort.InferenceSession(str(repository_copy / "resnet18" / "1" / "model.onnx"))
    (expected,) = session.run(None, {"input": images})
    np.testing.assert_allclose(result.as_numpy("logits"), expected, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("grpc_limit")
    limit = ("--grpc-max-message-bytes", str(SMALL_LIMIT))
    with server_on_links(root, [BUNDLED_REPOSITORY / "simple"], *limit) as running:
        yield running


def test_a_message_over_the_configured_limit_is_refused(limited_server: RunningServer) -> None:
    def infer(rows: int) -> grpcclient.InferResult:
        a = np.ones((rows, 16), np.int32)
        inputs = [_input("INPUT0", a, "INT32"), _input("INPUT1", a, "INT32")]
        return client.infer("simple", inputs)

    with grpcclient.InferenceServerClient(limited_server.grpc_url) as client:
        with pytest.raises(InferenceServerException) as info:
            infer(8)
        assert str(info.value.status()) == "StatusCode.RESOURCE_EXHAUSTED"
        np.testing.assert_array_equal(infer(1).as_numpy("OUTPUT0"), np.full((1, 16), 2))
