"""Protocol-neutral request and response types shared by transports, schedulers and backends.

Tensors are numpy arrays; BYTES tensors are object arrays of `bytes`. A request's inputs keep
their full shape (batch dimension included when the model batches). Transports build these
values from the wire and turn responses back into wire bytes; nothing here knows a transport.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(slots=True)
class RequestedOutput:
    """An output the client asked for, with its per-output parameters (e.g. binary_data)."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)


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
    name: str
    datatype: str
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.data.shape)


@dataclass(slots=True)
class InferResponse:
    model_name: str
    model_version: str
    outputs: list[OutputTensor]
    id: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
