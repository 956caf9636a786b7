"""The bundled models over gRPC with Triton's own clients (tritonclient.grpc and its asyncio
variant): health, metadata, config, infer, statistics, and errors that leave the server serving."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


@pytest.fixture(scope="module")
def stub(server: RunningServer) -> Iterator[service_pb2_grpc.GRPCInferenceServiceStub]:
    """The raw service, for messages tritonclient would not send."""
    with grpc.insecure_channel(server.grpc_url) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def _inputs(arrays: dict[str, np.ndarray], datatype: str) -> list[grpcclient.InferInput]:
    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _simple_inputs(rows: int = 1) -> tuple[np.ndarray, np.ndarray, list[grpcclient.InferInput]]:
    a = np.arange(16 * rows, dtype=np.int32).reshape(rows, 16)
    b = np.full((rows, 16), 3, dtype=np.int32)
    return a, b, _inputs({"INPUT0": a, "INPUT1": b}, "INT32")


def _status(error: InferenceServerException) -> str:
    return str(error.status())


def test_health_and_server_metadata(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    metadata = client.get_server_metadata()
    assert metadata.name == "autotune"
    assert "statistics" in metadata.extensions and "model_repository" in metadata.extensions


@pytest.mark.parametrize("model", ["simple", "digits", "resnet18", "add_sub_py"])
def test_model_ready_metadata_and_config(
    client: grpcclient.InferenceServerClient, model: str
) -> None:
    assert client.is_model_ready(model)
    assert client.is_model_ready(model, "1")
    assert not client.is_model_ready(model, "7")
    metadata = client.get_model_metadata(model)
    config = client.get_model_config(model).config
    assert metadata.name == model and list(metadata.versions) == ["1"]
    assert config.name == model and config.max_batch_size > 0
    assert [t.name for t in metadata.inputs] == [t.name for t in config.input]
    assert [t.name for t in metadata.outputs] == [t.name for t in config.output]
    assert all(t.shape[0] == -1 for t in metadata.inputs)  # the batch dimension


def test_simple_grpc_infer_client_works_unchanged(client: grpcclient.InferenceServerClient) -> None:
    """What tritonclient's simple_grpc_infer_client example does and checks."""
    a, b, inputs = _simple_inputs()
    outputs = [
        grpcclient.InferRequestedOutput("OUTPUT0"),
        grpcclient.InferRequestedOutput("OUTPUT1"),
    ]
    result = client.infer("simple", inputs, outputs=outputs, request_id="1")
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    response = result.get_response()
    assert response.id == "1"
    assert (response.model_name, response.model_version) == ("simple", "1")


def test_outputs_default_to_all_and_a_subset_is_honoured(
    client: grpcclient.InferenceServerClient,
) -> None:
    a, b, inputs = _simple_inputs(rows=3)
    every = client.infer("simple", inputs)
    assert [o.name for o in every.get_response().outputs] == ["OUTPUT0", "OUTPUT1"]
    only = client.infer("simple", inputs, outputs=[grpcclient.InferRequestedOutput("OUTPUT1")])
    assert [o.name for o in only.get_response().outputs] == ["OUTPUT1"]
    np.testing.assert_array_equal(only.as_numpy("OUTPUT1"), a - b)


def test_python_backend_fp32(client: grpcclient.InferenceServerClient) -> None:
    rng = np.random.default_rng(2)
    a = rng.random((2, 16), dtype=np.float32)
    b = rng.random((2, 16), dtype=np.float32)
    result = client.infer("add_sub_py", _inputs({"INPUT0": a, "INPUT1": b}, "FP32"))
    np.testing.assert_allclose(result.as_numpy("OUTPUT0"), a + b, rtol=1e-6)
    np.testing.assert_allclose(result.as_numpy("OUTPUT1"), a - b, rtol=1e-6)


def test_typed_contents_are_accepted(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
    request = pb.ModelInferRequest(model_name="simple", id="typed")
    for name, values in (("INPUT0", range(16)), ("INPUT1", [1] * 16)):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend(values)
    response = stub.ModelInfer(request, timeout=30)
    result = grpcclient.InferResult(response)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.arange(1, 17).reshape(1, 16))
    assert response.id == "typed"


