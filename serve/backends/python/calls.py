"""The server's side of a python model's calls (BLS inference, model control, custom metrics):
each Call message is handed to the server's services and answered with CallReply messages."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Hashable
from typing import Any

from protocol.datatypes import wire_datatype
from protocol.errors import ProtocolError
from serve.backends.base import InstanceContext
from serve.backends.python.process import StubExited, StubProcess
from serve.backends.python.protocol import Call, CallReply, RequestMsg
from serve.backends.python.response import error_message, inline_response
from serve.errors import ServeError
from serve.inference import Cancellation, InferRequest, InferResponse, RequestedOutput

log = logging.getLogger(__name__)

_SEQUENCE_START = 1
_SEQUENCE_END = 2


class ModelCallHandler:
    """Answers one stub's calls. `handle` never blocks: answers go out from the thread that
    has them (the server's event loop for BLS and model control)."""

    def __init__(
        self,
        stub: StubProcess,
        context: InstanceContext,
        owner: Hashable,
        is_cancelled: Callable[[int], bool] | None = None,
    ) -> None:
        self._stub = stub
        self._context = context
        self._owner = owner
        self._is_cancelled = is_cancelled  # a request's slot -> whether it was cancelled
        self._open: dict[int, Cancellation] = {}  # decoupled BLS calls not answered in full

    def handle(self, call: Call) -> None:
        try:
            if call.op == "infer":
                self._infer(call.call_id, *call.args)
            elif call.op == "is_cancelled":
                slot = int(call.args[0])
                cancelled = self._is_cancelled is not None and self._is_cancelled(slot)
                self._reply(CallReply(call.call_id, value=cancelled))
            elif call.op == "cancel":
                self._cancel(call.call_id, int(call.args[0]))
            elif call.op == "metric":
                self._metric(call.call_id, *call.args)
            elif call.op in ("load", "unload", "is_ready"):
                self._control(call.call_id, call.op, call.args)
            else:
                self._reply(CallReply(call.call_id, error=f"unknown call '{call.op}'"))
        except ServeError as exc:
            self._answer_error(call, exc.message)
        except (TypeError, ValueError) as exc:
            self._answer_error(call, f"{call.op}: {exc}")

    def _answer_error(self, call: Call, message: str) -> None:
        if call.call_id == 0:
            log.warning("%s: %s", self._context.instance_name, message)
            return
        if call.op == "infer":
            reply = CallReply(call.call_id, error_message(ServeError.invalid(message)))
        else:
            reply = CallReply(call.call_id, error=message)
        self._reply(reply)

    def _infer(
        self, call_id: int, name: str, version: str, msg: RequestMsg, decoupled: bool
    ) -> None:
        calls = self._context.model_calls
        if calls is None:
            raise ServeError.unavailable("BLS needs a server: none runs this model")
        request = _infer_request(name, version, msg)
        if decoupled:  # the model may cancel it (ResponseIterator.cancel)
            request.cancellation = self._open[call_id] = Cancellation()

        def on_response(result: InferResponse | ServeError | None, final: bool) -> None:
            if final:
                self._open.pop(call_id, None)
            if isinstance(result, ServeError):
                response = error_message(result)
            elif result is None:
                response = None
            else:
                response = inline_response(result)
            self._reply(CallReply(call_id, response, final))

        calls.infer(request, on_response, decoupled)

    def _cancel(self, call_id: int, target: int) -> None:
        """Cancel the request of decoupled BLS call `target` (done already: nothing to do)."""
        cancellation = self._open.get(target)
        if cancellation is not None:
            calls = self._context.model_calls
            if calls is None:
                raise ServeError.unavailable("cancel needs a server: none runs this model")
            calls.cancel(cancellation)
        self._reply(CallReply(call_id, value=cancellation is not None))

    def _control(self, call_id: int, op: str, args: tuple[Any, ...]) -> None:
        calls = self._context.model_calls
        if calls is None:
            raise ServeError.unavailable(f"{op} needs a server: none runs this model")

        def done(error: ServeError | None) -> None:
            self._reply(CallReply(call_id, error=None if error is None else error.message))

        if op == "load":
            name, config, files = args
            parameters: dict[str, Any] = {}
            if config:
                parameters["config"] = config if isinstance(config, str) else json.dumps(config)
            for key, content in dict(files).items():
                parameters[key if key.startswith("file:") else f"file:{key}"] = bytes(content)
            calls.load(str(name), parameters, done)
        elif op == "unload":
            calls.unload(str(args[0]), done)
        else:
            calls.is_ready(
                str(args[0]),
                str(args[1]),
                lambda ready: self._reply(CallReply(call_id, value=ready)),
            )

    def _metric(self, call_id: int, op: str, args: tuple[Any, ...]) -> None:
        registry = self._context.custom_metrics
        if registry is None:
            raise ServeError.unavailable("custom metrics need a server: none runs this model")
        value = registry.apply(op, tuple(args), self._owner)
        if call_id:
            self._reply(CallReply(call_id, value=value))

    def _reply(self, reply: CallReply) -> None:
        with contextlib.suppress(StubExited):  # a dead stub's restart has nothing to answer
            self._stub.send(reply)


def _infer_request(name: str, version: str, msg: RequestMsg) -> InferRequest:
    """A BLS request as the server's own request type."""
    inputs = {}
    datatypes = {}
    for meta in msg.inputs:
        if meta.data is None:
            raise ServeError.invalid(f"input '{meta.name}' has no data")
        inputs[meta.name] = meta.data
        try:
            datatypes[meta.name] = (
                "BYTES" if meta.data.dtype.kind == "O" else wire_datatype(meta.data.dtype)
            )
        except ProtocolError as exc:
            raise ServeError.invalid(f"input '{meta.name}': {exc}") from None
    parameters = json.loads(msg.parameters) if msg.parameters else {}
    if not isinstance(parameters, dict):
        raise ServeError.invalid("request parameters must be a JSON object")
    if msg.timeout:
        parameters["timeout"] = msg.timeout
    if msg.correlation_id:
        parameters["sequence_id"] = msg.correlation_id
        parameters["sequence_start"] = bool(msg.flags & _SEQUENCE_START)
        parameters["sequence_end"] = bool(msg.flags & _SEQUENCE_END)
    requested = [RequestedOutput(output) for output in msg.requested_outputs]
    return InferRequest(
        model_name=name,
        model_version=version,
        inputs=inputs,
        input_datatypes=datatypes,
        requested_outputs=requested or None,
        id=msg.request_id,
        parameters=parameters,
    )
