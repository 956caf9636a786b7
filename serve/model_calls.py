"""`DataPlaneCalls`: the server's answer to models calling it (BLS inference, model control).

A model's calls come from backend threads; each is carried onto the event loop's thread, where
the DataPlane lives, and handled there as a client's request would be: a BLS request goes
through the callee's scheduler, so it is batched with everything else the callee serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from serve.backends.base import CallResponse, Done, ModelCalls
from serve.errors import ServeError
from serve.inference import Cancellation, InferRequest

if TYPE_CHECKING:
    from serve.dataplane import DataPlane


class DataPlaneCalls(ModelCalls):
    """The `ModelCalls` a server gives its models: each call, made on a backend thread, runs on the
    DataPlane's loop, and its answer goes to the callback given, on that thread. ServeError
    (unavailable) when the server is not running."""

    def __init__(self, dataplane: DataPlane) -> None:
        self._dataplane = dataplane
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running: set[asyncio.Task[None]] = set()  # load / unload under way

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop the DataPlane runs on (set when models load)."""
        self._loop = loop

    def infer(self, request: InferRequest, on_response: CallResponse, decoupled: bool) -> None:
        self._on_loop(self._submit, request, on_response, decoupled)

    def load(self, name: str, parameters: dict[str, Any], on_done: Done) -> None:
        self._run(self._dataplane.load_model(name, parameters), on_done)

    def unload(self, name: str, on_done: Done) -> None:
        self._run(self._dataplane.unload_model(name), on_done)

    def is_ready(self, name: str, version: str, on_done: Callable[[bool], None]) -> None:
        self._on_loop(lambda: on_done(self._dataplane.model_ready(name, version)))

    def cancel(self, cancellation: Cancellation) -> None:
        self._on_loop(cancellation.cancel)

    def _submit(self, request: InferRequest, on_response: CallResponse, decoupled: bool) -> None:
        try:
            if not decoupled:
                model = self._dataplane.repository.get(request.model_name, request.model_version)
                if model.decoupled:
                    raise ServeError.invalid(
                        f"model '{model.name}' is decoupled: call it with"
                        " exec(decoupled=True) or async_exec(decoupled=True)"
                    )
            self._dataplane.submit_stream(request, on_response)
        except ServeError as exc:
            on_response(exc, True)

    def _run(self, work: Coroutine[Any, Any, None], on_done: Done) -> None:
        async def run() -> None:
            try:
                await work
            except ServeError as exc:
                on_done(exc)
                return
            on_done(None)

        def start() -> None:
            task = asyncio.ensure_future(run())
            self._running.add(task)
            task.add_done_callback(self._running.discard)

        try:
            self._on_loop(start)
        except ServeError:
            work.close()
            raise

    def _on_loop(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ServeError.unavailable("the server is not running")
        loop.call_soon_threadsafe(callback, *args)
