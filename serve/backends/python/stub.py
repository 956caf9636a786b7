"""The stub: one process per model instance, running a Triton python model.

Started by the server as `python -m serve.backends.python.stub <socket fd>`; it serves the
conversation described in `protocol` until the server sends Finalize or goes away.

Input arrays the model sees are views of the server's input arena (no copy). If the model keeps
one past `execute`, the stub says so and the server moves to a fresh arena, so kept arrays
never change under the model.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from protocol.datatypes import wire_datatype
from protocol.errors import ProtocolError
from serve.backends.python import pb_utils
from serve.backends.python.channel import Channel
from serve.backends.python.inbox import Inbox
from serve.backends.python.loader import ModelLoadError, describe, import_model_class
from serve.backends.python.protocol import (
    ArenaRef,
    ArenaUpdate,
    BatchFailed,
    CallReply,
    Execute,
    Failed,
    Finalize,
    Finalized,
    Grow,
    Init,
    Probe,
    ProbeResult,
    Ready,
    RequestMsg,
    ResponseMsg,
    Results,
    Streamed,
    TensorMeta,
    arena_array,
    place,
)
from serve.backends.python.services import (
    BYTES_KINDS,
    StubServices,
    bytes_array,
    call_key,
    inline_tensor,
)
from serve.backends.python.shm import Attachment

if TYPE_CHECKING:
    import asyncio

CONTROL = "control"  # the inbox key of the server's Execute, ArenaUpdate and Finalize


PROBE_TIMEOUT_S = 5.0  # as Triton bounds a model's readiness check


class Stub:
    """Runs one TritonPythonModel and answers the server's messages."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        # The main thread reads while it waits for the next batch; a model thread waiting for
        # its call's answer reads while the main thread runs execute.
        self._inbox = Inbox(lambda _timeout: channel.recv(), self._route)
        self._services = StubServices(channel, self._inbox)
        self._probing = threading.Lock()  # one is_ready() at a time
        self._model: Any = None
        self._model_file = Path()
        self._model_name = ""
        self._instance_name = ""
        self._model_version = -1
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inputs = Attachment()
        self._outputs = Attachment()
        self._decoupled = False

    def serve(self) -> None:
        pb_utils._install_services(self._services)
        try:
            reply = self._initialize(self._inbox.wait(CONTROL))
            self._channel.send(reply)
            if isinstance(reply, Failed):
                return
            while True:
                message = self._inbox.wait(CONTROL)
                if isinstance(message, Execute):
                    self._channel.send(self._execute(message))
                elif isinstance(message, Finalize):
                    self._channel.send(self._finalize())
                    return
        except (EOFError, OSError):
            return  # the server went away
        finally:
            self._services.close()
            pb_utils._install_services(None)

    def _route(self, message: Any) -> Any:
        if isinstance(message, CallReply):
            return call_key(message.call_id)
        if isinstance(message, Probe):
            thread = threading.Thread(target=self._probe, args=(message.probe_id,), daemon=True)
            thread.start()
            return None
        return CONTROL

    def _probe(self, probe_id: int) -> None:
        """Answer a Probe with the model's is_ready() (run on a thread of its own)."""
        with self._probing:
            try:
                ready = self._model.is_ready()
                if inspect.isawaitable(ready):
                    import asyncio  # only for async models (its import costs a stub's start)

                    ready = asyncio.run(_bounded(ready))
                if not isinstance(ready, bool):
                    raise TypeError(f"is_ready() returned {type(ready).__name__}, not a bool")
                answer = ProbeResult(probe_id, ready)
            except Exception as exc:
                answer = ProbeResult(probe_id, False, describe(exc, self._model_file))
        with contextlib.suppress(OSError):
            self._channel.send(answer)

    def _initialize(self, init: Init) -> Ready | Failed:
        self._model_file = Path(init.model_file)
        self._model_name = init.args.get("model_name", "")
        self._instance_name = init.args.get("model_instance_name") or self._model_name
        self._model_version = int(init.args.get("model_version", "-1"))
        config = json.loads(init.args.get("model_config") or "{}")
        self._decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled"))
        stage = "shared memory setup"
        try:
            self._inputs.buf(init.input_arena)
            self._outputs.buf(init.output_arena)
            stage = "load"
            model_class = import_model_class(self._model_file)
            if not callable(getattr(model_class, "execute", None)):
                raise ModelLoadError("TritonPythonModel has no execute method")
            stage = "initialize"
            self._model = model_class()
            initialize = getattr(self._model, "initialize", None)
            if initialize is not None:
                self._run(initialize(init.args))
        except Exception as exc:
            traceback.print_exc()
            return Failed(f"{stage} failed: {describe(exc, self._model_file)}")
        return Ready(os.getpid(), callable(getattr(self._model, "is_ready", None)))

    def _execute(self, message: Execute) -> Results | BatchFailed:
        buf = self._inputs.buf(message.input_arena)
        views: list[weakref.ref[np.ndarray]] = []
        requests = [self._request(r, buf, views) for r in message.requests]
        for index, request in enumerate(requests):
            request._slot = message.first_slot + index  # is_cancelled() asks by it
        if self._decoupled:
            reply = self._run_decoupled(requests, message.first_slot)
        else:
            reply = self._run_batch(requests, message.output_arena)
        del requests
        # The model kept an input array: the server must not write over it next time.
        if any(view() is not None for view in views):
            self._inputs.keep(views)
            return reply._replace(inputs_retained=True)
        return reply

    def _run_batch(
        self, requests: list[pb_utils.InferenceRequest], output_arena: ArenaRef
    ) -> Results | BatchFailed:
        sent: list[pb_utils.InferenceResponse | None] = [None] * len(requests)
        senders = []
        for index, request in enumerate(requests):
            sender = pb_utils.InferenceResponseSender(
                _keeper(sent, index), request._slot, decoupled=False
            )
            request._response_sender = sender
            senders.append(sender)
        try:
            returned = _returned_list(self._run(self._model.execute(requests)), len(requests))
            packed, rescheduled = _rescheduled_responses(requests, returned)
            responses = _with_sent_responses(packed, sent)
        except Exception as exc:
            traceback.print_exc()
            return BatchFailed(self._failure(exc))
        finally:
            for sender in senders:
                sender.close()
        reply = self._pack(responses, output_arena)
        return reply._replace(rescheduled=rescheduled) if rescheduled else reply

    def _failure(self, exc: BaseException) -> str:
        """A failed execute as Triton words it."""
        return (
            f"Failed to process the request(s) for model '{self._instance_name}', message: "
            f"{describe(exc, self._model_file)}"
        )

    def _run_decoupled(
        self, requests: list[pb_utils.InferenceRequest], first_slot: int
    ) -> Results | BatchFailed:
        """Run a decoupled model's execute; its responses go out through the senders."""
        senders = []
        for index, request in enumerate(requests):
            slot = first_slot + index
            sender = pb_utils.InferenceResponseSender(self._emitter(slot), slot)
            request._response_sender = sender
            senders.append(sender)
        try:
            returned = self._run(self._model.execute(requests))
            if returned is not None:
                raise pb_utils.TritonModelException(
                    f"Python model '{self._instance_name}' is using the decoupled mode and the "
                    "execute function must return None."
                )
        except Exception as exc:
            traceback.print_exc()
            # No response may follow the error: the server fails every unfinished request.
            for sender in senders:
                sender.close()
            return BatchFailed(self._failure(exc))
        rescheduled = tuple(i for i, request in enumerate(requests) if request._rescheduled())
        return Results([], rescheduled=rescheduled)

    def _emitter(self, slot: int) -> Any:
        def emit(response: pb_utils.InferenceResponse | None, flags: int) -> None:
            message = Streamed(slot, None if response is None else _inline(response), flags)
            self._channel.send(message)

        return emit

    def _request(
        self, msg: RequestMsg, buf: memoryview, views: list[weakref.ref[np.ndarray]]
    ) -> pb_utils.InferenceRequest:
        inputs = []
        for meta in msg.inputs:
            if meta.data is not None:
                inputs.append(pb_utils.Tensor(meta.name, meta.data))
                continue
            array = arena_array(buf, meta)
            views.append(weakref.ref(array))
            inputs.append(pb_utils.Tensor(meta.name, array))
        return pb_utils.InferenceRequest(
            model_name=self._model_name,
            requested_output_names=msg.requested_outputs,
            inputs=inputs,
            request_id=msg.request_id,
            correlation_id=msg.correlation_id,
            model_version=self._model_version,
            flags=msg.flags,
            timeout=msg.timeout,
            parameters=msg.parameters,
        )

    def _pack(self, responses: list[Any] | tuple[Any, ...], output_arena: ArenaRef) -> Results:
        packed: list[ResponseMsg] = []
        writes: list[tuple[TensorMeta, np.ndarray]] = []
        end = 0
        for index, response in enumerate(responses):
            if not isinstance(response, pb_utils.InferenceResponse):
                kind = type(response).__name__
                reason = f"execute returned {kind} for request {index}, not an InferenceResponse"
                packed.append(ResponseMsg([], reason, pb_utils.TritonError.INTERNAL))
                continue
            error = response.error()
            if error is not None:
                if isinstance(error, pb_utils.TritonError):
                    packed.append(ResponseMsg([], error.message(), error.code()))
                else:
                    packed.append(ResponseMsg([], str(error), pb_utils.TritonError.UNKNOWN))
                continue
            try:
                metas, arrays, end = _layout(response.output_tensors(), end)
            except ValueError as exc:
                packed.append(ResponseMsg([], str(exc), pb_utils.TritonError.INTERNAL))
                continue
            packed.append(ResponseMsg(metas, parameters=_parameters(response)))
            writes.extend(arrays)
        if writes:
            if end > output_arena.size:
                self._channel.send(Grow(end))
                update: ArenaUpdate = self._inbox.wait(CONTROL)
                output_arena = update.output_arena
            buf = self._outputs.buf(output_arena)
            for meta, array in writes:
                np.copyto(arena_array(buf, meta), array)
        return Results(packed)

    def _finalize(self) -> Finalized:
        finalize = getattr(self._model, "finalize", None)
        if finalize is None:
            return Finalized()
        try:
            self._run(finalize())
        except Exception as exc:
            traceback.print_exc()
            return Finalized(f"finalize failed: {describe(exc, self._model_file)}")
        return Finalized()

    def _run(self, result: Any) -> Any:
        """The value of a model hook, awaited on the stub's own event loop when it is async."""
        if not inspect.isawaitable(result):
            return result
        if self._loop is None:
            import asyncio  # only for async models (its import costs a stub's start)

            self._loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self._loop)
        return self._loop.run_until_complete(result)


