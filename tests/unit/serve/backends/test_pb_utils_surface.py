"""Triton's python backend API, name by name, outside a server: what each name is, and the
errors a model gets when it misuses one, worded as Triton words them (the names and messages
come from Triton's src/resources/triton_python_backend_utils.py and src/pb_stub.cc)."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pytest

from serve.backends.python import pb_utils

# Every public name of Triton's `triton_python_backend_utils` module: its Python file's and
# those pb_stub.cc copies into it from the C++ module.
TRITON_MODULE_NAMES = [
    "TRITON_STRING_TO_NUMPY",
    "serialize_byte_tensor",
    "deserialize_bytes_tensor",
    "get_input_tensor_by_name",
    "get_output_tensor_by_name",
    "get_input_config_by_name",
    "get_output_config_by_name",
    "using_decoupled_model_transaction_policy",
    "triton_to_numpy_type",
    "numpy_to_triton_type",
    "triton_string_to_numpy",
    "ModelConfig",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TritonError",
    "TritonModelException",
    "Tensor",
    "InferenceRequest",
    "InferenceResponse",
    "Logger",
    "PreferredMemory",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_MEMORY_CPU",
    "MetricFamily",
    "load_model",
    "unload_model",
    "is_model_ready",
]


@pytest.mark.parametrize("name", TRITON_MODULE_NAMES)
def test_every_name_of_tritons_module_is_there(name: str) -> None:
    assert hasattr(pb_utils, name)


def test_constants_have_tritons_values() -> None:
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START == 1
    assert pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_END == 2
    assert pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_ALL == 1
    assert pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE == 2
    assert (pb_utils.TRITONSERVER_MEMORY_GPU, pb_utils.TRITONSERVER_MEMORY_CPU) == (0, 1)
    codes = ["UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED"]
    codes += ["ALREADY_EXISTS", "CANCELLED"]
    assert [getattr(pb_utils.TritonError, code) for code in codes] == list(range(8))


# -- data types ------------------------------------------------------------------------------
def test_type_tables_are_tritons() -> None:
    assert pb_utils.TRITON_STRING_TO_NUMPY["TYPE_BOOL"] is bool
    assert pb_utils.TRITON_STRING_TO_NUMPY["TYPE_STRING"] is np.object_
    assert set(pb_utils.TRITON_STRING_TO_NUMPY) == {
        f"TYPE_{name}"
        for name in [
            "BOOL",
            "UINT8",
            "UINT16",
            "UINT32",
            "UINT64",
            "INT8",
            "INT16",
            "INT32",
            "INT64",
            "FP16",
            "FP32",
            "FP64",
        ]
    } | {"TYPE_STRING"}
    assert pb_utils.triton_string_to_numpy("TYPE_FP16") is np.float16
    with pytest.raises(KeyError):
        pb_utils.triton_string_to_numpy("TYPE_NOPE")


def test_numbers_and_numpy_types() -> None:
    pairs = [(1, np.bool_), (2, np.uint8), (8, np.int32), (10, np.float16), (13, np.object_)]
    for number, numpy_type in pairs:
        assert pb_utils.triton_to_numpy_type(number) is numpy_type
        assert pb_utils.numpy_to_triton_type(numpy_type) == number
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.numpy_to_triton_type(np.complex64) is None
    assert pb_utils.triton_to_numpy_type(14) is None  # BF16 has no numpy type
    assert pb_utils.triton_to_numpy_type(99) is None


def test_bytes_framing() -> None:
    data = np.array([[b"ab", "c\u00e9"], [b"", 7]], dtype=object)
    framed = pb_utils.serialize_byte_tensor(data)
    assert framed == (
        b"\x02\x00\x00\x00ab"
        + b"\x03\x00\x00\x00c\xc3\xa9"
        + b"\x00\x00\x00\x00"
        + b"\x01\x00\x00\x007"
    )
    assert framed is not None
    assert pb_utils.deserialize_bytes_tensor(framed).tolist() == [b"ab", b"c\xc3\xa9", b"", b"7"]
    assert pb_utils.serialize_byte_tensor(np.array([b"xy"], dtype=np.bytes_)) == b"\x02\0\0\0xy"
    assert pb_utils.serialize_byte_tensor(np.zeros(3, np.float32)) is None
    with pytest.raises(pb_utils.TritonModelException, match="deserialize_bytes_tensor"):
        pb_utils.deserialize_bytes_tensor(b"\x09\x00\x00\x00ab")


# -- config ----------------------------------------------------------------------------------
CONFIG = {
    "name": "m",
    "max_batch_size": 8,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [4]}],
    "output": [{"name": "OUT", "data_type": "TYPE_INVALID", "dims": []}],
}


def test_config_lookups() -> None:
    assert pb_utils.get_input_config_by_name(CONFIG, "IN") == CONFIG["input"][0]  # type: ignore[index]
    assert pb_utils.get_output_config_by_name(CONFIG, "OUT")["data_type"] == "TYPE_INVALID"  # type: ignore[index]
    assert pb_utils.get_input_config_by_name(CONFIG, "OUT") is None
    assert pb_utils.get_output_config_by_name({}, "OUT") is None
    assert not pb_utils.using_decoupled_model_transaction_policy(CONFIG)
    decoupled = {"model_transaction_policy": {"decoupled": True}}
    assert pb_utils.using_decoupled_model_transaction_policy(decoupled)


def test_model_config_changes_what_as_dict_shows() -> None:
    config = pb_utils.ModelConfig(json.dumps(CONFIG))  # Triton passes the JSON text
    config.set_max_batch_size(16)
    config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]})
    config.add_input({"name": "EXTRA", "data_type": "TYPE_INT32", "dims": [1], "optional": True})
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": False})
    shown = config.as_dict()
    assert shown["max_batch_size"] == 16
    assert shown["output"] == [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}]
    assert [entry["name"] for entry in shown["input"]] == ["IN", "EXTRA"]
    assert shown["dynamic_batching"] == {}
    assert shown["model_transaction_policy"] == {"decoupled": False}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c.set_max_batch_size(4),
            "configuration specified max_batch_size 8, but in auto-complete-config function "
            "for model 'm' specified max_batch_size 4",
        ),
        (
            lambda c: c.add_input({"name": "IN", "data_type": "TYPE_INT8", "dims": [4]}),
            "unable to load model 'm', configuration expects datatype TYPE_FP32 for input "
            "'IN', model provides TYPE_INT8",
        ),
        (
            lambda c: c.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [5]}),
            "model 'm', tensor 'IN': the model expects dims [5] but the model configuration "
            "specifies dims [4]",
        ),
        (
            lambda c: c.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [1], "bad": 1}),
            "input 'X' in auto-complete-config function for model 'm' contains property other "
            "than 'name', 'data_type', 'dims' and 'optional'.",
        ),
        (
            lambda c: c.add_output({"name": "Y", "dims": [1]}),
            "output 'Y' in auto-complete-config function for model 'm' is missing 'data_type' "
            "property.",
        ),
        (
            lambda c: c.set_model_transaction_policy({"streaming": True}),
            "model transaction property in auto-complete-config function for model 'm' "
            "contains property other than 'decoupled'.",
        ),
    ],
)
def test_model_config_refuses_contradictions_in_tritons_words(
    change: Callable[[pb_utils.ModelConfig], None], message: str
) -> None:
    config = pb_utils.ModelConfig(json.loads(json.dumps(CONFIG)))
    with pytest.raises(ValueError) as info:
        change(config)
    assert str(info.value) == message


def test_model_config_refuses_changing_decoupled() -> None:
    config = pb_utils.ModelConfig({"name": "m", "model_transaction_policy": {"decoupled": True}})
    with pytest.raises(ValueError, match="trying to change decoupled property"):
        config.set_model_transaction_policy({"decoupled": False})


# -- tensors ---------------------------------------------------------------------------------
def test_tensor_basics() -> None:
    strided = np.arange(12, dtype=np.int16).reshape(3, 4)[:, ::2]
    tensor = pb_utils.Tensor("T", strided)
    assert tensor.as_numpy().flags.c_contiguous  # made contiguous, as in Triton
    np.testing.assert_array_equal(tensor.as_numpy(), strided)
    assert (tensor.name(), tensor.shape(), tensor.triton_dtype(), tensor.is_cpu()) == (
        "T",
        [3, 2],
        7,
        True,
    )
    with pytest.raises(pb_utils.TritonModelException, match="Tensor name cannot be an empty"):
        pb_utils.Tensor("", np.zeros(1))
    with pytest.raises(pb_utils.TritonModelException, match="no Triton data type"):
        pb_utils.Tensor("C", np.zeros(1, np.complex64))


def test_dlpack_both_ways_with_torch() -> None:
    torch = pytest.importorskip("torch")
    tensor = pb_utils.Tensor("T", np.arange(4, dtype=np.float32))
    shared = torch.from_dlpack(tensor)  # __dlpack__ / __dlpack_device__
    shared[0] = 9.0
    assert tensor.as_numpy()[0] == 9.0  # no copy: the same memory
    assert tensor.__dlpack_device__() == (1, 0)
    back = pb_utils.Tensor.from_dlpack("B", torch.arange(3, dtype=torch.int32))
    assert back.as_numpy().tolist() == [0, 1, 2] and back.is_cpu()
    capsule = pb_utils.Tensor.from_dlpack("K", torch.utils.dlpack.to_dlpack(torch.ones(2)))
    assert capsule.as_numpy().tolist() == [1.0, 1.0]
    with pytest.raises(pb_utils.TritonModelException, match="not contiguous"):
        pb_utils.Tensor.from_dlpack("S", torch.arange(6).reshape(2, 3).t())


def test_dlpack_refusals() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="DLPack does not have support for"):
        pb_utils.Tensor("S", np.array([b"x"], dtype=object)).to_dlpack()
    with pytest.raises(pb_utils.TritonModelException, match="Tensor must be a DLPack capsule"):
        pb_utils.Tensor.from_dlpack("X", [1, 2])
    capsule = pb_utils.Tensor("U", np.ones(2)).to_dlpack()
    np.from_dlpack(pb_utils.Tensor.from_dlpack("V", capsule))
    with pytest.raises(pb_utils.TritonModelException, match="consumed already"):
        pb_utils.Tensor.from_dlpack("W", capsule)


class _FakeGpuTensor:
    """Stands for a CUDA tensor (DLPack device 2) without a GPU."""

    shape = (2, 3)
    dtype = "float16"

    def __dlpack__(self, stream: object = None) -> object:
        raise AssertionError("not read here")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 1)


def test_a_gpu_tensor_stays_on_its_gpu() -> None:
    tensor = pb_utils.Tensor.from_dlpack("G", _FakeGpuTensor())
    assert not tensor.is_cpu()
    assert tensor.__dlpack_device__() == (2, 1)
    assert (tensor.shape(), tensor.triton_dtype()) == ([2, 3], 10)
    with pytest.raises(pb_utils.TritonModelException) as info:
        tensor.as_numpy()
    assert str(info.value) == "Tensor is stored in GPU and cannot be converted to NumPy."


# -- requests and responses ------------------------------------------------------------------
def test_request_arguments_as_triton_takes_them() -> None:
    request = pb_utils.InferenceRequest(
        model_name=b"m",  # type: ignore[arg-type]  # Triton's binding takes bytes as str
        requested_output_names=[b"OUT"],  # type: ignore[list-item]
        inputs=[pb_utils.Tensor("IN", np.zeros(1))],
        correlation_id="seq-7",
        timeout=1000,
        parameters={"a": 1, "b": "x", "c": False},
    )
    assert (request.model_name(), request.requested_output_names()) == ("m", ["OUT"])
    assert (request.correlation_id(), request.timeout(), request.flags()) == ("seq-7", 1000, 0)
    assert json.loads(request.parameters()) == {"a": 1, "b": "x", "c": False}
    assert request.trace().get_context() is None
    request.set_flags(pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START)
    assert request.flags() == 1


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"correlation_id": 1.5}, "Correlation ID must be integer or string"),
        (
            {"parameters": {1: "x"}},
            "Expect parameters keys to have type str, found type <class 'int'>",
        ),
        (
            {"parameters": {"x": 1.5}},
            "Expect parameters values to have type bool/int/str, found type <class 'float'>",
        ),
        (
            {"requested_output_names": [""]},
            "Requested output name for request with id '' and model name 'm' should not be empty.",
        ),
        (
            {"inputs": [None]},
            "Input tensor for request with id '' and model name 'm' should not be empty.",
        ),
    ],
)
def test_request_misuse_in_tritons_words(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(pb_utils.TritonModelException) as info:
        pb_utils.InferenceRequest(model_name="m", **arguments)  # type: ignore[arg-type]
    assert str(info.value) == message


def test_response_parameters_and_errors() -> None:
    response = pb_utils.InferenceResponse(parameters={"k": "v", "n": 2})
    assert json.loads(response.parameters()) == {"k": "v", "n": 2}
    assert pb_utils.InferenceResponse().parameters() == "{}"
    with pytest.raises(pb_utils.TritonModelException, match="should not be empty"):
        pb_utils.InferenceResponse([None])  # type: ignore[list-item]
    with pytest.raises(pb_utils.TritonModelException, match="Expect parameters values"):
        pb_utils.InferenceResponse(parameters={"k": [1]})
    assert pb_utils.TritonError("no code").code() == pb_utils.TritonError.INTERNAL


def test_preferred_memory_and_trace() -> None:
    memory = pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 1)
    assert (memory.preferred_memory_type, memory.preferred_device_id) == (0, 1)
    request = pb_utils.InferenceRequest(model_name="m", preferred_memory=memory)
    assert request.preferred_memory() is memory
    with pytest.raises(ValueError):
        pb_utils.PreferredMemory(5)


def test_metric_kinds_are_tritons_names() -> None:
    assert pb_utils.MetricFamily.COUNTER is pb_utils.MetricKind.COUNTER
    assert {kind.name for kind in pb_utils.MetricKind} == {"COUNTER", "GAUGE", "HISTOGRAM"}


def test_logger_levels(capsys: pytest.CaptureFixture[str]) -> None:
    pb_utils.Logger.log("plain")
    pb_utils.Logger.log("loud", pb_utils.Logger.ERROR)
    pb_utils.Logger.log_warn("careful")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" ", 1)[0] for line in lines] == ["I", "E", "W"]
    assert lines[0].endswith("] plain") and "test_pb_utils_surface.py:" in lines[0]
    assert pb_utils.Logger.LogLevel.VERBOSE == 3
