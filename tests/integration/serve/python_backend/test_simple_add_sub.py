"""Triton's `simple` (OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, INT32[16] each) as a
python model -- the same model.py the benchmarks run on Triton's python backend -- served by a
real server and called with tritonclient over HTTP and gRPC."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from benchmarks.peer import SIMPLE_MODEL, python_model
from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("simple_py")
    config = text_format.Parse(
        (BUNDLED_REPOSITORY / "simple" / "config.pbtxt").read_text(), mc.ModelConfig()
    )
    python_model(config, SIMPLE_MODEL, root / "repository" / "simple")
    running = start_server(root / "repository", root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def _operands(batch: int) -> tuple[np.ndarray, np.ndarray]:
    in0 = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16) * 3 - 20
    in1 = np.full((batch, 16), 7, dtype=np.int32) - np.arange(16, dtype=np.int32)
    return in0, in1


def test_config_is_served_on_the_python_backend(server: RunningServer) -> None:
    with httpclient.InferenceServerClient(server.url) as client:
        config = client.get_model_config("simple")
    assert config["backend"] == "python"
    assert [(i["name"], i["data_type"], i["dims"]) for i in config["input"]] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]


@pytest.mark.parametrize("batch", [1, 3])
def test_add_sub_over_http(server: RunningServer, batch: int) -> None:
    in0, in1 = _operands(batch)
    inputs = [
        httpclient.InferInput("INPUT0", [batch, 16], "INT32"),
        httpclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(in0, binary_data=True)
    inputs[1].set_data_from_numpy(in1, binary_data=False)  # JSON numbers, as the other codec
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    with httpclient.InferenceServerClient(server.url) as client:
        result = client.infer("simple", inputs, outputs=outputs)
    sums, differences = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert sums.dtype == np.int32 and sums.shape == (batch, 16)
    assert differences.dtype == np.int32 and differences.shape == (batch, 16)
    np.testing.assert_array_equal(sums, in0 + in1)
    np.testing.assert_array_equal(differences, in0 - in1)


@pytest.mark.parametrize("batch", [1, 3])
def test_add_sub_over_grpc(server: RunningServer, batch: int) -> None:
    in0, in1 = _operands(batch)
    inputs = [
        grpcclient.InferInput("INPUT0", [batch, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [batch, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(in0)
    inputs[1].set_data_from_numpy(in1)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("simple", inputs)
    sums, differences = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
    assert sums.dtype == np.int32 and sums.shape == (batch, 16)
    assert differences.dtype == np.int32 and differences.shape == (batch, 16)
    np.testing.assert_array_equal(sums, in0 + in1)
    np.testing.assert_array_equal(differences, in0 - in1)


def test_only_the_requested_output_comes_back(server: RunningServer) -> None:
    in0, in1 = _operands(1)
    inputs = [
        grpcclient.InferInput("INPUT0", [1, 16], "INT32"),
        grpcclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(in0)
    inputs[1].set_data_from_numpy(in1)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer(
            "simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")]
        )
    assert [output.name for output in result.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), in0 - in1)
