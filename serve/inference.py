"""Protocol-neutral request and response types shared by transports, schedulers and backends.

Tensors are numpy arrays; BYTES tensors are object arrays of `bytes`. A request's inputs keep
their full shape (batch dimension included when the model batches). Transports build these
values from the wire and turn responses back into wire bytes; nothing here knows a transport.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from serve.trace.request_trace import RequestTrace


class Cancellation:
    """Whether a request's client has gone away. The transport that owns the request cancels
    it (on the event loop's thread); whoever holds the request then listens (a scheduler drops
    it from its queue) or looks (a running model asks). Copies of a request share it."""

    __slots__ = ("_listeners", "cancelled")

    def __init__(self) -> None:
        self.cancelled = False  # any thread may read it
        self._listeners: list[Callable[[], None]] | None = None  # made on first listen

    def cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        listeners, self._listeners = self._listeners, None
        for listener in listeners or ():
            listener()

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener()` once when the request is cancelled (never, once it was)."""
        if self.cancelled:
            return
        if self._listeners is None:
            self._listeners = [listener]
        else:
            self._listeners.append(listener)

    def forget(self, listener: Callable[[], None]) -> None:
        """Stop calling `listener` (a request that left its queue). A listener refers to its
        request and the request to this, so one left listening would keep the request alive
        until the cyclic garbage collector finds it."""
        listeners = self._listeners
        if listeners is not None and listener in listeners:
            listeners.remove(listener)


@dataclass(slots=True, frozen=True)
class RegionSlice:
    """Where a tensor's data lies in a registered shared-memory region: Triton's
    shared_memory_region, shared_memory_offset and shared_memory_byte_size parameters."""

    region: str
    offset: int
    byte_size: int


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (e.g. binary_data)."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    region: RegionSlice | None = None  # written into this shared-memory range


@dataclass(slots=True)
class InferRequest:
    """One inference request as it travels from a transport to a scheduler."""

    model_name: str
    model_version: str  # "" means: the version the policy serves (the highest loaded)
    inputs: dict[str, np.ndarray]
    input_datatypes: dict[str, str] = field(default_factory=dict)  # as sent on the wire
    requested_outputs: list[RequestedOutput] | None = None  # None: every output
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    arrival_ns: int = field(default_factory=time.monotonic_ns)
    trace: RequestTrace | None = None  # set when this request is sampled for tracing
    # Inputs whose data lies in shared memory: name -> (shape, range). The DataPlane reads
    # them into `inputs` before the model sees the request.
    region_inputs: dict[str, tuple[tuple[int, ...], RegionSlice]] = field(default_factory=dict)
    # Set for a decoupled model's request: called with each response (the produced outputs, a
    # ServeError, or None for a bare final flag) and whether it is the request's last.
    on_response: Callable[[Any, bool], None] | None = None
    # Set on an ensemble step's request: called with its queue time (ns) and its batch's
    # BatchTimes when it succeeds, so the ensemble reports its steps' compute times.
    on_stats: Callable[[int, Any], None] | None = None
    # Set by a transport that can tell when its client goes away (None: it never cancels).
    cancellation: Cancellation | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancellation is not None and self.cancellation.cancelled

    @property
    def priority(self) -> int:
        value = self.parameters.get("priority", 0)
        return int(value) if isinstance(value, (int, float)) else 0

    @property
    def timeout_us(self) -> int | None:
        value = self.parameters.get("timeout")
        return int(value) if isinstance(value, (int, float)) and value > 0 else None


@dataclass(slots=True)
class OutputTensor:
    """One output of a response; `region` is set when it was written into a client's shared-memory
    region instead, and the response then carries no data for it."""

    name: str
    datatype: str
    data: np.ndarray
    region: RegionSlice | None = None  # already written there: the response carries no data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.data.shape)


@dataclass(slots=True)
class InferResponse:
    """One inference response as it travels back from a model to a transport: the model and version
    that answered, its outputs, the request's id ("" when the request had none) and the response's
    parameters."""

    model_name: str
    model_version: str
    outputs: list[OutputTensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
