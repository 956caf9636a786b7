"""Per model-version statistics in the shape of Triton's statistics extension."""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from protocol.statistics import BATCH_DURATION_FIELDS, DURATION_FIELDS
from serve.backends.base import BatchTimes, RequestResult, Rescheduled
from serve.errors import ServeError
from serve.inference import InferRequest


class FailureReason(enum.Enum):
    """Why a request failed after reaching the scheduler, as Triton's failure metric labels it.
    Requests refused before that (a bad input shape, an unknown model) are not counted, as in
    Triton."""

    REJECTED = "REJECTED"  # the queue policy refused it: queue full, or its queue timeout expired
    CANCELED = "CANCELED"
    BACKEND = "BACKEND"  # the model's execution failed for it
    OTHER = "OTHER"


class TimedRequest(Protocol):
    """A scheduler's record of a request it ran: when it was queued and dispatched."""

    request: InferRequest
    enqueue_ns: int
    dispatch_ns: int


@dataclass(slots=True)
class Duration:
    """A count and the total nanoseconds of its occurrences, as Triton's statistics report each
    duration."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns

    def to_json(self) -> dict[str, int]:
        return {"count": self.count, "ns": self.ns}


@dataclass(slots=True)
class BatchSizeStats:
    """The compute durations of the batches of one size (Triton's batch_stats entry for that batch
    size)."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ModelStatistics:
    """Counters for one model version; updated only on the event loop's thread."""

    name: str
    version: str
    last_inference_ms: int = 0
    inference_count: int = 0  # inferences (batch rows) performed
    execution_count: int = 0  # backend executions (batches)
    success: Duration = field(default_factory=Duration)
    fail: Duration = field(default_factory=Duration)
    queue: Duration = field(default_factory=Duration)
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)
    cache_hit: Duration = field(default_factory=Duration)
    cache_miss: Duration = field(default_factory=Duration)
    batches: dict[int, BatchSizeStats] = field(default_factory=dict)
    failures: dict[FailureReason, int] = field(
        default_factory=lambda: dict.fromkeys(FailureReason, 0)
    )

    def record_execution(
        self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int
    ) -> None:
        self.execution_count += 1
        self.inference_count += batch_size
        stats = self.batches.get(batch_size)
        if stats is None:
            stats = self.batches[batch_size] = BatchSizeStats()
        stats.compute_input.add(input_ns)
        stats.compute_infer.add(infer_ns)
        stats.compute_output.add(output_ns)

    def record_successes(self, count: int, total_ns: int, queue_ns: int, times: BatchTimes) -> None:
        """`count` requests of one batch succeeded; durations are their sums, except `times`,
        the batch's compute durations, which every request of the batch spent."""
        self.success.add(total_ns, count)
        self.queue.add(queue_ns, count)
        self.compute_input.add(times.compute_input_ns * count, count)
        self.compute_infer.add(times.compute_infer_ns * count, count)
        self.compute_output.add(times.compute_output_ns * count, count)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_results(
        self, done: Iterable[tuple[TimedRequest, RequestResult]], times: BatchTimes, now_ns: int
    ) -> None:
        """Count each request of one executed batch as a success or a backend failure, with its
        trace's compute times and, for an ensemble's step, the ensemble's share."""
        succeeded = success_ns = queue_ns = 0
        for timed, result in done:
            if isinstance(result, Rescheduled):
                continue  # it runs again: counted once, when it is answered
            request = timed.request
            if request.trace is not None:
                request.trace.compute(timed.enqueue_ns, timed.dispatch_ns, times)
            if isinstance(result, ServeError):
                self.record_failure(now_ns - timed.enqueue_ns, FailureReason.BACKEND)
                continue
            succeeded += 1
            success_ns += now_ns - timed.enqueue_ns
            queue_ns += timed.dispatch_ns - timed.enqueue_ns
            if request.on_stats is not None:
                request.on_stats(timed.dispatch_ns - timed.enqueue_ns, times)
        if succeeded:
            self.record_successes(succeeded, success_ns, queue_ns, times)

    def record_cache_hit(self, total_ns: int, lookup_ns: int) -> None:
        """A request answered from the response cache: a success that neither queued nor ran
        (Triton counts it in success and queue, never in the inference or execution counts)."""
        self.success.add(total_ns)
        self.queue.add(0)
        self.cache_hit.add(lookup_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_failure(self, total_ns: int, reason: FailureReason) -> None:
        self.fail.add(total_ns)
        self.failures[reason] += 1

    def to_json(self) -> dict[str, Any]:
        """One entry of `model_stats`, field for field as Triton prints it."""
        return {
            "name": self.name,
            "version": self.version,
            "last_inference": self.last_inference_ms,
            "inference_count": self.inference_count,
            "execution_count": self.execution_count,
            "inference_stats": {key: getattr(self, key).to_json() for key in DURATION_FIELDS},
            "response_stats": {},
            "batch_stats": [
                {"batch_size": size}
                | {key: getattr(stats, key).to_json() for key in BATCH_DURATION_FIELDS}
                for size, stats in sorted(self.batches.items())
            ],
            "memory_usage": [],
        }
