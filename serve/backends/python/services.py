"""The stub's side of the calls a model makes to the server (pb_utils.StubServices): BLS
inference, model load / unload / readiness and custom metrics, as Call messages answered by
CallReply messages through the stub's inbox."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from protocol.datatypes import wire_datatype
from protocol.errors import ProtocolError
from serve.backends.python import pb_utils
from serve.backends.python.channel import Channel
from serve.backends.python.inbox import Inbox
from serve.backends.python.protocol import Call, CallReply, RequestMsg, ResponseMsg, TensorMeta

BYTES_KINDS = "OSU"
# Metric updates expect no answer (call id 0): a model may update metrics per request, and
# pb_utils checks what it can before sending.
_UNANSWERED_METRIC_OPS = frozenset({"increment", "set", "observe", "drop_metric", "drop_family"})
_ASYNC_CALLS = 64  # BLS calls from `async_exec` that may wait at once


def call_key(call_id: int) -> tuple[str, int]:
    """The inbox key of call `call_id`'s replies."""
    return ("call", call_id)


class StubServices:
    """The services a stub installs (`pb_services.StubServices`): each call is sent as a Call and
    its answer waited for on the calling (model's) thread through the inbox; `infer_async` waits on
    a small thread pool of its own instead."""

    def __init__(self, channel: Channel, inbox: Inbox) -> None:
        self._channel = channel
        self._inbox = inbox
        self._ids = itertools.count(1)
        self._pool: ThreadPoolExecutor | None = None

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        call_id = next(self._ids)
        version = request.model_version()
        args = (
            request.model_name(),
            "" if version is None or int(version) < 0 else str(version),
            _request_message(request),
            bool(decoupled),
        )
        self._channel.send(Call(call_id, "infer", args))
        if decoupled:
            return pb_utils.ResponseIterator(
                self._responses(call_id), functools.partial(self._ask, "cancel", (call_id,))
            )
        reply: CallReply = self._inbox.wait(call_key(call_id))
        return _response(reply)

    async def infer_async(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(_ASYNC_CALLS, thread_name_prefix="bls")
        import asyncio  # only async models call this; the stub starts without asyncio

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.infer, request, decoupled)

    def control(self, op: str, args: tuple[Any, ...]) -> Any:
        return self._ask(op, args)

    def metric(self, op: str, args: tuple[Any, ...]) -> float | None:
        if op in _UNANSWERED_METRIC_OPS:
            self._channel.send(Call(0, "metric", (op, args)))
            return None
        value = self._ask("metric", (op, args))
        return None if value is None else float(value)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _ask(self, op: str, args: tuple[Any, ...]) -> Any:
        call_id = next(self._ids)
        self._channel.send(Call(call_id, op, args))
        reply: CallReply = self._inbox.wait(call_key(call_id))
        if reply.error is not None:
            raise pb_utils.TritonModelException(reply.error)
        return reply.value

    def _responses(self, call_id: int) -> Iterator[pb_utils.InferenceResponse]:
        while True:
            reply: CallReply = self._inbox.wait(call_key(call_id))
            yield _response(reply)
            if reply.final:
                return


def _request_message(request: pb_utils.InferenceRequest) -> RequestMsg:
    return RequestMsg(
        request_id=request.request_id(),
        correlation_id=request.correlation_id(),
        flags=request.flags(),
        parameters=request.parameters(),
        requested_outputs=request.requested_output_names(),
        inputs=[inline_tensor(tensor, "input") for tensor in request.inputs()],
        timeout=request.timeout(),
    )


def inline_tensor(tensor: Any, role: str) -> TensorMeta:
    """`tensor` with its data carried in the message (BYTES as an object array of bytes);
    TritonModelException naming the `role` ("input", "output") for what cannot travel."""
    if not isinstance(tensor, pb_utils.Tensor):
        raise pb_utils.TritonModelException(f"{role} {tensor!r} is not a pb_utils.Tensor")
    array = tensor._host_array()
    if array.dtype.kind in BYTES_KINDS:
        return TensorMeta(tensor.name(), "|O", array.shape, -1, bytes_array(array))
    try:
        wire_datatype(array.dtype)
    except ProtocolError as exc:
        raise pb_utils.TritonModelException(f"{role} '{tensor.name()}': {exc}") from None
    array = np.ascontiguousarray(array)
    return TensorMeta(tensor.name(), array.dtype.str, array.shape, -1, array)


def _response(reply: CallReply) -> pb_utils.InferenceResponse:
    if reply.error is not None:
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(reply.error))
    message: ResponseMsg | None = reply.response
    if message is None:  # a decoupled callee's bare final flag
        return pb_utils.InferenceResponse()
    if message.error is not None:
        return pb_utils.InferenceResponse(
            error=pb_utils.TritonError(message.error, message.error_code)
        )
    tensors = [
        pb_utils.Tensor(meta.name, meta.data) for meta in message.outputs if meta.data is not None
    ]
    return pb_utils.InferenceResponse(output_tensors=tensors, parameters=message.parameters or None)


def bytes_array(array: np.ndarray) -> np.ndarray:
    """An object array of `bytes` (str items encoded as UTF-8), as BYTES tensors travel."""
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for i, item in enumerate(array.reshape(-1)):
        if isinstance(item, str):
            flat[i] = item.encode("utf-8")
        elif isinstance(item, (bytes, bytearray, memoryview)):
            flat[i] = bytes(item)
        else:
            flat[i] = str(item).encode("utf-8")
    return out
