"""One traced request: its timestamps and tensors, written as Triton's trace JSON entries.

Whoever still needs the trace holds it (the core from REQUEST_START to REQUEST_END, a transport
from receiving the request to sending the response); the last release hands it to its setting
to be written. Everything here runs on the event loop's thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from serve.trace.settings import TENSORS, TIMESTAMPS

if TYPE_CHECKING:
    from serve.backends.base import BatchTimes

TraceSink = Callable[["RequestTrace"], None]


class RequestTrace:
    """The trace of one sampled request: its timestamps and (at level TENSORS) its tensors, written
    as Triton's trace entries once the last holder releases it."""

    __slots__ = (
        "_holds",
        "_sink",
        "_stamps",
        "_tensors",
        "core_held",
        "id",
        "model_name",
        "model_version",
        "request_id",
        "tensors_on",
        "timestamps_on",
    )

    def __init__(self, trace_id: int, model_name: str, level: tuple[str, ...], sink: TraceSink):
        self.id = trace_id
        self.model_name = model_name
        self.model_version = -1
        self.request_id = ""
        self.timestamps_on = TIMESTAMPS in level
        self.tensors_on = TENSORS in level
        self.core_held = False
        self._stamps: list[tuple[str, int]] = []
        self._tensors: list[dict[str, Any]] = []
        self._holds = 0
        self._sink: TraceSink | None = sink

    # -- what happened ------------------------------------------------------------------------

    def stamp(self, name: str, ns: int | None = None) -> None:
        if self.timestamps_on:
            self._stamps.append((name, time.monotonic_ns() if ns is None else ns))

    def compute(self, queue_start_ns: int, dispatch_ns: int, times: BatchTimes) -> None:
        """The scheduler's points for this request's batch: queued, then executed."""
        if not self.timestamps_on:
            return
        start = times.start_ns or dispatch_ns
        end = max(times.end_ns, start)
        input_end = min(start + times.compute_input_ns, end)
        output_start = min(input_end + times.compute_infer_ns, end)
        self._stamps += [
            ("QUEUE_START", queue_start_ns),
            ("COMPUTE_START", start),
            ("COMPUTE_INPUT_END", input_end),
            ("COMPUTE_OUTPUT_START", output_start),
            ("COMPUTE_END", end),
        ]

    def tensor(self, activity: str, name: str, datatype: str, data: np.ndarray) -> None:
        if self.tensors_on:
            self._tensors.append(
                {
                    "id": self.id,
                    "activity": activity,
                    "tensor": {
                        "name": name,
                        "data": _tensor_text(data),
                        "shape": ",".join(str(d) for d in data.shape),
                        "dtype": datatype,
                    },
                }
            )

    # -- lifetime -----------------------------------------------------------------------------

    def hold(self) -> bool:
        """Keep the trace open; False when it was written already (nothing to add to)."""
        if self._sink is None:
            return False
        self._holds += 1
        return True

    def release(self) -> None:
        self._holds -= 1
        if self._holds <= 0 and self._sink is not None:
            sink, self._sink = self._sink, None
            sink(self)

    def entries(self) -> list[dict[str, Any]]:
        """Triton's trace JSON for this request: a header, then one entry per timestamp (in
        time order), then one per tensor."""
        header: dict[str, Any] = {
            "id": self.id,
            "model_name": self.model_name,
            "model_version": self.model_version,
        }
        if self.request_id:
            header["request_id"] = self.request_id
        stamps = sorted(self._stamps, key=lambda stamp: stamp[1])
        return [
            header,
            *({"id": self.id, "timestamps": [{"name": n, "ns": ns}]} for n, ns in stamps),
            *self._tensors,
        ]


def _tensor_text(data: np.ndarray) -> str:
    """Elements comma-separated, as Triton writes them; BYTES elements quoted."""
    flat = data.ravel()
    if data.dtype == object or data.dtype.kind in ("S", "U"):
        return ",".join(
            '"' + (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) + '"'
            for v in flat
        )
    return ",".join(str(v) for v in flat.tolist())
