"""The tensors the sequence batcher adds to a model's inputs: control inputs (Triton's
CONTROL_SEQUENCE_START / END / READY / CORRID) and implicit state.

Each control tensor has shape [1] per request, [1, 1] when the model batches (Triton's layout).
A state starts as its initial_state (zeros unless a data_file gives it) on a sequence's START
and is replaced, after each execution, by the model's `output_name` tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from protocol.datatypes import WIRE_DTYPES, WIRE_TO_NUMPY, config_to_wire
from protocol.errors import ProtocolError
from protocol.tensors import deserialize_bytes_tensor
from serve.errors import ServeError
from serve.scheduler.sequence_request import SequenceId

Control = mc.ModelSequenceBatching.Control
INITIAL_STATE_FOLDER = "initial_state"  # data_file paths are relative to <model>/initial_state


def _wire(data_type: int) -> str:
    return config_to_wire(mc.DataType.Name(data_type))


@dataclass(frozen=True, slots=True)
class _Flag:
    """A boolean control (START, END or READY) as a tensor of one element."""

    name: str
    values: tuple[np.ndarray, np.ndarray]  # (false, true), shaped for one request


@dataclass(frozen=True, slots=True)
class _StateSpec:
    input_name: str
    output_name: str
    initial: np.ndarray  # with the batch dimension of one request when the model batches


def _flag(name: str, control: mc.ModelSequenceBatching.Control, shape: tuple[int, ...]) -> _Flag:
    dtype: np.dtype
    pair: list[Any]
    if control.int32_false_true:
        dtype, pair = np.dtype(np.int32), list(control.int32_false_true)
    elif control.fp32_false_true:
        dtype, pair = np.dtype(np.float32), list(control.fp32_false_true)
    else:
        dtype, pair = np.dtype(np.bool_), list(control.bool_false_true)
    false, true = (np.full(shape, value, dtype=dtype) for value in pair)
    return _Flag(name, (false, true))


def _initial_state(
    state: mc.ModelSequenceBatching.State, batched: bool, model_dir: Path
) -> np.ndarray:
    lead = (1,) if batched else ()
    wire = _wire(state.data_type)
    if not state.initial_state:
        # No initial_state: zeros; a variable dimension starts empty.
        dims = tuple(max(d, 0) for d in state.dims)
        if wire == "BYTES":
            empty = np.empty(lead + dims, dtype=np.object_)
            empty.fill(b"")
            return empty
        return np.zeros(lead + dims, dtype=WIRE_TO_NUMPY[wire])
    initial = state.initial_state[0]
    dims = tuple(initial.dims)
    if initial.WhichOneof("state_data") == "zero_data":
        if wire == "BYTES":
            zeros = np.empty(lead + dims, dtype=np.object_)
            zeros.fill(b"")
            return zeros
        return np.zeros(lead + dims, dtype=WIRE_TO_NUMPY[wire])
    path = model_dir / INITIAL_STATE_FOLDER / initial.data_file
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ServeError.unavailable(
            f"sequence_batching.state '{state.input_name}': initial_state data_file {path}: "
            f"{exc.strerror or exc}"
        ) from None
    count = math.prod(dims)
    if wire == "BYTES":
        try:
            values = deserialize_bytes_tensor(data, count, f"initial_state data_file {path}")
        except ProtocolError as exc:
            raise ServeError.unavailable(str(exc)) from None
        return values.reshape(lead + dims)
    dtype = WIRE_DTYPES[wire]
    needed = count * dtype.itemsize
    if len(data) < needed:
        raise ServeError.unavailable(
            f"sequence_batching.state '{state.input_name}': initial_state expects {needed} "
            f"bytes, but the data provided from {path} only has {len(data)} bytes"
        )
    array = np.frombuffer(data[:needed], dtype=dtype).astype(WIRE_TO_NUMPY[wire])
    return array.reshape(lead + dims)


class SequenceInputs:
    """Builds the control and state tensors of one model's sequence requests."""

    def __init__(self, config: mc.ModelConfig, model_dir: Path) -> None:
        batching = config.sequence_batching
        self.batched = config.max_batch_size > 0
        shape = (1, 1) if self.batched else (1,)
        self._shape = shape
        self._start: _Flag | None = None
        self._end: _Flag | None = None
        self._ready: _Flag | None = None
        self._corrid: tuple[str, str] | None = None  # (input name, wire datatype)
        for control_input in batching.control_input:
            for control in control_input.control:
                if control.kind == Control.CONTROL_SEQUENCE_CORRID:
                    self._corrid = (control_input.name, _wire(control.data_type))
                    continue
                flag = _flag(control_input.name, control, shape)
                if control.kind == Control.CONTROL_SEQUENCE_START:
                    self._start = flag
                elif control.kind == Control.CONTROL_SEQUENCE_END:
                    self._end = flag
                else:
                    self._ready = flag
        self.states = tuple(
            _StateSpec(s.input_name, s.output_name, _initial_state(s, self.batched, model_dir))
            for s in batching.state
        )
        self.state_outputs = frozenset(s.output_name for s in self.states)

    def check_id(self, sequence_id: SequenceId, model: str) -> None:
        """A string id cannot feed a numeric CORRID input (ServeError INVALID_ARGUMENT)."""
        if self._corrid is not None and isinstance(sequence_id, str):
            name, wire = self._corrid
            if wire != "BYTES":
                raise ServeError.invalid(
                    f"sequence id '{sequence_id}' is a string but model '{model}' takes the "
                    f"correlation ID in its {wire} control input '{name}'"
                )

    def controls(
        self, start: bool, end: bool, ready: bool, corrid: SequenceId
    ) -> dict[str, np.ndarray]:
        """The control tensors of one request (a not-ready row has START, END and CORRID 0)."""
        tensors: dict[str, np.ndarray] = {}
        if not ready:
            start = end = False
        for flag, value in ((self._start, start), (self._end, end), (self._ready, ready)):
            if flag is not None:
                tensors[flag.name] = flag.values[value]
        if self._corrid is not None:
            name, wire = self._corrid
            if wire == "BYTES":
                text = corrid if isinstance(corrid, str) else (str(corrid) if ready else "")
                texts = np.empty(self._shape, dtype=np.object_)
                texts.fill(text.encode())
                tensors[name] = texts
            else:
                number = corrid if isinstance(corrid, int) and ready else 0
                tensors[name] = np.full(self._shape, number, dtype=WIRE_TO_NUMPY[wire])
        return tensors

    def initial_states(self) -> dict[str, np.ndarray]:
        return {state.input_name: state.initial for state in self.states}

    def next_states(self, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The new state tensors from a request's outputs (keyed by their input names)."""
        return {
            state.input_name: outputs[state.output_name]
            for state in self.states
            if state.output_name in outputs
        }
