"""A ModelInferResponse written as buffers: the same message as protobuf serializes, with each
output's bytes taken from its array."""

from __future__ import annotations

import numpy as np
from tritonclient.grpc import service_pb2 as pb

from serve.grpc.codec import encode_infer_response, encode_infer_response_wire
from serve.inference import InferRequest, InferResponse, OutputTensor, RegionSlice


def test_the_buffers_parse_as_the_message_protobuf_would_write() -> None:
    scores = np.arange(70_000, dtype=np.float32)
    outputs = [
        OutputTensor("S", "FP32", scores),
        OutputTensor("T", "BYTES", np.array([b"a", b"bc"], dtype=np.object_)),
        OutputTensor("H", "FP16", np.ones((2, 3), np.float16)),
        OutputTensor("R", "INT32", np.zeros(4, np.int32), RegionSlice("region", 0, 16)),
        OutputTensor("E", "INT64", np.zeros((0, 2), np.int64)),
    ]
    response = InferResponse("m", "1", outputs, id="", parameters={"sequence_end": True})
    request = InferRequest(model_name="m", model_version="", inputs={}, id="req")
    parts = encode_infer_response_wire(response, request)
    wire = pb.ModelInferResponse.FromString(b"".join(parts))
    assert wire == encode_infer_response(response, request)
    assert any(
        np.shares_memory(np.frombuffer(part, np.uint8), scores)
        for part in parts
        if isinstance(part, memoryview)
    )
