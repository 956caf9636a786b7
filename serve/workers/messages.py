"""What the core and its front-end processes say to each other over their Unix socket.

Every message is a NamedTuple, pickled behind a 4-byte length (`serve.workers.frames`).
Tensors never travel in a message: a request's inputs lie in the front end's arena, an answer's
outputs in the core's (`serve.workers.arena`), and the message says where.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse, OutputTensor
from serve.server_options import ServerOptions
from serve.workers.arena import (
    SHAPE_ONLY,
    ArenaReader,
    Block,
    TensorArena,
    TensorPlace,
    read_tensors,
    write_tensors,
)

_NO_DATA = np.empty(0, np.uint8)

# -- a front end's first words, and the core's answers that steer its life ----------------------


class Hello(NamedTuple):
    """The first message on a connection: which front end, and which of its two connections
    ("calls": requests and answers; "control": one blocking call at a time)."""

    front_end: int
    pid: int
    connection: str


class Setup(NamedTuple):
    """The core's answer to a "calls" Hello: the server's options."""

    options: ServerOptions


class Listen(NamedTuple):
    """Start the HTTP / gRPC endpoints on these ports (shared with the other front ends)."""

    http_port: int | None
    grpc_port: int | None


class Listening(NamedTuple):
    """The front end's endpoints accept connections."""


class Stop(NamedTuple):
    """Stop accepting, answer what is in flight within `grace_s`, exit."""

    grace_s: float


# -- inference --------------------------------------------------------------------------------


class Submit(NamedTuple):
    """A decoded request (its inputs in the front end's block) for `DataPlane.submit`, or for
    `submit_stream` when `stream`."""

    call: int
    request: InferRequest  # without inputs, callbacks or cancellation
    places: list[TensorPlace]
    block: Block | None
    stream: bool
    endpoint: str


class Cancel(NamedTuple):
    """The client of call `call` went away."""

    call: int


class Answer(NamedTuple):
    """A result of call `call`: a response (its outputs in the core's block), an error, or
    None (a stream's bare final flag)."""

    call: int
    result: InferResponse | ServeError | None
    places: list[TensorPlace]
    block: Block | None
    final: bool
    decoupled: bool = False  # the model is decoupled (its responses say which is final)
    traced: bool = False  # the core traces the request: the front end sends its TraceStamps


class TraceStamps(NamedTuple):
    """The front end's timestamps of traced call `call` (receiving, sending); the core adds
    them to the request's trace and lets it be written."""

    call: int
    stamps: list[tuple[str, int]]


class LogUpdate(NamedTuple):
    """Logging settings changed through the API: the front ends log by them too."""

    update: dict[str, Any]


class Freed(NamedTuple):
    """Blocks of the core's arena the front end has copied out of."""

    blocks: list[Block]


# -- every other DataPlane call ---------------------------------------------------------------


class Call(NamedTuple):
    """`DataPlane.<method>(*args, **kwargs)` in the core."""

    call: int
    method: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class Reply(NamedTuple):
    """What call `call` returned, or the ServeError it raised (`failed`)."""

    call: int
    value: Any
    failed: bool


def request_message(
    call: int, request: InferRequest, arena: TensorArena, *, stream: bool, endpoint: str
) -> Submit:
    """A Submit for `request`, its inputs written into `arena` (callbacks stay here)."""
    places, block = write_tensors(request.inputs, arena)
    bare = replace(
        request,
        inputs={},
        trace=None,
        on_response=None,
        on_stats=None,
        cancellation=None,
    )
    return Submit(call, bare, places, block, stream, endpoint)


def request_from(message: Submit, reader: ArenaReader) -> InferRequest:
    """The request a Submit carries, its inputs viewing the front end's block."""
    request = message.request
    request.inputs = read_tensors(message.places, message.block, reader, copy=False)
    return request


def answer_message(
    call: int,
    result: InferResponse | ServeError | None,
    arena: TensorArena,
    final: bool,
    decoupled: bool = False,
    traced: bool = False,
) -> Answer:
    """An Answer for `result`, its outputs written into `arena` (a region's as a shape)."""
    if not isinstance(result, InferResponse):
        return Answer(call, result, [], None, final, decoupled, traced)
    carried = {o.name: o.data for o in result.outputs if o.region is None}
    places, block = write_tensors(carried, arena)
    # An output already written into a client's shared-memory region travels as its shape.
    places += [
        TensorPlace(o.name, o.data.dtype.str, o.shape, SHAPE_ONLY)
        for o in result.outputs
        if o.region is not None
    ]
    bare = replace(result, outputs=[replace(o, data=_NO_DATA) for o in result.outputs])
    return Answer(call, bare, places, block, final, decoupled, traced)


def answer_from(message: Answer, reader: ArenaReader) -> InferResponse | ServeError | None:
    """The result an Answer carries, its outputs copied out of the core's block (which the
    caller then frees)."""
    result = message.result
    if not isinstance(result, InferResponse):
        return result
    arrays = read_tensors(message.places, message.block, reader, copy=True)
    result.outputs = [_with_data(output, arrays) for output in result.outputs]
    return result


def _with_data(output: OutputTensor, arrays: dict[str, Any]) -> OutputTensor:
    data = arrays.get(output.name)
    return output if data is None else replace(output, data=data)