def _keeper(
    sent: list[pb_utils.InferenceResponse | None], index: int
) -> Callable[[pb_utils.InferenceResponse | None, int], None]:
    """Where a non-decoupled request's sender puts its one response."""

    def keep(response: pb_utils.InferenceResponse | None, flags: int) -> None:
        if response is not None:
            sent[index] = response

    return keep


def _returned_list(returned: Any, count: int) -> list[Any]:
    """What execute returned, as one entry per request (None: each was sent or rescheduled);
    Triton's errors for anything else."""
    if returned is None:
        return [None] * count
    if not isinstance(returned, list):
        raise pb_utils.TritonModelException(
            f"Expected a list in the execute return, found type '{type(returned)}'."
        )
    if len(returned) != count:
        raise pb_utils.TritonModelException(
            "Number of InferenceResponse objects do not match the number of InferenceRequest "
            f"objects. InferenceRequest(s) size is:{count}, and InferenceResponse(s) size "
            f"is:{len(returned)}"
        )
    return returned


def _with_sent_responses(
    returned: list[Any], sent: list[pb_utils.InferenceResponse | None]
) -> list[pb_utils.InferenceResponse]:
    """Each request's one response: the returned one, or the one its sender sent."""
    responses: list[pb_utils.InferenceResponse] = []
    for index, response in enumerate(returned):
        if response is None:
            kept = sent[index]
            if kept is None:
                message = f"execute sent no response for request {index} and returned None for it"
                kept = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
            responses.append(kept)
        elif not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                "Expected an 'InferenceResponse' object in the execute function return list, "
                f"found type '{type(response)}'."
            )
        elif sent[index] is not None:
            message = (
                "Unable to send response. Non-decoupled model cannot send more than one response."
            )
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)))
        else:
            responses.append(response)
    return responses


