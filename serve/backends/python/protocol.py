"""Messages between the server and a stub process, and where tensors sit in shared memory.

Messages are small pickled tuples over a socket; `encode` flattens them to plain tuples first
(pickling a NamedTuple costs ten times as much as pickling the plain tuple). Fixed-size tensor
bytes never travel in them: they are copied into a shared-memory arena and a message carries
only name, dtype, shape and offset. BYTES tensors (object arrays) have no fixed layout and
travel pickled, inline.

A conversation: Init -> Ready | Failed; then per batch Execute -> [Grow -> ArenaUpdate ->]
Results | BatchFailed; finally Finalize -> Finalized. A decoupled model's requests get any
number of Streamed, before and after Results (execute returned) or BatchFailed, until each has
had its final flag; each request of a batch has a slot number, unique in the stub's life, that
its Streamed messages carry, so batches may overlap.

The server may Probe the model's is_ready() at any time; the stub answers with ProbeResult
from a thread of its own, so a running batch does not hold the answer back.

At any time the model may Call the server (BLS inference, model load / unload / readiness,
custom metrics); the server answers with CallReply messages carrying the call's id (a BLS call
to a decoupled model gets several, the last one final). A call with id 0 expects no answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

ALIGN = 64  # tensor start offsets in an arena are multiples of this (cache line, SIMD loads)


class ArenaRef(NamedTuple):
    """A shared-memory segment by name and size."""

    name: str
    size: int


class TensorMeta(NamedTuple):
    """A tensor in a message: where it sits in the arena, or its array inline in `data` (BYTES
    tensors, and tensors of BLS calls and streamed responses)."""

    name: str
    dtype: str  # numpy dtype.str, native byte order ("<f4"); "|O" for BYTES
    shape: tuple[int, ...]
    offset: int  # byte offset in the arena; -1 when `data` carries the tensor
    data: np.ndarray | None = None


class RequestMsg(NamedTuple):
    """One request of a batch, as the model's `pb_utils.InferenceRequest` is built from it."""

    request_id: str
    correlation_id: int | str
    flags: int
    parameters: str  # JSON object
    requested_outputs: list[str]
    inputs: list[TensorMeta]
    timeout: int = 0  # microseconds; 0: none


class ResponseMsg(NamedTuple):
    """One response of the model: its outputs, or the error it carries."""

    outputs: list[TensorMeta]
    error: str | None = None
    error_code: int = 0  # a pb_utils.TritonError code
    parameters: str = ""  # the response's parameters, a JSON object ("": none)


# server -> stub
class Init(NamedTuple):
    """Load the model file and call its `initialize`; answered with Ready or Failed."""

    model_file: str
    args: dict[str, str]  # initialize(args), as Triton gives it
    input_arena: ArenaRef  # attached at once, so the first batch pays no setup
    output_arena: ArenaRef


class Execute(NamedTuple):
    """Run one batch with its inputs in `input_arena`, outputs to be written to `output_arena`;
    answered with Results or BatchFailed (after Grow -> ArenaUpdate when the outputs do not fit)."""

    input_arena: ArenaRef
    output_arena: ArenaRef
    requests: list[RequestMsg]
    first_slot: int = 0  # request i of the batch has slot first_slot + i


class ArenaUpdate(NamedTuple):
    """The bigger output arena the stub asked for with Grow."""

    output_arena: ArenaRef


class Finalize(NamedTuple):
    """Call the model's `finalize` and end; answered with Finalized."""

    pass


class Probe(NamedTuple):
    """Ask the model's is_ready(); answered with ProbeResult at any time, batch or not."""

    probe_id: int


class CallReply(NamedTuple):
    """The server's answer to Call `call_id`: a BLS response (tensors inline), or the value or
    error of another call."""

    call_id: int
    response: ResponseMsg | None = None
    final: bool = True
    error: str | None = None
    value: Any = None


# stub -> server
class Ready(NamedTuple):
    """The model loaded and initialized in stub process `pid`."""

    pid: int
    probes: bool = False  # the model defines is_ready(): ask it with Probe


class ProbeResult(NamedTuple):
    """The model's is_ready() answer to Probe `probe_id` (an error counts as not ready)."""

    probe_id: int
    ready: bool
    error: str | None = None


class Failed(NamedTuple):
    """The model could not be loaded or initialized; `reason` names the stage and the error."""

    reason: str


class Grow(NamedTuple):
    """The outputs need `nbytes`; the output arena is smaller."""

    nbytes: int


class Results(NamedTuple):
    """The batch's responses, one per request in order (none for a decoupled model, whose responses
    come as Streamed)."""

    responses: list[ResponseMsg]
    inputs_retained: bool = False  # the model kept input arrays: replace the input arena
    # Requests (their index in the batch) the model released for rescheduling.
    rescheduled: tuple[int, ...] = ()


