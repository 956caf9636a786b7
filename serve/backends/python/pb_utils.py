"""`triton_python_backend_utils`: the API a Triton python model imports as `pb_utils`.

The stub registers this module under Triton's name before it imports the model, so models
written for Triton's python backend run unchanged. Its names are those of Triton's module
(docs/python_backend.md lists each with its status); the parts live in the pb_* modules beside
this one. What needs the server (BLS inference, model load / unload / readiness, custom
metrics, cancellation) goes through the services the stub installs; outside a stub those calls
raise `TritonModelException`.
"""

from __future__ import annotations

import enum
import json
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from serve.backends.python.pb_config import (
    ModelConfig,
    get_input_config_by_name,
    get_output_config_by_name,
    using_decoupled_model_transaction_policy,
)
from serve.backends.python.pb_errors import TritonError, TritonModelException
from serve.backends.python.pb_logger import Logger, LogLevel
from serve.backends.python.pb_metrics import Metric, MetricFamily, MetricKind
from serve.backends.python.pb_metrics import flush_dropped_metrics as _flush_dropped_metrics
from serve.backends.python.pb_services import StubServices
from serve.backends.python.pb_services import install_services as _install_services
from serve.backends.python.pb_services import services as _services
from serve.backends.python.pb_tensor import Tensor
from serve.backends.python.pb_types import (
    TRITON_STRING_TO_NUMPY,
    TRITONSERVER_TYPES,
    deserialize_bytes_tensor,
    numpy_to_triton_type,
    serialize_byte_tensor,
    triton_string_to_numpy,
    triton_to_numpy_type,
)

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITONSERVER_TYPES",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "InferenceTrace",
    "LogLevel",
    "Logger",
    "MemoryType",
    "Metric",
    "MetricFamily",
    "MetricKind",
    "ModelConfig",
    "PreferredMemory",
    "StubServices",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "_flush_dropped_metrics",
    "_install_services",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "is_model_ready",
    "load_model",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "unload_model",
    "using_decoupled_model_transaction_policy",
]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2


class MemoryType(enum.IntEnum):
    """Where a BLS call would like its outputs (`PreferredMemory`)."""

    TRITONSERVER_MEMORY_GPU = 0
    TRITONSERVER_MEMORY_CPU = 1


TRITONSERVER_MEMORY_GPU = MemoryType.TRITONSERVER_MEMORY_GPU
TRITONSERVER_MEMORY_CPU = MemoryType.TRITONSERVER_MEMORY_CPU


class PreferredMemory:
    """`PreferredMemory(TRITONSERVER_MEMORY_CPU | _GPU, device_id=0)` for a BLS request's
    outputs. A hint, as in Triton; this server hands every BLS output over in host memory."""

    def __init__(self, preferred_memory_type: int, preferred_device_id: int = 0) -> None:
        if preferred_memory_type is None or preferred_device_id is None:
            raise TypeError("PreferredMemory: memory type and device id must not be None")
        self.preferred_memory_type = MemoryType(int(preferred_memory_type))
        self.preferred_device_id = int(preferred_device_id)

    def __repr__(self) -> str:
        kind = self.preferred_memory_type.name
        return f"PreferredMemory({kind}, {self.preferred_device_id})"


class InferenceTrace:
    """A request's trace (`request.trace()`, or passed to a BLS request to trace it within
    the caller's trace). `get_context()` is the OpenTelemetry context; this server traces in
    Triton's own mode only, so it is None."""

    def __init__(self, context: str | None = None) -> None:
        self._context = context or None

    def get_context(self) -> str | None:
        return self._context