def test_asyncio_client(server: RunningServer) -> None:
    async def run() -> list[np.ndarray]:
        async with aioclient.InferenceServerClient(server.grpc_url) as client:
            assert await client.is_server_ready()
            assert (await client.get_model_metadata("simple")).name == "simple"
            calls = []
            for k in range(8):
                a = np.full((1, 16), k, dtype=np.int32)
                inputs = []
                for name in ("INPUT0", "INPUT1"):
                    tensor = aioclient.InferInput(name, [1, 16], "INT32")
                    tensor.set_data_from_numpy(a)
                    inputs.append(tensor)
                calls.append(client.infer("simple", inputs, request_id=str(k)))
            results = await asyncio.gather(*calls)
            assert [r.get_response().id for r in results] == [str(k) for k in range(8)]
            return [r.as_numpy("OUTPUT0") for r in results]

    sums = asyncio.run(run())
    assert [int(s[0, 0]) for s in sums] == [2 * k for k in range(8)]


def test_statistics_count_the_inferences(client: grpcclient.InferenceServerClient) -> None:
    before = client.get_inference_statistics("simple").model_stats[0].inference_stats.success.count
    _, _, inputs = _simple_inputs(rows=2)
    client.infer("simple", inputs)
    stats = client.get_inference_statistics("simple", "1").model_stats
    assert [(s.name, s.version) for s in stats] == [("simple", "1")]
    assert stats[0].inference_stats.success.count == before + 1
    assert stats[0].inference_stats.compute_infer.ns > 0
    assert stats[0].last_inference > 0
    every = {s.name for s in client.get_inference_statistics().model_stats}
    assert {"simple", "digits", "resnet18", "add_sub_py"} <= every


def test_unknown_model_is_not_found(client: grpcclient.InferenceServerClient) -> None:
    _, _, inputs = _simple_inputs()
    with pytest.raises(InferenceServerException) as info:
        client.infer("no_such_model", inputs)
    assert _status(info.value) == "StatusCode.NOT_FOUND"
    assert "no_such_model" in info.value.message()
    for call in (client.get_model_metadata, client.get_model_config):
        with pytest.raises(InferenceServerException) as info:
            call("no_such_model")
        assert _status(info.value) == "StatusCode.NOT_FOUND"
    assert not client.is_model_ready("no_such_model")


def test_bad_inputs_are_invalid_and_the_server_keeps_serving(
    client: grpcclient.InferenceServerClient, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    wrong_shape = _inputs({"INPUT0": np.zeros((1, 8), np.int32)}, "INT32")
    wrong_shape += _inputs({"INPUT1": np.zeros((1, 8), np.int32)}, "INT32")
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", wrong_shape)
    assert _status(info.value) == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT0" in info.value.message()

    wrong_type = _inputs({"INPUT0": np.zeros((1, 16), np.float32)}, "FP32")
    wrong_type += _inputs({"INPUT1": np.zeros((1, 16), np.int32)}, "INT32")
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", wrong_type)
    assert _status(info.value) == "StatusCode.INVALID_ARGUMENT"
    assert "INPUT0" in info.value.message() and "FP32" in info.value.message()

    short = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        short.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        short.raw_input_contents.append(b"\x00" * 60)
    with pytest.raises(grpc.RpcError) as raw_info:
        stub.ModelInfer(short, timeout=30)
    assert raw_info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "INPUT0" in str(raw_info.value.details())

    a, b, inputs = _simple_inputs()
    np.testing.assert_array_equal(client.infer("simple", inputs).as_numpy("OUTPUT0"), a + b)


def test_repository_changes_are_refused_outside_explicit_mode(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.load_model("simple")
    assert _status(info.value) == "StatusCode.UNIMPLEMENTED"
    assert "explicit" in info.value.message()
    names = {m.name for m in client.get_model_repository_index().models}
    assert {"simple", "digits", "resnet18", "add_sub_py"} <= names


def test_cuda_shared_memory_is_refused_and_reports_no_regions(
    client: grpcclient.InferenceServerClient,
) -> None:
    with pytest.raises(InferenceServerException) as info:
        client.register_cuda_shared_memory("region", b"\x00" * 64, 0, 64)
    assert "CUDA" in info.value.message()
    assert len(client.get_cuda_shared_memory_status().regions) == 0
    client.unregister_cuda_shared_memory()  # what perf_analyzer calls on exit: not an error
