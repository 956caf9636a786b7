"""The core's side of `autotune serve --workers N`: the front-end processes, started, watched
(one that dies is started again) and stopped, and what each asks of the DataPlane.

The core keeps the models, schedulers and batchers, so one batch can hold requests that came
through different front ends. It holds the HTTP and gRPC ports (SO_REUSEPORT, never listening
itself) that the front ends listen on, and the Unix socket they connect to: on it a front end
submits decoded requests (inputs in its arena, viewed here in place) and gets answers back
(outputs in the core's arena), and makes every other DataPlane call.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import shutil
import socket
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from common.tied_child import tied_env
from serve.dataplane import DataPlane
from serve.errors import ServeError
from serve.inference import Cancellation, InferResponse
from serve.server_options import ServerOptions
from serve.sockets import reserve_shared_port
from serve.trace.request_trace import RequestTrace
from serve.workers.arena import ArenaReader, TensorArena
from serve.workers.frames import FrameProtocol
from serve.workers.messages import (
    Answer,
    Call,
    Cancel,
    Freed,
    Hello,
    Listen,
    Listening,
    LogUpdate,
    Reply,
    Setup,
    Stop,
    Submit,
    TraceStamps,
    answer_message,
    request_from,
)

log = logging.getLogger("serve.workers")

# The DataPlane methods a front end may call: what the transports call besides inference.
REMOTE_METHODS = frozenset(
    {
        "live",
        "ready",
        "server_metadata",
        "model_ready",
        "model_metadata",
        "model_config",
        "model_config_message",
        "shm_status",
        "shm_register",
        "shm_unregister",
        "cuda_shm_status",
        "cuda_shm_register",
        "cuda_shm_unregister",
        "trace_setting",
        "log_settings",
        "statistics",
        "repository_index",
        "load_model",
        "unload_model",
    }
)
START_TIMEOUT_S = 60.0  # a front end's start (imports, connection, listening)
# A front end that dies is started again, unless its replacements keep dying this fast.
RESTART_AFTER_S = 1.0


class FrontEndError(Exception):
    """A front-end process could not be started or did not start to listen."""


class _Link(FrameProtocol):
    """One front end's connection ("calls" or "control"): its messages, answered here."""

    def __init__(self, core: FrontEnds) -> None:
        super().__init__(self._handle)
        self._core = core
        self._dataplane = core.dataplane
        self.index = -1
        self._reader = ArenaReader()  # the front end's arena: the requests' inputs
        self._arena: TensorArena | None = None  # the core's: the answers' outputs
        self._open: dict[int, Cancellation] = {}  # calls not answered in full
        self._replying: set[asyncio.Future[None]] = set()  # awaited calls (load, unload)
        self._traces: dict[int, RequestTrace] = {}  # held until the front end's stamps come

    def _handle(self, message: Any) -> None:
        if isinstance(message, Submit):
            self._submit(message)
        elif isinstance(message, Freed):
            if self._arena is not None:
                for block in message.blocks:
                    self._arena.free(block)
        elif isinstance(message, TraceStamps):
            trace = self._traces.pop(message.call, None)
            if trace is not None:
                for name, ns in message.stamps:
                    trace.stamp(name, ns)
                trace.release()
        elif isinstance(message, Cancel):
            cancellation = self._open.get(message.call)
            if cancellation is not None:
                cancellation.cancel()
        elif isinstance(message, Call):
            self._call(message)
        elif isinstance(message, Hello):
            self.index = message.front_end
            if message.connection == "calls":
                self._arena = TensorArena()
                self.send(Setup(self._core.options))
                self._core.joined(self, message)
        elif isinstance(message, Listening):
            self._core.listening(self.index)

    def _submit(self, message: Submit) -> None:
        call = message.call
        request = request_from(message, self._reader)
        request.cancellation = self._open[call] = Cancellation()
        try:
            if message.stream:
                self._dataplane.submit_stream(
                    request,
                    lambda result, final: self._answer(
                        call, result, final, request.on_response is not None, request.trace
                    ),
                )
            else:
                self._dataplane.submit(
                    request,
                    lambda result: self._answer(call, result, True, trace=request.trace),
                    endpoint=message.endpoint,
                )
        except ServeError as exc:
            self._answer(call, exc, True)

    def _answer(
        self,
        call: int,
        result: InferResponse | ServeError | None,
        final: bool,
        decoupled: bool = False,
        trace: RequestTrace | None = None,
    ) -> None:
        if final:
            self._open.pop(call, None)
        if self.closed.is_set() or self._arena is None:
            return
        # A traced request's trace stays open (as while a transport's completion callback
        # runs in one process) until the front end's receive and send times come back.
        traced = final and trace is not None and trace.hold()
        if traced and trace is not None:
            self._traces[call] = trace
        try:
            answer = answer_message(call, result, self._arena, final, decoupled, traced)
        except Exception as exc:  # a bug: the request still gets an answer
            log.exception("passing an answer to front end %d failed", self.index)
            answer = Answer(call, ServeError.internal(f"internal error: {exc!r}"), [], None, final)
        self.send(answer)

    def _call(self, message: Call) -> None:
        try:
            if message.method not in REMOTE_METHODS:
                raise ServeError.internal(f"no such DataPlane call: {message.method!r}")
            value = getattr(self._dataplane, message.method)(*message.args, **message.kwargs)
        except Exception as exc:
            self.send(Reply(message.call, _as_serve_error(exc), True))
            return
        if message.method == "log_settings" and message.args and message.args[0]:
            self._core.logs_changed(message.args[0])
        if inspect.isawaitable(value):
            task = asyncio.ensure_future(self._reply_later(message.call, value))
            self._replying.add(task)
            task.add_done_callback(self._replying.discard)
        else:
            self._reply(message.call, value)

    async def _reply_later(self, call: int, pending: Any) -> None:
        try:
            value = await pending
        except Exception as exc:
            self.send(Reply(call, _as_serve_error(exc), True))
            return
        self._reply(call, value)

    def _reply(self, call: int, value: Any) -> None:
        """Every call is answered: a front end waits for it."""
        if isinstance(value, Message):  # protobuf messages travel serialized
            value = value.SerializeToString()
        try:
            self.send(Reply(call, value, False))
        except Exception as exc:
            self.send(Reply(call, _as_serve_error(exc), True))

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        # Its clients are gone with it: their requests are cancelled.
        for cancellation in list(self._open.values()):
            cancellation.cancel()
        self._open.clear()
        traces, self._traces = self._traces, {}
        for trace in traces.values():
            trace.release()
        if self._arena is not None:
            self._arena.close()
            self._arena = None