def _rescheduled_responses(
    requests: list[pb_utils.InferenceRequest], responses: list[Any] | tuple[Any, ...]
) -> tuple[list[Any], tuple[int, ...]]:
    """The responses to pack, and which requests go back to the server to run again: those
    released for rescheduling with None in their place (a response there is an error)."""
    packed = list(responses)
    rescheduled: list[int] = []
    for index, request in enumerate(requests):
        if not request._rescheduled():
            continue
        response = packed[index]
        if response is None:
            packed[index] = pb_utils.InferenceResponse()
            rescheduled.append(index)
        else:
            message = (
                "Expected a None object in the execute function return list for rescheduled "
                f"request, found type '{type(response)}'."
            )
            error = pb_utils.TritonError(message, pb_utils.TritonError.INTERNAL)
            packed[index] = pb_utils.InferenceResponse(error=error)
    return packed, tuple(rescheduled)


def _layout(
    tensors: list[Any], start: int
) -> tuple[list[TensorMeta], list[tuple[TensorMeta, np.ndarray]], int]:
    """Metadata for one response's outputs, the arrays to copy into the arena, and its end."""
    metas: list[TensorMeta] = []
    writes: list[tuple[TensorMeta, np.ndarray]] = []
    end = start
    for tensor in tensors:
        if not isinstance(tensor, pb_utils.Tensor):
            raise ValueError(f"output {tensor!r} is not a pb_utils.Tensor")
        array = tensor._host_array()
        if array.dtype.kind in BYTES_KINDS:
            metas.append(TensorMeta(tensor.name(), "|O", array.shape, -1, bytes_array(array)))
            continue
        try:
            wire_datatype(array.dtype)
        except ProtocolError as exc:
            raise ValueError(f"output '{tensor.name()}': {exc}") from None
        (offset,), end = place([array.nbytes], end)
        meta = TensorMeta(tensor.name(), array.dtype.newbyteorder("=").str, array.shape, offset)
        metas.append(meta)
        writes.append((meta, array))
    return metas, writes, end