class InferenceRequest:
    """A request handed to `execute`, or one a model builds to call another model (BLS):
    `exec()` waits for the answer, `await async_exec()` lets several run at once. With
    `decoupled=True` both give an iterator over the callee's responses; the last may carry no
    tensors (only the final flag)."""

    def __init__(
        self,
        request_id: str = "",
        correlation_id: int | str = 0,
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        model_name: str = "",
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: InferenceTrace | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        # Triton's binding takes bytes where it wants a str (a BYTES tensor's item, say).
        request_id = _text(request_id)
        model_name = _text(model_name)
        requested_output_names = [_text(name) for name in requested_output_names]
        if not isinstance(correlation_id, (int, str)) or isinstance(correlation_id, bool):
            raise TritonModelException("Correlation ID must be integer or string")
        for tensor in inputs:
            if tensor is None:
                raise TritonModelException(
                    f"Input tensor for request with id '{request_id}' and model name "
                    f"'{model_name}' should not be empty."
                )
        for output_name in requested_output_names:
            if output_name == "":
                raise TritonModelException(
                    f"Requested output name for request with id '{request_id}' and model "
                    f"name '{model_name}' should not be empty."
                )
        self._model_name = model_name
        self._requested_output_names = list(requested_output_names)
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        self._timeout = int(timeout)
        self._preferred_memory = preferred_memory or PreferredMemory(
            MemoryType.TRITONSERVER_MEMORY_CPU
        )
        self._trace = trace or InferenceTrace()
        self._parameters = (
            parameters if isinstance(parameters, str) else parameters_json(parameters)
        )
        self._response_sender: InferenceResponseSender | None = None  # set for decoupled models
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        self._slot: int | None = None  # set by the stub: how the server knows the request
        self._cancelled = False

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._requested_output_names

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def set_flags(self, flags: int) -> None:
        self._flags = int(flags)

    def timeout(self) -> int:
        """The request's timeout in microseconds (0: none)."""
        return self._timeout

    def trace(self) -> InferenceTrace:
        return self._trace

    def preferred_memory(self) -> PreferredMemory:
        return self._preferred_memory

    def parameters(self) -> str:
        """The request's parameters as a JSON object string (Triton's form)."""
        return self._parameters

    def model_name(self) -> str:
        return self._model_name

    def model_version(self) -> int:
        return self._model_version

    def is_cancelled(self) -> bool:
        """Whether the server cancelled this request (its client went away). Each call asks
        the server until it answers True; a request the model built itself is never
        cancelled."""
        if not self._cancelled:
            self._cancelled = _ask_cancelled(self._slot)
        return self._cancelled

    def set_release_flags(self, flags: int) -> None:
        """How the server releases this request once execute returns: with
        TRITONSERVER_REQUEST_RELEASE_RESCHEDULE it runs again in a later batch, where the model
        config has sequence_batching { iterative_sequence: true }. A model that is not
        decoupled returns None in its place; a decoupled one keeps its responses coming."""
        if not isinstance(flags, int) or not 0 <= flags < 1 << 32:
            raise TypeError(
                "set_release_flags(): incompatible function arguments: flags must be an "
                f"unsigned 32-bit integer, got {flags!r}"
            )
        self._release_flags = flags

    def _rescheduled(self) -> bool:
        # The flag's bit decides, as Triton's core reschedules on it.
        return bool(self._release_flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)

    def get_response_sender(self) -> InferenceResponseSender:
        if self._response_sender is None:  # a request the model made (BLS) has none to send to
            raise TritonModelException(
                "Unable to send response. Response sender has no reference to the decoupled "
                "state of the model."
            )
        return self._response_sender

    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on `model_name` through its scheduler; an InferenceResponse (its
        error set when the call failed), or an iterator of them when `decoupled`."""
        self._check_callable()
        return _services().infer(self, decoupled)

    async def async_exec(self, decoupled: bool = False) -> Any:
        """`exec` without blocking the model's event loop."""
        self._check_callable()
        return await _services().infer_async(self, decoupled)

    def _check_callable(self) -> None:
        if not self._model_name:
            raise TritonModelException("InferenceRequest needs a model_name to be executed")
        for tensor in self._inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"InferenceRequest inputs must be pb_utils.Tensor, not {type(tensor).__name__}"
                )