class BatchFailed(NamedTuple):
    """The model's `execute` raised: every request of the batch fails with `reason`."""

    reason: str
    inputs_retained: bool = False


class Finalized(NamedTuple):
    """The stub is about to exit; `error` says how `finalize` failed, None when it did not."""

    error: str | None = None


class Streamed(NamedTuple):
    """A decoupled model's response to the request in `slot` (tensors inline); `response` None
    with the final flag only ends the request."""

    slot: int
    response: ResponseMsg | None
    flags: int


class Call(NamedTuple):
    """The model asks the server for something: op "infer" (args: model name, version, the
    request with its tensors inline, decoupled), "load", "unload", "is_ready" or "metric";
    "is_cancelled" (args: a request's slot) or "cancel" (args: a decoupled BLS call's id)."""

    call_id: int
    op: str
    args: tuple[Any, ...]


def place(sizes: Sequence[int], start: int = 0) -> tuple[list[int], int]:
    """Aligned offsets for buffers of `sizes` bytes laid out in order, and the end offset."""
    offsets = []
    end = start
    for size in sizes:
        end = -(-end // ALIGN) * ALIGN
        offsets.append(end)
        end += size
    return offsets, end


def arena_array(buf: memoryview, meta: TensorMeta) -> np.ndarray:
    """The array `meta` describes, as a view into `buf` (no copy)."""
    return np.ndarray(meta.shape, dtype=np.dtype(meta.dtype), buffer=buf, offset=meta.offset)


_MESSAGES: tuple[type, ...] = (
    Init,
    Execute,
    ArenaUpdate,
    Finalize,
    Ready,
    Failed,
    Grow,
    Results,
    BatchFailed,
    Finalized,
    Streamed,
    Call,
    CallReply,
    Probe,
    ProbeResult,
)
_TAGS = {cls: tag for tag, cls in enumerate(_MESSAGES)}


def _flat_request(r: RequestMsg) -> tuple[Any, ...]:
    return (*r[:5], [tuple(m) for m in r.inputs], *r[6:])


def _request(flat: Sequence[Any]) -> RequestMsg:
    request_id, correlation_id, flags, parameters, requested_outputs, inputs, *rest = flat
    return RequestMsg(
        request_id,
        correlation_id,
        flags,
        parameters,
        requested_outputs,
        [TensorMeta(*m) for m in inputs],
        *rest,
    )


def _flat_response(r: ResponseMsg | None) -> tuple[Any, ...] | None:
    if r is None:
        return None
    return ([tuple(m) for m in r.outputs], r.error, r.error_code, r.parameters)


def _response(flat: Sequence[Any] | None) -> ResponseMsg | None:
    return None if flat is None else _present_response(flat)


def _present_response(flat: Sequence[Any]) -> ResponseMsg:
    return ResponseMsg([TensorMeta(*m) for m in flat[0]], *flat[1:])


def encode(message: Any) -> tuple[Any, ...]:
    """A plain-tuple form of a message for the wire."""
    tag = _TAGS[type(message)]
    if isinstance(message, Execute):
        requests = [_flat_request(r) for r in message.requests]
        return (
            tag,
            tuple(message.input_arena),
            tuple(message.output_arena),
            requests,
            message.first_slot,
        )
    if isinstance(message, Results):
        responses = [_flat_response(r) for r in message.responses]
        return (tag, responses, message.inputs_retained, message.rescheduled)
    if isinstance(message, ArenaUpdate):
        return (tag, tuple(message.output_arena))
    if isinstance(message, Streamed):
        return (tag, message.slot, _flat_response(message.response), message.flags)
    if isinstance(message, CallReply):
        return (tag, message.call_id, _flat_response(message.response), *message[2:])
    if isinstance(message, Call) and message.op == "infer":
        name, version, request, decoupled = message.args
        return (
            tag,
            message.call_id,
            message.op,
            (name, version, _flat_request(request), decoupled),
        )
    return (tag, *message)


def decode(data: tuple[Any, ...]) -> Any:
    """The message `encode` flattened into `data`."""
    cls = _MESSAGES[data[0]]
    if cls is Execute:
        _, input_arena, output_arena, requests, first_slot = data
        return Execute(
            ArenaRef(*input_arena),
            ArenaRef(*output_arena),
            [_request(r) for r in requests],
            first_slot,
        )
    if cls is Results:
        return Results([_present_response(r) for r in data[1]], data[2], tuple(data[3]))
    if cls is ArenaUpdate:
        return ArenaUpdate(ArenaRef(*data[1]))
    if cls is Streamed:
        return Streamed(data[1], _response(data[2]), data[3])
    if cls is CallReply:
        return CallReply(data[1], _response(data[2]), *data[3:])
    if cls is Call and data[2] == "infer":
        name, version, request, decoupled = data[3]
        return Call(data[1], "infer", (name, version, _request(request), decoupled))
    return cls(*data[1:])
