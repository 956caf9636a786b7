"""A python model whose config.pbtxt names only the model and its backend: the model's
`auto_complete_config` fills in the batch size, tensors and dynamic batching, the server's model
config endpoints show them, and inference works with the tensors it declared."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import model_config_pb2 as mc

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(180)

BARE_CONFIG = 'name: "scaled"\nbackend: "python"\n'

SCALED_MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.set_max_batch_size(8)
        auto_complete_model_config.add_input(
            {"name": "VALUES", "data_type": "TYPE_FP32", "dims": [3]})
        auto_complete_model_config.add_input(
            {"name": "FACTOR", "data_type": "TYPE_INT32", "dims": [1]})
        auto_complete_model_config.add_output(
            {"name": "SCALED", "data_type": "TYPE_FP32", "dims": [3]})
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "VALUES").as_numpy()
            factor = pb_utils.get_input_tensor_by_name(request, "FACTOR").as_numpy()
            scaled = (values * factor).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SCALED", scaled)]))
        return responses
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("auto_complete")
    model = root / "repository" / "scaled"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(BARE_CONFIG)
    (model / "1" / "model.py").write_text(SCALED_MODEL)
    running = start_server(root / "repository", root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def test_grpc_config_shows_what_auto_complete_set(server: RunningServer) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        config = client.get_model_config("scaled").config
    assert config.name == "scaled" and config.backend == "python"
    assert config.max_batch_size == 8
    assert config.HasField("dynamic_batching")
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("VALUES", mc.TYPE_FP32, [3]),
        ("FACTOR", mc.TYPE_INT32, [1]),
    ]
    assert [(o.name, o.data_type, list(o.dims)) for o in config.output] == [
        ("SCALED", mc.TYPE_FP32, [3])
    ]


def test_http_config_and_metadata_show_them_too(server: RunningServer) -> None:
    with httpclient.InferenceServerClient(server.url) as client:
        config = client.get_model_config("scaled")
        metadata = client.get_model_metadata("scaled")
    assert config["max_batch_size"] == 8
    assert "dynamic_batching" in config
    assert [i["name"] for i in config["input"]] == ["VALUES", "FACTOR"]
    assert [o["name"] for o in config["output"]] == ["SCALED"]
    # The batch dimension comes from the completed max_batch_size.
    assert [(i["name"], i["datatype"], i["shape"]) for i in metadata["inputs"]] == [
        ("VALUES", "FP32", [-1, 3]),
        ("FACTOR", "INT32", [-1, 1]),
    ]
    assert [(o["name"], o["datatype"], o["shape"]) for o in metadata["outputs"]] == [
        ("SCALED", "FP32", [-1, 3])
    ]


def test_inference_uses_the_completed_tensors(server: RunningServer) -> None:
    values = np.array([[1.5, -2.0, 4.0], [0.25, 8.0, -1.0]], dtype=np.float32)
    factor = np.array([[3], [-2]], dtype=np.int32)
    inputs = [
        grpcclient.InferInput("VALUES", [2, 3], "FP32"),
        grpcclient.InferInput("FACTOR", [2, 1], "INT32"),
    ]
    inputs[0].set_data_from_numpy(values)
    inputs[1].set_data_from_numpy(factor)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        result = client.infer("scaled", inputs)
    scaled = result.as_numpy("SCALED")
    assert scaled.dtype == np.float32
    np.testing.assert_array_equal(scaled, values * factor)


def test_a_tensor_the_completed_config_lacks_is_refused(server: RunningServer) -> None:
    inputs = [httpclient.InferInput("OTHER", [1, 3], "FP32")]
    inputs[0].set_data_from_numpy(np.zeros((1, 3), dtype=np.float32))
    with (
        httpclient.InferenceServerClient(server.url) as client,
        pytest.raises(httpclient.InferenceServerException) as raised,
    ):
        client.infer("scaled", inputs)
    assert raised.value.status() == "400"
    assert "OTHER" in str(raised.value)