def _as_serve_error(exc: Exception) -> ServeError:
    if isinstance(exc, ServeError):
        return exc
    log.exception("a front end's call failed", exc_info=exc)
    return ServeError.internal(f"internal error: {exc!r}")


@dataclass
class _FrontEnd:
    index: int
    process: asyncio.subprocess.Process | None = None
    link: _Link | None = None
    listening: asyncio.Event = field(default_factory=asyncio.Event)
    started_at: float = 0.0


class FrontEnds:
    """`count` front-end processes over `dataplane`."""

    def __init__(self, dataplane: DataPlane, options: ServerOptions, count: int) -> None:
        self.dataplane = dataplane
        self.options = options
        self.count = count
        self._folder = tempfile.mkdtemp(prefix="autotune-front-ends-")
        self.path = os.path.join(self._folder, "core.sock")
        self._server: asyncio.AbstractServer | None = None
        self._front_ends = [_FrontEnd(index) for index in range(count)]
        self._reserved: list[socket.socket] = []
        self._ports: Listen | None = None
        self._stopping = False
        self._watchers: list[asyncio.Task[None]] = []
        self._log_updates: dict[str, Any] = {}

    async def open(self) -> None:
        """Listen on the Unix socket and start the processes (they import their modules
        while the core loads the models)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_unix_server(lambda: _Link(self), self.path)
        for front_end in self._front_ends:
            await self._spawn(front_end)

    async def _spawn(self, front_end: _FrontEnd) -> None:
        front_end.listening = asyncio.Event()
        front_end.link = None
        front_end.started_at = asyncio.get_running_loop().time()
        front_end.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "serve.workers.front_end",
            self.path,
            str(front_end.index),
            stdin=asyncio.subprocess.DEVNULL,
            env=tied_env(),
        )
        self._watchers.append(asyncio.ensure_future(self._watch(front_end, front_end.process)))

    async def _watch(self, front_end: _FrontEnd, process: asyncio.subprocess.Process) -> None:
        code = await process.wait()
        if self._stopping or front_end.process is not process:
            return
        lived = asyncio.get_running_loop().time() - front_end.started_at
        if self._ports is None or lived < RESTART_AFTER_S:
            log.error(
                "front-end process %d exited (%s) and is not started again", front_end.index, code
            )
            front_end.listening.set()  # a start waiting for it fails at once
            return
        log.error("front-end process %d exited (%s); starting it again", front_end.index, code)
        await self._spawn(front_end)

    def joined(self, link: _Link, hello: Hello) -> None:
        front_end = self._front_ends[hello.front_end]
        front_end.link = link
        if self._log_updates:  # a replacement logs as the others do now
            link.send(LogUpdate(dict(self._log_updates)))
        if self._ports is not None:  # late, or a replacement: it listens where the others do
            link.send(self._ports)

    def logs_changed(self, update: dict[str, Any]) -> None:
        """Logging settings changed through one front end: every front end applies them."""
        self._log_updates.update(update)
        for front_end in self._front_ends:
            if front_end.link is not None:
                front_end.link.send(LogUpdate(update))

    def listening(self, index: int) -> None:
        self._front_ends[index].listening.set()

    async def listen(self) -> tuple[tuple[str, int] | None, tuple[str, int] | None]:
        """Hold the HTTP and gRPC ports, have every front end listen on them, and return the
        bound (host, port) of each (None: that endpoint is off)."""
        options = self.options
        http = grpc = None
        if options.http.enabled:
            http = self._reserve(options.http.address, options.http.port)
        if options.grpc.enabled:
            grpc = self._reserve(options.grpc.address, options.grpc.port)
        self._ports = Listen(http[1] if http else None, grpc[1] if grpc else None)
        for front_end in self._front_ends:  # those that connect later are told on `joined`
            if front_end.link is not None:
                front_end.link.send(self._ports)
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        for front_end in self._front_ends:
            await self._until(deadline, front_end, lambda f: f.listening.is_set(), "listen")
            if front_end.process is None or front_end.process.returncode is not None:
                raise FrontEndError(f"front-end process {front_end.index} exited before listening")
        return http, grpc

    def _reserve(self, host: str, port: int) -> tuple[str, int]:
        sock = reserve_shared_port(host, port)
        self._reserved.append(sock)
        bound = sock.getsockname()
        return bound[0], bound[1]

    async def _until(self, deadline: float, front_end: _FrontEnd, done: Any, what: str) -> None:
        loop = asyncio.get_running_loop()
        while not done(front_end):
            process = front_end.process
            if process is not None and process.returncode is not None:
                raise FrontEndError(
                    f"front-end process {front_end.index} exited ({process.returncode}) before it"
                    f" could {what}"
                )
            if loop.time() > deadline:
                raise FrontEndError(
                    f"front-end process {front_end.index} did not {what} within"
                    f" {START_TIMEOUT_S:g} s"
                )
            await asyncio.sleep(0.01)

    async def stop(self, grace_s: float) -> None:
        """Have every front end stop accepting and answer what is in flight (the core still
        answers them), then wait for the processes (killed past the grace)."""
        self._stopping = True
        processes = []
        for front_end in self._front_ends:
            process = front_end.process
            if process is None or process.returncode is not None:
                continue
            processes.append(process)
            if front_end.link is not None and not front_end.link.closed.is_set():
                front_end.link.send(Stop(grace_s))
            else:  # not connected: nothing in flight
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        try:
            await asyncio.wait_for(
                asyncio.gather(*(p.wait() for p in processes)), grace_s + START_TIMEOUT_S / 6
            )
        except TimeoutError:
            for process in processes:
                if process.returncode is None:
                    log.warning("front-end process %d did not stop; killed", process.pid)
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
            await asyncio.gather(*(p.wait() for p in processes))
        for watcher in self._watchers:
            watcher.cancel()
        if self._server is not None:
            self._server.close()
        for sock in self._reserved:
            sock.close()
        shutil.rmtree(self._folder, ignore_errors=True)
