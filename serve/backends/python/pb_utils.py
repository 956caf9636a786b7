"""`triton_python_backend_utils`: the API a Triton python model imports as `pb_utils`.

The stub registers this module under Triton's name before it imports the model, so models
written for Triton's python backend run unchanged. What needs the server (BLS inference, model
load / unload / readiness, custom metrics) goes through the services the stub installs with
`_install_services`; outside a stub those calls raise `TritonModelException`.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

import numpy as np

from protocol.datatypes import WIRE_TO_NUMPY, config_to_wire, wire_datatype
from protocol.errors import ProtocolError
from serve.custom_metrics import (
    check_buckets,
    check_family,
    check_operation,
    describe,
    labels_key,
)

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1

# TRITONSERVER_DataType values, as Tensor.triton_dtype() reports them.
TRITONSERVER_TYPES: dict[str, int] = {
    "BOOL": 1,
    "UINT8": 2,
    "UINT16": 3,
    "UINT32": 4,
    "UINT64": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FP16": 10,
    "FP32": 11,
    "FP64": 12,
    "BYTES": 13,
    "BF16": 14,
}
_TYPE_TO_WIRE = {v: k for k, v in TRITONSERVER_TYPES.items()}


class TritonModelException(Exception):
    """Raised by the API on misuse; a model may raise it too."""


class StubServices(Protocol):
    """What the stub provides to the API for the calls that need the server."""

    def infer(
        self, request: InferenceRequest, decoupled: bool
    ) -> InferenceResponse | Iterator[InferenceResponse]: ...

    async def infer_async(
        self, request: InferenceRequest, decoupled: bool
    ) -> InferenceResponse | Iterator[InferenceResponse]: ...

    def control(self, op: str, args: tuple[Any, ...]) -> Any: ...

    def metric(self, op: str, args: tuple[Any, ...]) -> float | None: ...


_SERVICES: StubServices | None = None


def _install_services(services: StubServices | None) -> None:
    """Called by the stub once at start (None removes them)."""
    global _SERVICES
    _SERVICES = services


def _services() -> StubServices:
    if _SERVICES is None:
        raise TritonModelException(
            "this call needs the server: it only works inside a model the server runs"
        )
    return _SERVICES


class TritonError:
    """An error for one response: `InferenceResponse(error=TritonError("msg"))`."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    def __init__(self, message: str, code: int = UNKNOWN) -> None:
        self._message = str(message)
        self._code = int(code)

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class Tensor:
    """A named tensor; on CPU, backed by a numpy array."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        if not isinstance(array, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}': expected a numpy array, got {type(array).__name__}"
            )
        self._name = name
        self._array = array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return [int(d) for d in self._array.shape]

    def triton_dtype(self) -> int:
        return numpy_to_triton_type(self._array.dtype)

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        try:
            return self._array.__dlpack__()
        except (BufferError, TypeError) as exc:
            raise TritonModelException(f"Tensor '{self._name}': to_dlpack: {exc}") from exc

    @staticmethod
    def from_dlpack(name: str, tensor: Any) -> Tensor:
        """A tensor from any object implementing `__dlpack__` (a torch tensor, a numpy array)."""
        if not hasattr(tensor, "__dlpack__"):
            raise TritonModelException(
                f"Tensor '{name}': from_dlpack needs an object with __dlpack__ "
                "(raw DLPack capsules are not supported)"
            )
        try:
            return Tensor(name, np.from_dlpack(tensor))
        except (BufferError, TypeError, RuntimeError) as exc:
            raise TritonModelException(f"Tensor '{name}': from_dlpack: {exc}") from exc

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, dtype={self._array.dtype})"


class InferenceRequest:
    """A request handed to `execute`, or one a model builds to call another model (BLS):
    `exec()` waits for the answer, `await async_exec()` lets several run at once. With
    `decoupled=True` both give an iterator over the callee's responses; the last may carry no
    tensors (only the final flag)."""

    def __init__(
        self,
        model_name: str = "",
        requested_output_names: Sequence[str] = (),
        inputs: Sequence[Tensor] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        parameters: dict[str, Any] | str | None = None,
        **_ignored: Any,
    ) -> None:
        self._model_name = model_name
        self._requested_output_names = list(requested_output_names)
        self._inputs = list(inputs)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        if parameters is None:
            parameters = {}
        self._parameters = parameters if isinstance(parameters, str) else json.dumps(parameters)
        self._response_sender: InferenceResponseSender | None = None  # set for decoupled models
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

    def timeout(self) -> int:
        return self._timeout

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

    def get_response_sender(self) -> InferenceResponseSender:
        if self._response_sender is None:
            raise TritonModelException(
                "get_response_sender is only available to models with a decoupled"
                " model_transaction_policy"
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
    """Sends a decoupled model's responses to one request, from any thread, during or after
    `execute`; the one sent with TRITONSERVER_RESPONSE_COMPLETE_FINAL is the last."""

    def __init__(
        self, emit: Callable[[InferenceResponse | None, int], None], slot: int | None = None
    ) -> None:
        self._emit = emit
        self._closed = False
        self._lock = threading.Lock()
        self._slot = slot  # the request's, as the server knows it
        self._cancelled = False

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is None and not flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException(
                "Inference Response object must be provided when the response flags is set to zero"
            )
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send expects an InferenceResponse, not {type(response).__name__}"
            )
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send response. Response sender has been closed"
                    " (a response with TRITONSERVER_RESPONSE_COMPLETE_FINAL was sent already)"
                )
            self._emit(response, flags)
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
    """What `execute` returns for each request: output tensors, or an error."""

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: dict[str, Any] | str | None = None,
    ) -> None:
        self._output_tensors = list(output_tensors or [])
        self._error = error
        self._parameters = parameters

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


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
    for tensor in request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    for tensor in response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def triton_string_to_numpy(triton_type_string: str) -> type:
    """`"TYPE_FP32"` -> `numpy.float32`; `"TYPE_STRING"` -> `numpy.object_`."""
    wire = config_to_wire(triton_type_string)
    if wire not in WIRE_TO_NUMPY:
        raise TritonModelException(f"no numpy type for '{triton_type_string}'")
    return WIRE_TO_NUMPY[wire].type


def numpy_to_triton_type(dtype: Any) -> int:
    try:
        return TRITONSERVER_TYPES[wire_datatype(np.dtype(dtype))]
    except ProtocolError as exc:
        raise TritonModelException(str(exc)) from None


def triton_to_numpy_type(triton_type: int) -> type:
    wire = _TYPE_TO_WIRE.get(triton_type)
    if wire is None or wire not in WIRE_TO_NUMPY:
        raise TritonModelException(f"no numpy type for Triton data type {triton_type}")
    return WIRE_TO_NUMPY[wire].type


class Metric:
    """One custom metric: made by `MetricFamily.Metric(labels, buckets)`, never directly.

    Values live in the server, which shows them in /metrics. Metrics with the same family and
    labels are one metric. As in Triton, the family object keeps the first Metric object of each
    labels alive; unlike Triton (where a Metric whose family object was deleted raises), a Metric
    also keeps its family alive. When neither is referred to any more, the server drops them (at
    the model's next metric call, or when its stub stops)."""

    def __init__(self, family: MetricFamily, labels: tuple[tuple[str, str], ...]) -> None:
        self._family = family
        self._labels = labels
        self._where = describe(family._name, labels)

    def increment(self, value: float) -> None:
        """Add `value` (a counter: non-negative only; a gauge: either sign)."""
        self._update("increment", value, "Failed to increment metric value")

    def set(self, value: float) -> None:
        """Set a gauge to `value`."""
        self._update("set", value, "Failed to set metric value")

    def observe(self, value: float) -> None:
        """Count `value` in a histogram's buckets, sum and count."""
        self._update("observe", value, "Failed to observe metric value")

    def value(self) -> float:
        """A counter's or gauge's current value (a histogram has none)."""
        try:
            check_operation(self._family._kind, "value", self._where)
        except ValueError as exc:
            raise TritonModelException(f"Failed to get metric value: {exc}") from None
        args = (self._family._name, self._labels)
        found = _metric_call("value", args, "Failed to get metric value")
        return 0.0 if found is None else float(found)

    def _update(self, op: str, value: float, failure: str) -> None:
        try:
            number = check_operation(self._family._kind, op, self._where, value)
        except ValueError as exc:
            raise TritonModelException(f"{failure}: {exc}") from None
        _metric_call(op, (self._family._name, self._labels, number))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the module may be gone
            _dropped.append(("drop_metric", (self._family._name, self._labels)))


_MetricObject = Metric  # MetricFamily.Metric (Triton's name) hides the class inside its body


class MetricFamily:
    """`pb_utils.MetricFamily(name, description, kind)`: a Prometheus family of custom metrics.

    `kind` is COUNTER, GAUGE or HISTOGRAM. The same name gives the same family (the first
    description is kept; another kind raises TritonModelException). The name must be a valid
    Prometheus metric name not starting with `nv_` (the server's own metrics)."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"

    def __init__(self, name: str, description: str, kind: str) -> None:
        try:
            name = check_family(name, description, kind)
        except ValueError as exc:
            raise TritonModelException(f"Error when creating MetricFamily: {exc}") from None
        _metric_call("family", (name, description, kind), "Error when creating MetricFamily")
        self._name = name
        self._kind = kind
        self._metrics: dict[tuple[tuple[str, str], ...], Metric] = {}

    def Metric(  # Triton's name
        self, labels: dict[str, str] | None = None, buckets: Sequence[float] | None = None
    ) -> _MetricObject:
        """A metric of this family with `labels` (string names and values); a histogram needs
        `buckets`, its strictly increasing bucket boundaries (+Inf is added)."""
        if labels is None:
            labels = {}
        if not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        try:
            key = labels_key(self._name, tuple(labels.items()))
            bounds = check_buckets(self._kind, describe(self._name, key), buckets)
        except ValueError as exc:
            raise TritonModelException(f"Error when creating Metric: {exc}") from None
        args = (self._name, key, None if bounds is None else list(bounds))
        _metric_call("metric", args, "Error when creating Metric")
        metric = _MetricObject(self, key)
        self._metrics.setdefault(key, metric)
        return metric

    def __del__(self) -> None:
        if "_name" in self.__dict__:  # not when __init__ failed
            with contextlib.suppress(Exception):
                _dropped.append(("drop_family", (self._name,)))


# Drops from __del__ wait here: __del__ may run inside a garbage collection at any point, even
# while this thread is sending, so it never sends; the next metric call (or the stub) sends them.
_dropped: collections.deque[tuple[str, tuple[Any, ...]]] = collections.deque()


def _flush_dropped_metrics() -> None:
    """Send the drops of deleted Metric and MetricFamily objects (the stub may call this)."""
    services = _services()
    while True:
        try:
            op, args = _dropped.popleft()  # another thread may be flushing too
        except IndexError:
            return
        with contextlib.suppress(TritonModelException):  # a drop's failure is not the caller's
            services.metric(op, args)


def _metric_call(op: str, args: tuple[Any, ...], failure: str = "") -> float | None:
    _flush_dropped_metrics()
    try:
        return _services().metric(op, args)
    except TritonModelException as exc:
        raise TritonModelException(f"{failure}: {exc}" if failure else str(exc)) from None


class Logger:
    """Triton's model logger; here every level goes to the stub's stderr."""

    class LogLevel:
        INFO = 0
        WARNING = 1
        ERROR = 2
        VERBOSE = 3

    _PREFIX = {0: "I", 1: "W", 2: "E", 3: "V"}

    @staticmethod
    def log(message: str, level: int = 0) -> None:
        print(f"{Logger._PREFIX.get(level, 'I')} [python model] {message}", file=sys.stderr)

    @staticmethod
    def log_info(message: str) -> None:
        Logger.log(message, Logger.LogLevel.INFO)

    @staticmethod
    def log_warn(message: str) -> None:
        Logger.log(message, Logger.LogLevel.WARNING)

    @staticmethod
    def log_error(message: str) -> None:
        Logger.log(message, Logger.LogLevel.ERROR)

    @staticmethod
    def log_verbose(message: str) -> None:
        Logger.log(message, Logger.LogLevel.VERBOSE)


class ModelConfig:
    """The object `TritonPythonModel.auto_complete_config` receives and returns.

    It records what the model asks for; the server applies it to the real config afterwards,
    filling only what the config lacks. `as_dict()` shows the config with the additions.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config
        self.max_batch_size: int | None = None
        self.dynamic_batching = False
        self.inputs: list[dict[str, Any]] = []
        self.outputs: list[dict[str, Any]] = []
        self.transaction_policy: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        merged = copy.deepcopy(self._config)
        if self.max_batch_size is not None and not merged.get("max_batch_size"):
            merged["max_batch_size"] = self.max_batch_size
        if self.dynamic_batching and "sequence_batching" not in merged:
            merged.setdefault("dynamic_batching", {})
        for key, added in (("input", self.inputs), ("output", self.outputs)):
            present = {t.get("name") for t in merged.get(key, [])}
            merged.setdefault(key, []).extend(t for t in added if t["name"] not in present)
        return merged

    def set_max_batch_size(self, max_batch_size: int) -> None:
        self.max_batch_size = int(max_batch_size)

    def set_dynamic_batching(self) -> None:
        self.dynamic_batching = True

    def add_input(self, input: dict[str, Any]) -> None:
        self.inputs.append(_tensor_entry("input", input))

    def add_output(self, output: dict[str, Any]) -> None:
        self.outputs.append(_tensor_entry("output", output))

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        self.transaction_policy = dict(transaction_policy_dict)

    def recorded(self) -> dict[str, Any]:
        """What the model asked for, as plain data the server can apply."""
        return {
            "max_batch_size": self.max_batch_size,
            "dynamic_batching": self.dynamic_batching,
            "input": self.inputs,
            "output": self.outputs,
            "model_transaction_policy": self.transaction_policy,
        }


def _tensor_entry(kind: str, entry: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise ValueError(f"add_{kind} expects a dict, got {type(entry).__name__}")
    missing = [key for key in ("name", "data_type", "dims") if key not in entry]
    if missing:
        raise ValueError(f"add_{kind}: {entry.get('name', '?')!r} lacks {', '.join(missing)}")
    result = dict(entry)
    result["dims"] = [int(d) for d in entry["dims"]]
    return result
