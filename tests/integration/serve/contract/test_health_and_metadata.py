"""Server and model health, server metadata, model metadata and model config, the same over
every transport."""

from __future__ import annotations

import pytest
from tritonclient.grpc import model_config_pb2

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.serve.contract.clients import ContractClient

BUNDLED = ("simple", "digits", "resnet18", "add_sub_py")


def test_server_health_and_metadata(client: ContractClient) -> None:
    assert client.server_live()
    assert client.server_ready()
    metadata = client.server_metadata()
    assert metadata.name == "autotune"
    assert metadata.version
    assert {"binary_tensor_data", "statistics", "model_repository", "classification"} <= set(
        metadata.extensions
    )


@pytest.mark.parametrize("model", BUNDLED)
def test_model_ready_metadata_and_config_agree(client: ContractClient, model: str) -> None:
    assert client.model_ready(model)
    assert client.model_ready(model, "1")
    metadata = client.model_metadata(model)
    assert metadata == client.model_metadata(model, "1")
    assert metadata.name == model and list(metadata.versions) == ["1"]
    config = client.model_config(model)
    assert config == client.model_config(model, "1")
    assert config.name == model and config.max_batch_size > 0
    for tensors, declared in ((metadata.inputs, config.input), (metadata.outputs, config.output)):
        assert [t.name for t in tensors] == [t.name for t in declared]
        for tensor, spec in zip(tensors, declared, strict=True):
            # a batching model shows its batch dimension as -1; TYPE_FP32 is "FP32"
            assert list(tensor.shape) == [-1, *spec.dims]
            assert tensor.datatype == model_config_pb2.DataType.Name(spec.data_type)[5:]


def test_simple_metadata_is_the_config_file(client: ContractClient) -> None:
    metadata = client.model_metadata("simple")
    assert metadata.platform == "onnxruntime_onnx"
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [
        ("INPUT0", "INT32", [-1, 16]),
        ("INPUT1", "INT32", [-1, 16]),
    ]
    config = client.model_config("simple")
    assert config.max_batch_size == 8
    assert config.dynamic_batching.max_queue_delay_microseconds == 0
    assert [(g.count, g.kind) for g in config.instance_group] == [
        (1, model_config_pb2.ModelInstanceGroup.KIND_CPU)
    ]


def test_config_shows_the_label_file(client: ContractClient) -> None:
    config = client.model_config("digits")
    assert config.output[0].label_filename == "labels.txt"
    assert (BUNDLED_REPOSITORY / "digits" / "labels.txt").is_file()


def test_unknown_model_or_version_is_not_ready(client: ContractClient) -> None:
    assert not client.model_ready("nope")
    assert not client.model_ready("simple", "9")
    assert client.model_ready("simple")
