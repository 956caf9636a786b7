"""The gRPC infer codec: ModelInferRequest -> InferRequest and InferResponse ->
ModelInferResponse, checked against what Triton's own client sends and reads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from protocol.tensors import serialize_bytes_tensor
from serve.errors import ErrorKind, ServeError
from serve.grpc.codec import decode_infer_request, decode_parameters, encode_infer_response
from serve.inference import InferRequest, InferResponse, OutputTensor, RegionSlice

Input = pb.ModelInferRequest.InferInputTensor


def _raw_request(*arrays: tuple[str, str, np.ndarray], **fields: Any) -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name="m", **fields)
    for name, datatype, array in arrays:
        message.inputs.add(name=name, datatype=datatype, shape=array.shape)
        if datatype == "BYTES":
            message.raw_input_contents.append(serialize_bytes_tensor(array))
        else:
            message.raw_input_contents.append(array.astype(array.dtype.newbyteorder("<")).tobytes())
    return message


def _invalid(message: pb.ModelInferRequest) -> str:
    with pytest.raises(ServeError) as info:
        decode_infer_request(message)
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT
    return info.value.message


@pytest.mark.parametrize(
    ("datatype", "array"),
    [
        ("INT32", np.arange(16, dtype=np.int32).reshape(1, 16)),
        ("FP16", np.array([[0.5, -2.0, 65504.0]], dtype=np.float16)),
        ("FP64", np.array([1.5, -1e300])),
        ("UINT64", np.array([2**64 - 1, 0], dtype=np.uint64)),
        ("BOOL", np.array([[True, False]])),
        ("INT8", np.array([-128, 127], dtype=np.int8)),
    ],
)
def test_raw_inputs_decode_to_their_arrays(datatype: str, array: np.ndarray) -> None:
    request = decode_infer_request(_raw_request(("X", datatype, array), id="r1"))
    assert request.id == "r1"
    assert request.model_name == "m"
    assert request.input_datatypes == {"X": datatype}
    decoded = request.inputs["X"]
    assert decoded.dtype == array.dtype
    np.testing.assert_array_equal(decoded, array)


def test_raw_bytes_input_decodes_to_an_object_array() -> None:
    text = np.array([[b"ab", b""], [b"\xff\x00", b"z" * 300]], dtype=np.object_)
    request = decode_infer_request(_raw_request(("T", "BYTES", text)))
    decoded = request.inputs["T"]
    assert decoded.shape == (2, 2)
    assert decoded.tolist() == text.tolist()


@pytest.mark.parametrize(
    ("datatype", "field", "values", "dtype"),
    [
        ("BOOL", "bool_contents", [True, False], np.bool_),
        ("INT8", "int_contents", [-128, 127], np.int8),
        ("INT32", "int_contents", [-(2**31), 2**31 - 1], np.int32),
        ("INT64", "int64_contents", [-(2**63), 2**63 - 1], np.int64),
        ("UINT16", "uint_contents", [0, 65535], np.uint16),
        ("UINT64", "uint64_contents", [0, 2**64 - 1], np.uint64),
        ("FP32", "fp32_contents", [0.5, -3.25], np.float32),
        ("FP64", "fp64_contents", [0.1, 1e300], np.float64),
    ],
)
def test_typed_contents_decode_to_the_datatype(
    datatype: str, field: str, values: list[Any], dtype: type
) -> None:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="X", datatype=datatype, shape=[1, 2])
    getattr(tensor.contents, field).extend(values)
    decoded = decode_infer_request(message).inputs["X"]
    assert decoded.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(decoded, np.array([values], dtype=dtype))


def test_bytes_contents_decode_to_an_object_array() -> None:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="T", datatype="BYTES", shape=[3])
    tensor.contents.bytes_contents.extend([b"a", b"", b"\x00\xff"])
    assert decode_infer_request(message).inputs["T"].tolist() == [b"a", b"", b"\x00\xff"]


def test_raw_size_not_matching_the_shape_names_the_tensor() -> None:
    message = _raw_request(("INPUT0", "INT32", np.zeros((1, 16), np.int32)))
    message.raw_input_contents[0] = message.raw_input_contents[0][:-4]
    error = _invalid(message)
    assert "INPUT0" in error and "60 bytes" in error and "64" in error


def test_raw_bytes_elements_not_matching_the_shape_name_the_tensor() -> None:
    message = _raw_request(("TEXT", "BYTES", np.array([b"a", b"b"], dtype=np.object_)))
    message.inputs[0].shape[:] = [3]
    assert "TEXT" in _invalid(message)


def test_contents_count_not_matching_the_shape_names_the_tensor_and_field() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="X", datatype="INT32", shape=[4]).contents.int_contents.extend([1])
    error = _invalid(message)
    assert "'X'" in error and "int_contents" in error and "1 elements" in error


def test_contents_out_of_range_for_a_narrow_type_names_the_tensor() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="X", datatype="INT8", shape=[1]).contents.int_contents.append(200)
    assert "'X'" in _invalid(message)


def test_fp16_needs_raw_contents() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="H", datatype="FP16", shape=[1]).contents.fp32_contents.append(1.0)
    error = _invalid(message)
    assert "'H'" in error and "raw_input_contents" in error


def test_contents_and_raw_contents_are_not_mixed() -> None:
    message = _raw_request(("A", "INT32", np.zeros(2, np.int32)))
    message.inputs.add(name="B", datatype="INT32", shape=[1]).contents.int_contents.append(1)
    assert "'B'" in _invalid(message)


def test_an_input_without_data_is_named() -> None:
    message = _raw_request(("A", "INT32", np.zeros(2, np.int32)))
    message.inputs.add(name="B", datatype="INT32", shape=[2])
    assert "'B' has no data" in _invalid(message)


def test_extra_raw_contents_are_refused() -> None:
    message = _raw_request(("A", "INT32", np.zeros(2, np.int32)))
    message.raw_input_contents.append(b"\x00" * 8)
    assert "2 raw_input_contents" in _invalid(message)


def test_unknown_datatype_and_negative_shape_name_the_tensor() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="Q", datatype="INT3", shape=[1])
    assert "'Q'" in _invalid(message) and "INT3" in _invalid(message)
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="N", datatype="INT32", shape=[-1])
    assert "'N'" in _invalid(message)


@pytest.mark.parametrize("shape", [[0, 2**62, 4], [2**32, 2**32]])
def test_a_shape_beyond_any_tensor_is_invalid_naming_the_tensor(shape: list[int]) -> None:
    """An empty tensor of such a shape, or one with data, is refused before numpy sees it."""
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="HUGE", datatype="INT32", shape=shape)
    assert "'HUGE': shape" in _invalid(message)
    assert "more elements than a tensor can hold" in _invalid(message)


def test_shared_memory_tensors_are_left_for_the_dataplane() -> None:
    message = _raw_request(("A", "INT32", np.zeros(1, np.int32)))
    tensor = message.inputs.add(name="S", datatype="INT32", shape=[2])
    tensor.parameters["shared_memory_region"].string_param = "in"
    tensor.parameters["shared_memory_byte_size"].int64_param = 8
    tensor.parameters["shared_memory_offset"].int64_param = 16
    out = message.outputs.add(name="OUT")
    out.parameters["shared_memory_region"].string_param = "out"
    out.parameters["shared_memory_byte_size"].int64_param = 4
    request = decode_infer_request(message)
    assert list(request.inputs) == ["A"]  # the raw entry goes to the input without a region
    assert request.region_inputs == {"S": ((2,), RegionSlice("in", 16, 8))}
    assert request.input_datatypes["S"] == "INT32"
    assert request.requested_outputs is not None
    assert request.requested_outputs[0].region == RegionSlice("out", 0, 4)


def test_shared_memory_input_without_byte_size_is_invalid_naming_it() -> None:
    message = pb.ModelInferRequest(model_name="m")
    tensor = message.inputs.add(name="S", datatype="INT32", shape=[1])
    tensor.parameters["shared_memory_region"].string_param = "region"
    assert "'S'" in _invalid(message) and "shared_memory_byte_size" in _invalid(message)


def test_output_in_shared_memory_is_answered_with_an_empty_raw_entry() -> None:
    written = OutputTensor("W", "INT32", np.zeros(3, np.int32), RegionSlice("out", 8, 12))
    sent = OutputTensor("D", "INT32", np.array([5], np.int32))
    message = encode_infer_response(
        InferResponse("m", "1", [written, sent]), InferRequest("m", "", {})
    )
    assert list(message.raw_output_contents) == [b"", np.array([5], np.int32).tobytes()]
    assert list(message.outputs[0].shape) == [3]
    assert not message.outputs[0].parameters


def test_parameters_become_plain_values() -> None:
    message = _raw_request(("A", "INT32", np.zeros(1, np.int32)))
    message.parameters["priority"].uint64_param = 2
    message.parameters["flag"].bool_param = True
    message.parameters["note"].string_param = "x"
    message.parameters["scale"].double_param = 0.5
    message.parameters["timeout"].int64_param = 1000
    out = message.outputs.add(name="OUT")
    out.parameters["classification"].int64_param = 3
    request = decode_infer_request(message)
    assert request.parameters == {
        "priority": 2,
        "flag": True,
        "note": "x",
        "scale": 0.5,
        "timeout": 1000,
    }
    assert request.priority == 2 and request.timeout_us == 1000
    assert request.requested_outputs is not None
    [output] = request.requested_outputs
    assert output.name == "OUT" and output.parameters == {"classification": 3}
    assert decode_parameters({}) == {}


def test_no_requested_outputs_means_all_and_duplicates_are_refused() -> None:
    message = _raw_request(("A", "INT32", np.zeros(1, np.int32)))
    assert decode_infer_request(message).requested_outputs is None
    message.outputs.add(name="O")
    message.outputs.add(name="O")
    assert "'O'" in _invalid(message)


def test_response_round_trips_through_tritonclient() -> None:
    outputs = [
        OutputTensor("SUM", "INT32", np.arange(16, dtype=np.int32).reshape(1, 16)),
        OutputTensor("HALF", "FP16", np.array([[1.5, -2.0]], dtype=np.float16)),
        OutputTensor("TEXT", "BYTES", np.array([b"a", b"\xff"], dtype=np.object_)),
        OutputTensor("STRIDED", "FP32", np.arange(12, dtype=np.float32).reshape(3, 4).T),
    ]
    response = InferResponse("m", "1", outputs, parameters={"sequence_end": True, "n": 3})
    request = InferRequest("m", "", {}, id="req-9")
    message = encode_infer_response(response, request)
    assert message.id == "req-9"
    assert (message.model_name, message.model_version) == ("m", "1")
    assert [o.name for o in message.outputs] == ["SUM", "HALF", "TEXT", "STRIDED"]
    result = grpcclient.InferResult(message)
    for output in outputs:
        np.testing.assert_array_equal(result.as_numpy(output.name), output.data)
        assert result.get_output(output.name).datatype == output.datatype
    assert decode_parameters(message.parameters) == {"sequence_end": True, "n": 3}
