"""Request parameters added to prebuilt infer requests: what a server parses back."""

from __future__ import annotations

import orjson
import pytest
from tritonclient.grpc import service_pb2 as pb

from protocol.client.infer_params import (
    grpc_parameters_suffix,
    json_header_with_parameters,
    sequence_parameters,
)


def test_json_header_gains_request_parameters_and_keeps_its_members() -> None:
    header = orjson.dumps({"id": "", "inputs": [{"name": "X"}]})
    merged = orjson.loads(json_header_with_parameters(header, sequence_parameters(7, True, False)))
    assert merged == {
        "parameters": {"sequence_id": 7, "sequence_start": True, "sequence_end": False},
        "id": "",
        "inputs": [{"name": "X"}],
    }


def test_json_header_must_be_an_object_with_members() -> None:
    with pytest.raises(ValueError, match="object"):
        json_header_with_parameters(b"{}", {"sequence_id": 1})


@pytest.mark.parametrize(
    ("sequence_id", "field"),
    [(42, "int64_param"), ("session-a", "string_param"), (2**63 + 5, "uint64_param")],
)
def test_grpc_suffix_merges_into_the_serialized_request(sequence_id: int | str, field: str) -> None:
    base = pb.ModelInferRequest(model_name="acc", model_version="1")
    base.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    wire = base.SerializeToString() + grpc_parameters_suffix(
        sequence_parameters(sequence_id, False, True)
    )
    parsed = pb.ModelInferRequest.FromString(wire)
    assert parsed.model_name == "acc" and parsed.inputs[0].name == "INPUT"
    assert getattr(parsed.parameters["sequence_id"], field) == sequence_id
    assert parsed.parameters["sequence_start"].bool_param is False
    assert parsed.parameters["sequence_end"].bool_param is True
