"""A front-end process's DataPlane: the transports call it as they call the core's own, and it
passes each call to the core over the Unix socket.

Inference goes over the "calls" connection, answered from its messages (inputs written once
into this process's arena; outputs copied out of the core's, whose blocks are then freed);
every other call is a blocking exchange on the "control" connection, as the DataPlane's plain
methods answer at once (load and unload, which the transports await, go over "calls").
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError
from serve.inference import InferRequest
from serve.model.served import ResponseCallback, StreamCallback
from serve.workers.arena import ArenaReader, Block, TensorArena
from serve.workers.frames import BlockingConnection, FrameProtocol
from serve.workers.messages import (
    Answer,
    Call,
    Cancel,
    Freed,
    Hello,
    Reply,
    Setup,
    TraceStamps,
    answer_from,
    request_message,
)

if TYPE_CHECKING:
    from serve.trace.request_trace import RequestTrace

_CORE_GONE = "the server is shutting down (its core has stopped)"


class _CoreTracing:
    """The core decides which requests are traced; a transport here always takes the receive
    times (two clock reads) for the core's trace, should it trace the request."""

    active = True


class _RemoteTrace:
    """This process's part of a request the core traces: the transport's receive and send
    times, sent to the core (`TraceStamps`) when the last holder releases it. Held once while
    the completion callback runs, as the core holds its trace in one process."""

    def __init__(self, send: Callable[[list[tuple[str, int]]], None]) -> None:
        self._stamps: list[tuple[str, int]] = []
        self._holds = 1
        self._send: Callable[[list[tuple[str, int]]], None] | None = send

    def stamp(self, name: str, ns: int | None = None) -> None:
        self._stamps.append((name, time.monotonic_ns() if ns is None else ns))

    def hold(self) -> bool:
        if self._send is None:
            return False
        self._holds += 1
        return True

    def release(self) -> None:
        self._holds -= 1
        if self._holds <= 0 and self._send is not None:
            send, self._send = self._send, None
            send(self._stamps)


@dataclass(slots=True)
class _Pending:
    request: InferRequest
    on_result: Callable[[Any, bool], None]
    block: Block | None  # the request's inputs, freed with its final answer