class InferenceResponseSender:
    """Sends the responses to one request (`request.get_response_sender()`).

    A decoupled model sends any number, from any thread, during or after `execute`; the one
    sent with TRITONSERVER_RESPONSE_COMPLETE_FINAL is the last. Any other model may send its
    one response through it (then FINAL, or both at once) and put None in that request's
    place in what `execute` returns (or return None); its sender closes when `execute`
    returns."""

    def __init__(
        self,
        emit: Callable[[InferenceResponse | None, int], None],
        slot: int | None = None,
        decoupled: bool = True,
    ) -> None:
        self._emit = emit
        self._closed = False
        self._lock = threading.Lock()
        self._slot = slot  # the request's, as the server knows it
        self._cancelled = False
        self._decoupled = decoupled
        self._sent = 0

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if flags not in (0, TRITONSERVER_RESPONSE_COMPLETE_FINAL):
            raise TritonModelException("Unable to send response. Unsupported flag provided.")
        if response is None and flags == 0:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero."
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send expects an InferenceResponse, not {type(response).__name__}"
            )
        with self._lock:
            if not self._decoupled:
                if response is not None and self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send more than "
                        "one response."
                    )
                if response is None and not self._sent:
                    raise TritonModelException(
                        "Unable to send response. Non-decoupled model cannot send complete "
                        "final before sending a response."
                    )
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed."
                )
            self._emit(response, flags)
            self._sent += response is not None
            if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self._closed = True

    def close(self) -> bool:
        """Refuse further responses; False when the final one had been sent already."""
        with self._lock:
            was_open, self._closed = not self._closed, True
        return was_open

    def is_cancelled(self) -> bool:
        """Whether the server cancelled the request (the client went away, or its stream
        ended): the model may stop sending. Asks the server until it answers True."""
        if not self._cancelled:
            self._cancelled = _ask_cancelled(self._slot)
        return self._cancelled


def _ask_cancelled(slot: int | None) -> bool:
    if slot is None:
        return False
    return bool(_services().control("is_cancelled", (slot,)))


class ResponseIterator:
    """What `exec(decoupled=True)` and `async_exec(decoupled=True)` return: the called model's
    responses as they come. `cancel()` cancels the called request in the server: still queued,
    it ends with a CANCELLED error; running, its model sees `is_cancelled()` True. Responses
    already on their way still come; iterate to the end as usual."""

    def __init__(self, responses: Iterator[InferenceResponse], cancel: Callable[[], None]) -> None:
        self._responses = responses
        self._cancel = cancel

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        return next(self._responses)

    def cancel(self) -> None:
        self._cancel()


class InferenceResponse:
    """What `execute` returns for each request: output tensors, or an error; `parameters`
    (str keys; bool, int or str values) reach the client as the response's parameters."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        tensors = list(output_tensors or [])
        if any(tensor is None for tensor in tensors):
            raise TritonModelException("Output tensor for inference response should not be empty.")
        self._output_tensors = tensors
        self._error = error
        self._parameters = (
            parameters if isinstance(parameters, str) else parameters_json(parameters)
        )

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """The response's parameters as a JSON object string (Triton's form)."""
        return self._parameters


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def parameters_json(parameters: dict[str, Any] | None) -> str:
    """Request or response parameters as Triton keeps them: a JSON object string, checked as
    Triton checks them (str keys; bool, int or str values)."""
    if parameters is None:
        return "{}"
    if not isinstance(parameters, dict):
        raise TritonModelException(f"Expect dict, got {type(parameters)}")
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TritonModelException(
                f"Expect parameters keys to have type str, found type {type(key)}"
            )
        if not isinstance(value, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(value)}"
            )
    return json.dumps(parameters)


def load_model(model_name: str, config: str = "", files: dict[str, bytes] | None = None) -> None:
    """Load or reload `model_name` (the server must run with --model-control-mode explicit);
    `config` is a JSON model config overriding config.pbtxt, `files` maps "file:<version>/<name>"
    to the bytes of the model's files (then `config` is required), as the repository API takes
    them. Raises TritonModelException with the server's reason when it fails."""
    _services().control("load", (model_name, config, dict(files or {})))


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload `model_name` (explicit model control only)."""
    _services().control("unload", (model_name, bool(unload_dependents)))


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether the server can serve `model_name` (the given version, or the one it serves)."""
    return bool(_services().control("is_ready", (model_name, str(model_version))))


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    """Triton's `get_input_tensor_by_name`: the request's input `name`, None when it has none."""
    for tensor in request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    """Triton's `get_output_tensor_by_name`: the response's output `name`, None when it has none."""
    for tensor in response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None
