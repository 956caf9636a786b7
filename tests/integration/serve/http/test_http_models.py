"""HTTP's own framing with Triton's client: tensors sent and asked for as JSON or as binary
tensor data give the same answers. (What every transport does alike, health, metadata, infer,
errors, is the contract suite's: tests/integration/serve/contract/.)"""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from tests.support.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.url, concurrency=4)


def _infer(
    client: httpclient.InferenceServerClient,
    model: str,
    arrays: dict[str, np.ndarray],
    outputs: list[str],
    binary: bool,
) -> httpclient.InferResult:
    inputs = []
    for name, array in arrays.items():
        tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array, binary_data=binary)
        inputs.append(tensor)
    requested = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in outputs]
    return client.infer(model, inputs, outputs=requested)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_int32_as_json_or_binary(client: httpclient.InferenceServerClient, binary: bool) -> None:
    rng = np.random.default_rng(1)
    a = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, size=(3, 16), dtype=np.int32)
    result = _infer(client, "simple", {"INPUT0": a, "INPUT1": b}, ["OUTPUT0", "OUTPUT1"], binary)
    for output in result.get_response()["outputs"]:
        assert ("binary_data_size" in output.get("parameters", {})) is binary
        assert ("data" in output) is not binary
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_fp32_as_json_equals_binary(client: httpclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(2)
    a = rng.random((2, 16), dtype=np.float32)
    b = rng.random((2, 16), dtype=np.float32)
    arrays = {"INPUT0": a, "INPUT1": b}
    as_json = _infer(client, "add_sub_py", arrays, ["OUTPUT0", "OUTPUT1"], binary=False)
    as_binary = _infer(client, "add_sub_py", arrays, ["OUTPUT0", "OUTPUT1"], binary=True)
    for name in ("OUTPUT0", "OUTPUT1"):
        # JSON numbers carry a float32 exactly: both framings give the same bits
        np.testing.assert_array_equal(as_json.as_numpy(name), as_binary.as_numpy(name))
    np.testing.assert_allclose(as_binary.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