class CoreLink(FrameProtocol):
    """The "calls" connection: requests out, answers in; the core's other messages to
    `on_other`."""

    def __init__(self, index: int, on_other: Callable[[Any], None]) -> None:
        super().__init__(self._handle)
        self.index = index
        self._on_other = on_other
        self._arena = TensorArena()
        self._reader = ArenaReader()
        self._pending: dict[int, _Pending] = {}
        self._replies: dict[int, asyncio.Future[Any]] = {}
        self._next_call = 0
        self._freed: list[Block] = []
        self.setup: asyncio.Future[Setup] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.send(Hello(self.index, os.getpid(), "calls"))

    def _handle(self, message: Any) -> None:
        if isinstance(message, Answer):
            self._answered(message)
        elif isinstance(message, Reply):
            future = self._replies.pop(message.call, None)
            if future is not None and not future.done():
                future.set_result(message)
        elif isinstance(message, Setup):
            self.setup.set_result(message)
        else:
            self._on_other(message)

    def _call_id(self) -> int:
        self._next_call += 1
        return self._next_call

    def submit(
        self,
        request: InferRequest,
        on_result: Callable[[Any, bool], None],
        *,
        stream: bool,
        endpoint: str,
    ) -> None:
        if self.closed.is_set():
            raise ServeError.unavailable(_CORE_GONE)
        call = self._call_id()
        message = request_message(call, request, self._arena, stream=stream, endpoint=endpoint)
        self._pending[call] = _Pending(request, on_result, message.block)
        cancellation = request.cancellation
        if cancellation is not None:
            cancellation.listen(lambda: self._cancel(call))
        self.send(message)

    def _cancel(self, call: int) -> None:
        if call in self._pending:
            self.send(Cancel(call))

    def _answered(self, message: Answer) -> None:
        pending = self._pending.get(message.call)
        try:
            result = answer_from(message, self._reader)
        finally:
            if message.block is not None:
                self._free_later(message.block)
        if pending is None:
            return
        if message.final:
            del self._pending[message.call]
            if pending.block is not None:
                self._arena.free(pending.block)
        request = pending.request
        if message.decoupled and request.on_response is None:
            # as the core marks a decoupled model's request (the transport reads it)
            request.on_response = pending.on_result
        trace = None
        if message.traced:
            call = message.call
            trace = _RemoteTrace(lambda stamps: self.send(TraceStamps(call, stamps)))
            # the transports call stamp, hold and release only
            request.trace = cast("RequestTrace", trace)
        try:
            pending.on_result(result, message.final)
        finally:
            if trace is not None:
                trace.release()

    def _free_later(self, block: Block) -> None:
        """Tell the core its block is free: one message for the blocks of one loop turn."""
        if not self._freed:
            asyncio.get_running_loop().call_soon(self._send_freed)
        self._freed.append(block)

    def _send_freed(self) -> None:
        blocks, self._freed = self._freed, []
        self.send(Freed(blocks))

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self.closed.is_set():
            raise ServeError.unavailable(_CORE_GONE)
        call = self._call_id()
        future = self._replies[call] = asyncio.get_running_loop().create_future()
        self.send(Call(call, method, args, kwargs))
        closed = asyncio.ensure_future(self.closed.wait())
        try:
            await asyncio.wait({future, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
        if not future.done():
            self._replies.pop(call, None)
            raise ServeError.unavailable(_CORE_GONE)
        return _value(future.result())

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        pending, self._pending = self._pending, {}
        for entry in pending.values():
            entry.on_result(ServeError.unavailable(_CORE_GONE), True)

    def close_arena(self) -> None:
        self._arena.close()


def _value(reply: Reply) -> Any:
    if reply.failed:
        raise reply.value
    return reply.value


class ControlLink:
    """The "control" connection: one blocking call at a time."""

    def __init__(self, path: str, index: int) -> None:
        self._connection = BlockingConnection(path)
        self._connection.send(Hello(index, os.getpid(), "control"))
        self._next_call = 0

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._next_call += 1
        try:
            reply = self._connection.exchange(Call(self._next_call, method, args, kwargs))
        except (EOFError, OSError):
            raise ServeError.unavailable(_CORE_GONE) from None
        return _value(reply)

    def close(self) -> None:
        self._connection.close()


class RemoteDataPlane:
    """What the transports call, answered by the core's DataPlane."""

    def __init__(self, calls: CoreLink, control: ControlLink) -> None:
        self._calls = calls
        self._control = control
        self.tracer = _CoreTracing()

    # -- inference ----------------------------------------------------------------------------

    def submit(
        self, request: InferRequest, on_done: ResponseCallback, *, endpoint: str = "HTTP end point"
    ) -> None:
        self._calls.submit(
            request, lambda result, final: on_done(result), stream=False, endpoint=endpoint
        )

    def submit_stream(self, request: InferRequest, on_response: StreamCallback) -> None:
        self._calls.submit(request, on_response, stream=True, endpoint="")

    # -- the repository API (awaited) ---------------------------------------------------------

    async def load_model(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        await self._calls.call("load_model", name, parameters)

    async def unload_model(self, name: str, *, unload_dependents: bool = False) -> None:
        await self._calls.call("unload_model", name, unload_dependents=unload_dependents)

    # -- the rest (answered at once) ----------------------------------------------------------

    def live(self) -> bool:
        return bool(self._control.call("live"))

    def ready(self) -> bool:
        return bool(self._control.call("ready"))

    def server_metadata(self) -> dict[str, Any]:
        return dict(self._control.call("server_metadata"))

    def model_ready(self, name: str, version: str = "") -> bool:
        return bool(self._control.call("model_ready", name, version))

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return dict(self._control.call("model_metadata", name, version))

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        return dict(self._control.call("model_config", name, version))

    def model_config_message(self, name: str, version: str = "") -> mc.ModelConfig:
        return mc.ModelConfig.FromString(self._control.call("model_config_message", name, version))

    def statistics(self, name: str = "", version: str = "") -> dict[str, Any]:
        return dict(self._control.call("statistics", name, version))

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        return list(self._control.call("repository_index", ready_only))

    def shm_status(self, name: str = "") -> list[dict[str, Any]]:
        return list(self._control.call("shm_status", name))

    def shm_register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        self._control.call("shm_register", name, key, offset, byte_size)

    def shm_unregister(self, name: str = "") -> None:
        self._control.call("shm_unregister", name)

    def cuda_shm_status(self, name: str = "") -> list[dict[str, Any]]:
        return list(self._control.call("cuda_shm_status", name))

    def cuda_shm_register(self, name: str, raw_handle: Any, device_id: int, byte_size: int) -> None:
        self._control.call("cuda_shm_register", name, raw_handle, device_id, byte_size)

    def cuda_shm_unregister(self, name: str = "") -> None:
        self._control.call("cuda_shm_unregister", name)

    def trace_setting(
        self, model: str, update: dict[str, list[str] | None]
    ) -> dict[str, list[str]]:
        return dict(self._control.call("trace_setting", model, update))

    def log_settings(self, update: dict[str, Any]) -> dict[str, Any]:
        return dict(self._control.call("log_settings", update))
