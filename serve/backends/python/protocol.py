"""Messages between the server and a stub process, and where tensors sit in shared memory.

Messages are small pickled tuples over a socket; `encode` flattens them to plain tuples first
(pickling a NamedTuple costs ten times as much as pickling the plain tuple). Fixed-size tensor
bytes never travel in them: they are copied into a shared-memory arena and a message carries
only name, dtype, shape and offset. BYTES tensors (object arrays) have no fixed layout and
travel pickled, inline.

A conversation: Init -> Ready | Failed; then per batch Execute -> [Grow -> ArenaUpdate ->]
Results | BatchFailed; finally Finalize -> Finalized. A decoupled model's batch: Execute ->
any number of Streamed, before and after Results (execute returned) or BatchFailed, until every
request has had its final flag.
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
    name: str
    dtype: str  # numpy dtype.str, native byte order ("<f4"); "|O" for BYTES
    shape: tuple[int, ...]
    offset: int  # byte offset in the arena; -1 when `data` carries the tensor
    data: np.ndarray | None = None


class RequestMsg(NamedTuple):
    request_id: str
    correlation_id: int | str
    flags: int
    parameters: str  # JSON object
    requested_outputs: list[str]
    inputs: list[TensorMeta]


class ResponseMsg(NamedTuple):
    outputs: list[TensorMeta]
    error: str | None = None
    error_code: int = 0  # a pb_utils.TritonError code


# server -> stub
class Init(NamedTuple):
    model_file: str
    args: dict[str, str]  # initialize(args), as Triton gives it
    input_arena: ArenaRef  # attached at once, so the first batch pays no setup
    output_arena: ArenaRef


class Execute(NamedTuple):
    input_arena: ArenaRef
    output_arena: ArenaRef
    requests: list[RequestMsg]


class ArenaUpdate(NamedTuple):
    """The bigger output arena the stub asked for with Grow."""

    output_arena: ArenaRef


class Finalize(NamedTuple):
    pass


# stub -> server
class Ready(NamedTuple):
    pid: int


class Failed(NamedTuple):
    reason: str


class Grow(NamedTuple):
    """The outputs need `nbytes`; the output arena is smaller."""

    nbytes: int


class Results(NamedTuple):
    responses: list[ResponseMsg]
    inputs_retained: bool = False  # the model kept input arrays: replace the input arena


class BatchFailed(NamedTuple):
    reason: str
    inputs_retained: bool = False


class Finalized(NamedTuple):
    error: str | None = None


class Streamed(NamedTuple):
    """A decoupled model's response to request `position` of the batch in flight (tensors inline);
    `response` None with the final flag only ends the request."""

    position: int
    response: ResponseMsg | None
    flags: int


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
)
_TAGS = {cls: tag for tag, cls in enumerate(_MESSAGES)}


def encode(message: Any) -> tuple[Any, ...]:
    """A plain-tuple form of a message for the wire."""
    tag = _TAGS[type(message)]
    if isinstance(message, Execute):
        requests = [(*r[:5], [tuple(m) for m in r.inputs]) for r in message.requests]
        return (tag, tuple(message.input_arena), tuple(message.output_arena), requests)
    if isinstance(message, Results):
        responses = [
            ([tuple(m) for m in r.outputs], r.error, r.error_code) for r in message.responses
        ]
        return (tag, responses, message.inputs_retained)
    if isinstance(message, ArenaUpdate):
        return (tag, tuple(message.output_arena))
    if isinstance(message, Streamed):
        r = message.response
        flat = None if r is None else ([tuple(m) for m in r.outputs], r.error, r.error_code)
        return (tag, message.position, flat, message.flags)
    return (tag, *message)


def decode(data: tuple[Any, ...]) -> Any:
    """The message `encode` flattened into `data`."""
    cls = _MESSAGES[data[0]]
    if cls is Execute:
        _, input_arena, output_arena, requests = data
        return Execute(
            ArenaRef(*input_arena),
            ArenaRef(*output_arena),
            [
                RequestMsg(r[0], r[1], r[2], r[3], r[4], [TensorMeta(*m) for m in r[5]])
                for r in requests
            ],
        )
    if cls is Results:
        responses = [ResponseMsg([TensorMeta(*m) for m in r[0]], r[1], r[2]) for r in data[1]]
        return Results(responses, data[2])
    if cls is ArenaUpdate:
        return ArenaUpdate(ArenaRef(*data[1]))
    if cls is Streamed:
        flat = data[2]
        response = (
            None if flat is None else ResponseMsg([TensorMeta(*m) for m in flat[0]], *flat[1:])
        )
        return Streamed(data[1], response, data[3])
    return cls(*data[1:])
