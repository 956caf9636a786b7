"""Triton's rules for `sequence_batching`: strategy, control inputs and implicit state."""

from __future__ import annotations

from collections.abc import Callable

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError

Fail = Callable[[str, str], ServeError]  # (field, message) -> the error to raise
Control = mc.ModelSequenceBatching.Control

_BOOLEAN_KINDS = (
    Control.CONTROL_SEQUENCE_START,
    Control.CONTROL_SEQUENCE_END,
    Control.CONTROL_SEQUENCE_READY,
)
_CORRID_TYPES = (mc.TYPE_UINT64, mc.TYPE_INT64, mc.TYPE_UINT32, mc.TYPE_INT32, mc.TYPE_STRING)


def check_sequence_batching(config: mc.ModelConfig, fail: Fail) -> None:
    """Raise the error `fail` makes on the first violation."""
    batching = config.sequence_batching
    if config.model_transaction_policy.decoupled:
        # A decoupled model's outputs stream past the batcher, so no state can be kept.
        if not batching.iterative_sequence:
            raise fail(
                "sequence_batching",
                "is not supported for decoupled models yet, except with iterative_sequence",
            )
        if batching.state:
            raise fail("sequence_batching.state", "is not supported for decoupled models yet")
    if batching.HasField("direct"):
        utilization = batching.direct.minimum_slot_utilization
        if not 0.0 <= utilization <= 1.0:
            raise fail(
                "sequence_batching.direct.minimum_slot_utilization",
                f"must be between 0 and 1, got {utilization}",
            )
    if batching.HasField("oldest"):
        oldest = batching.oldest
        if oldest.max_candidate_sequences < 0:
            raise fail(
                "sequence_batching.oldest.max_candidate_sequences",
                f"must be >= 0, got {oldest.max_candidate_sequences}",
            )
        limit = max(1, config.max_batch_size)
        for i, size in enumerate(oldest.preferred_batch_size):
            where = f"sequence_batching.oldest.preferred_batch_size[{i}]"
            if size <= 0:
                raise fail(where, f"must be > 0, got {size}")
            if size > limit:
                raise fail(where, f"{size} exceeds max_batch_size {config.max_batch_size}")
    taken = {tensor.name for tensor in config.input}
    _check_controls(batching, taken, fail)
    _check_states(batching, taken, {tensor.name for tensor in config.output}, fail)


def _check_controls(batching: mc.ModelSequenceBatching, taken: set[str], fail: Fail) -> None:
    seen_kinds: set[int] = set()
    for i, control_input in enumerate(batching.control_input):
        where = f"sequence_batching.control_input[{i}]"
        if not control_input.name:
            raise fail(f"{where}.name", "must not be empty")
        where = f"sequence_batching.control_input '{control_input.name}'"
        if control_input.name in taken:
            raise fail(where, "has the name of another input (model or control input)")
        taken.add(control_input.name)
        if len(control_input.control) != 1:
            raise fail(
                f"{where}.control",
                f"must hold exactly one control, got {len(control_input.control)}",
            )
        control = control_input.control[0]
        kind = Control.Kind.Name(control.kind)
        if control.kind in seen_kinds:
            raise fail(f"{where}.control", f"{kind} is given by more than one control input")
        seen_kinds.add(control.kind)
        pairs = [
            (field, len(values))
            for field, values in (
                ("int32_false_true", control.int32_false_true),
                ("fp32_false_true", control.fp32_false_true),
                ("bool_false_true", control.bool_false_true),
            )
            if values
        ]
        if control.kind in _BOOLEAN_KINDS:
            if len(pairs) != 1 or pairs[0][1] != 2:
                raise fail(
                    f"{where}.control",
                    f"{kind} needs exactly one of int32_false_true, fp32_false_true or "
                    "bool_false_true, with two values (false, true)",
                )
            if control.data_type != mc.TYPE_INVALID:
                raise fail(f"{where}.control.data_type", f"is not used by {kind}")
        else:
            if pairs:
                raise fail(f"{where}.control.{pairs[0][0]}", f"is not used by {kind}")
            if control.data_type not in _CORRID_TYPES:
                raise fail(
                    f"{where}.control.data_type",
                    f"{kind} must be TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or "
                    f"TYPE_STRING, got {mc.DataType.Name(control.data_type)}",
                )


def _check_states(
    batching: mc.ModelSequenceBatching, taken: set[str], outputs: set[str], fail: Fail
) -> None:
    state_outputs: set[str] = set()
    for i, state in enumerate(batching.state):
        where = f"sequence_batching.state[{i}]"
        if not state.input_name:
            raise fail(f"{where}.input_name", "must not be empty")
        if not state.output_name:
            raise fail(f"{where}.output_name", "must not be empty")
        where = f"sequence_batching.state '{state.input_name}'"
        if state.input_name in taken:
            raise fail(f"{where}.input_name", "is already the name of an input")
        taken.add(state.input_name)
        if state.output_name in state_outputs:
            raise fail(f"{where}.output_name", f"'{state.output_name}' is used by another state")
        state_outputs.add(state.output_name)
        if state.data_type == mc.TYPE_INVALID:
            raise fail(f"{where}.data_type", "must be set")
        if not state.dims:
            raise fail(f"{where}.dims", "must list at least one dimension")
        for j, dim in enumerate(state.dims):
            if dim == 0 or dim < -1:
                raise fail(f"{where}.dims[{j}]", f"must be -1 (variable) or > 0, got {dim}")
        if len(state.initial_state) > 1:
            raise fail(
                f"{where}.initial_state",
                f"must hold one element or none, got {len(state.initial_state)}",
            )
        if state.initial_state:
            _check_initial_state(state, f"{where}.initial_state", fail)


def _check_initial_state(state: mc.ModelSequenceBatching.State, where: str, fail: Fail) -> None:
    initial = state.initial_state[0]
    if initial.data_type != state.data_type:
        raise fail(f"{where}.data_type", "does not match the state's data_type")
    if not initial.name:
        raise fail(f"{where}.name", "must be set")
    if initial.WhichOneof("state_data") is None:
        raise fail(where, "needs zero_data or data_file")
    if len(initial.dims) != len(state.dims):
        raise fail(
            f"{where}.dims",
            f"has {len(initial.dims)} dimensions but the state has {len(state.dims)}",
        )
    for j, (dim, state_dim) in enumerate(zip(initial.dims, state.dims, strict=True)):
        if dim <= 0:
            raise fail(f"{where}.dims[{j}]", f"must be > 0 (no variable dims), got {dim}")
        if state_dim != -1 and dim != state_dim:
            raise fail(f"{where}.dims[{j}]", f"{dim} does not match the state's dim {state_dim}")