def _inline(response: pb_utils.InferenceResponse) -> ResponseMsg:
    """A response with its tensors carried in the message (a decoupled model's responses may
    be sent from any thread at any time, so they do not share the output arena)."""
    error = response.error()
    if error is not None:
        if isinstance(error, pb_utils.TritonError):
            return ResponseMsg([], error.message(), error.code())
        return ResponseMsg([], str(error), pb_utils.TritonError.UNKNOWN)
    outputs = [inline_tensor(tensor, "output") for tensor in response.output_tensors()]
    return ResponseMsg(outputs, parameters=_parameters(response))


def _parameters(response: pb_utils.InferenceResponse) -> str:
    """The response's parameters for the message ("" when it has none)."""
    parameters = response.parameters()
    return "" if parameters in ("", "{}") else parameters


async def _bounded(awaitable: Any) -> Any:
    import asyncio

    return await asyncio.wait_for(awaitable, PROBE_TIMEOUT_S)


def main(argv: list[str] | None = None) -> int:
    """The stub's entry point (its socket's fd in argv[1]): serves the conversation until Finalize
    or the server goes away, then returns 0."""
    args = sys.argv[1:] if argv is None else argv
    # Ctrl-C reaches the whole process group; the server unloads its stubs itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    channel = Channel(int(args[0]))
    try:
        Stub(channel).serve()
    finally:
        channel.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
