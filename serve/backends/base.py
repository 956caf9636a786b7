"""The backend contract: load a model instance, execute a batch of requests, unload.

A backend is a module with a `Backend` subclass registered in `serve.backends.registry`.
For each instance in the model's instance_group the engine creates one `ModelInstance` with
`Backend.create_instance`, calls `load()` once, then `execute()` from that instance's own worker
thread, one batch at a time, and finally `unload()`. GIL-releasing runtimes (onnxruntime, torch)
therefore run instances in parallel; the python backend runs each instance in its own process.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from serve.custom_metrics import CustomMetrics
from serve.errors import ErrorKind, ServeError
from serve.inference import Cancellation, InferRequest, InferResponse
from serve.platform import ServingPlatform


class ProducedOutputs(dict[str, np.ndarray]):
    """A request's outputs together with the response parameters the model set (Triton's
    response parameters: str keys; bool, int or str values). A plain dict means none."""

    def __init__(
        self, outputs: dict[str, np.ndarray] | None = None, parameters: dict[str, Any] | None = None
    ) -> None:
        super().__init__(outputs or {})
        self.parameters: dict[str, Any] = dict(parameters or {})


class Rescheduled(ServeError):
    """A request's result when the model asked to run it again in a later batch (Triton's
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE): the request is not answered yet.

    Only a scheduler that takes requests back (the sequence batcher of a model with
    `sequence_batching { iterative_sequence: true }`) gets it as such; `InstanceWorker` turns it
    into a plain ServeError for any other, with Triton's words for that misuse. Being a
    ServeError, it needs no branch where rescheduling cannot happen."""

    def __init__(self) -> None:
        super().__init__(
            ErrorKind.INVALID_ARGUMENT,
            "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model "
            "is not configured to handle such a flag.",
        )


# Per-request result of a batch: every output the model produced, or an error for that request
# (a Rescheduled one: the model wants the request back).
RequestResult = dict[str, np.ndarray] | ServeError
# A called model's responses: each response (None: a bare final flag) and whether it is the last.
CallResponse = Callable[[InferResponse | ServeError | None, bool], None]
Done = Callable[[ServeError | None], None]


class ModelCalls(abc.ABC):
    """What a model may ask of the server it runs in (Triton's BLS and model control): any
    thread may call these; answers come by callback, on the server's event loop thread."""

    @abc.abstractmethod
    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server's event loop; called on it before the instances that call load."""

    @abc.abstractmethod
    def infer(self, request: InferRequest, on_response: CallResponse, decoupled: bool) -> None:
        """Run `request` through its model's scheduler, as a client request would be.
        `decoupled` False asks for exactly one response (an error for a decoupled model)."""

    @abc.abstractmethod
    def load(self, name: str, parameters: dict[str, Any], on_done: Done) -> None:
        """Load or reload `name` with the repository API's parameters (config, file:...)."""

    @abc.abstractmethod
    def unload(self, name: str, on_done: Done) -> None:
        """Unload `name`."""

    @abc.abstractmethod
    def is_ready(self, name: str, version: str, on_done: Callable[[bool], None]) -> None:
        """Whether `name` (at `version`, or the version served when "") is ready."""

    @abc.abstractmethod
    def cancel(self, cancellation: Cancellation) -> None:
        """Cancel a request this model's `infer` started (BLS ResponseIterator.cancel)."""


@dataclass(frozen=True, slots=True)
class InstanceContext:
    """Everything an instance needs to load itself."""

    model_name: str
    model_version: int
    repository_path: Path  # the model repository root
    model_dir: Path  # <repository>/<model>
    model_path: Path  # <model_dir>/<version>/<default_model_filename>
    config: mc.ModelConfig
    instance_name: str  # e.g. "digits_0" (group name and index), as Triton names instances
    instance_index: int
    kind: str = "KIND_CPU"  # the kind this instance really runs on
    device_id: int = 0
    model_calls: ModelCalls | None = None  # None where no server runs the model
    custom_metrics: CustomMetrics | None = None  # the server's registry of models' own metrics


@dataclass(slots=True)
class BatchTimes:
    """Durations a backend measured for one batch; they feed the statistics extension."""

    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    # When the batch's execution began and ended (time.monotonic_ns; the worker sets them).
    start_ns: int = 0
    end_ns: int = 0


class ModelInstance(abc.ABC):
    """One loaded copy of a model (one member of an instance group)."""

    # True when execute() never waits on anything but its own computation, so that a batch
    # measured to take only microseconds may run on the event loop's thread (see
    # serve.scheduler.instance_worker). Backends that wait on other processes or I/O keep False.
    inline_when_quick: bool = False

    def __init__(self, context: InstanceContext) -> None:
        self.context = context

    @abc.abstractmethod
    def load(self) -> None:
        """Load the model. Raise ServeError with a clear reason when it cannot be loaded."""

    @abc.abstractmethod
    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        """Run one batch and return one result per request, in order.

        Called from this instance's worker thread, never concurrently with itself. Inputs were
        validated against the model config; a request's inputs keep their batch dimension when
        the model batches. Fill `times` with the compute input / infer / output durations.
        A request the model released for rescheduling gets `Rescheduled()`.
        """

    def begin(
        self,
        requests: Sequence[InferRequest],
        times: BatchTimes,
        finish: Callable[[list[RequestResult]], None],
    ) -> bool:
        """Start a batch without blocking, on the event loop's thread, when this instance can
        (its work happens elsewhere, e.g. in another process): then `finish(results)` is called
        later, on the loop's thread, and True is returned. False: run it with `execute` on the
        instance's thread. `finish` is never called from within `begin`."""
        return False

    def ready(self) -> bool:
        """Whether this instance can serve now (the model's readiness; never blocks)."""
        return True

    def unload(self) -> None:  # noqa: B027 - optional hook
        """Release the model's resources."""


class Backend(abc.ABC):
    """A runtime kind: names, defaults and the factory of its instances."""

    name: str = ""
    default_model_filename: str = ""
    # Config platforms that select this backend (e.g. "onnxruntime_onnx").
    platforms: tuple[str, ...] = ()

    def autocomplete(  # noqa: B027
        self, config: mc.ModelConfig, model_path: Path, settings: Mapping[str, str] | None = None
    ) -> None:
        """Fill in what the config leaves out (inputs, outputs, batching) from the model file.
        `settings`: the server's settings for this backend (tritonserver's --backend-config,
        those for every backend included), e.g. {"default-max-batch-size": "8"}."""

    def default_instance_count(self, kind: str) -> int:
        """Instances per group when the config gives no count (Triton: 2 for ORT on CPU)."""
        return 1

    def gpu_unavailable_reason(self, platform: ServingPlatform) -> str | None:
        """Why this backend cannot run an instance on a GPU of `platform`; None when it can."""
        return f"the {self.name} backend runs on the CPU only"

    @abc.abstractmethod
    def create_instance(self, context: InstanceContext) -> ModelInstance:
        """A new, not yet loaded, instance."""
