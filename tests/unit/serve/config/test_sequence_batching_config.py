"""Config checks of sequence_batching, through validate_config: each names the field."""

from __future__ import annotations

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.validate import validate_config
from serve.errors import ServeError

BASE = """
  name: "seq" backend: "python" max_batch_size: 4
  input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
  output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
"""


def check(sequence_batching: str, extra: str = "") -> None:
    text = f"{BASE} {extra} sequence_batching {{ {sequence_batching} }}"
    validate_config(text_format.Parse(text, mc.ModelConfig()), "seq/config.pbtxt", "seq")


def test_a_full_sequence_config_is_accepted() -> None:
    check(
        """
        max_sequence_idle_microseconds: 5000000
        oldest { max_candidate_sequences: 8 preferred_batch_size: [ 2, 4 ] }
        control_input [
          { name: "S" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
          { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] }
        ]
        state [ { input_name: "SI" output_name: "SO" data_type: TYPE_FP32 dims: [ -1 ]
                  initial_state { name: "z" data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } ]
        """
    )


@pytest.mark.parametrize(
    ("sequence_batching", "field", "reason"),
    [
        (
            "direct { minimum_slot_utilization: 1.5 }",
            "sequence_batching.direct.minimum_slot_utilization",
            "must be between 0 and 1",
        ),
        (
            "oldest { preferred_batch_size: [ 8 ] }",
            "sequence_batching.oldest.preferred_batch_size[0]",
            "8 exceeds max_batch_size 4",
        ),
        (
            'control_input [ { name: "IN" control [ { kind: CONTROL_SEQUENCE_READY '
            "int32_false_true: [ 0, 1 ] } ] } ]",
            "sequence_batching.control_input 'IN'",
            "has the name of another input",
        ),
        (
            'control_input [ { name: "R" control [ { kind: CONTROL_SEQUENCE_READY '
            "int32_false_true: [ 1 ] } ] } ]",
            "sequence_batching.control_input 'R'.control",
            "CONTROL_SEQUENCE_READY needs exactly one of",
        ),
        (
            'control_input [ { name: "C" control [ { kind: CONTROL_SEQUENCE_CORRID '
            "data_type: TYPE_FP32 } ] } ]",
            "sequence_batching.control_input 'C'.control.data_type",
            "must be TYPE_UINT64",
        ),
        (
            'control_input [ { name: "A" control [ { kind: CONTROL_SEQUENCE_START '
            'int32_false_true: [ 0, 1 ] } ] }, { name: "B" control [ { kind: '
            "CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]",
            "sequence_batching.control_input 'B'.control",
            "CONTROL_SEQUENCE_START is given by more than one control input",
        ),
        (
            'state [ { input_name: "S" output_name: "T" data_type: TYPE_FP32 dims: [ 2 ] '
            'initial_state { name: "i" data_type: TYPE_INT32 dims: [ 2 ] zero_data: true } } ]',
            "sequence_batching.state 'S'.initial_state.data_type",
            "does not match the state's data_type",
        ),
        (
            'state [ { input_name: "S" output_name: "T" data_type: TYPE_FP32 dims: [ 2 ] '
            'initial_state { name: "i" data_type: TYPE_FP32 dims: [ 3 ] zero_data: true } } ]',
            "sequence_batching.state 'S'.initial_state.dims[0]",
            "3 does not match the state's dim 2",
        ),
        (
            'state [ { input_name: "S" output_name: "T" data_type: TYPE_FP32 dims: [ 2 ] '
            'initial_state { name: "i" data_type: TYPE_FP32 dims: [ 2 ] } } ]',
            "sequence_batching.state 'S'.initial_state",
            "needs zero_data or data_file",
        ),
    ],
)
def test_violations_name_the_field(sequence_batching: str, field: str, reason: str) -> None:
    with pytest.raises(ServeError) as caught:
        check(sequence_batching)
    assert caught.value.message.startswith(f"seq/config.pbtxt: {field}: ")
    assert reason in caught.value.message


def test_a_decoupled_sequence_model_is_refused() -> None:
    with pytest.raises(ServeError, match="sequence_batching: is not supported for decoupled"):
        check("direct { }", "model_transaction_policy { decoupled: true }")


@pytest.mark.parametrize("strategy", ["", "direct { }", "oldest { max_candidate_sequences: 2 }"])
def test_iterative_sequences_are_accepted(strategy: str) -> None:
    check(f"iterative_sequence: true {strategy}")
    check(f"iterative_sequence: true {strategy}", "model_transaction_policy { decoupled: true }")


def test_a_decoupled_iterative_model_keeps_no_state() -> None:
    state = 'state [ { input_name: "SI" output_name: "SO" data_type: TYPE_FP32 dims: [ 1 ] } ]'
    check(f"iterative_sequence: true {state}")
    with pytest.raises(ServeError) as caught:
        check(f"iterative_sequence: true {state}", "model_transaction_policy { decoupled: true }")
    assert caught.value.message == (
        "seq/config.pbtxt: sequence_batching.state: is not supported for decoupled models yet"
    )
