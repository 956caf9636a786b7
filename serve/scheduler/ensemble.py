"""The ensemble scheduler: runs a request through a graph of composing models.

A request's tensors start as the ensemble's inputs; every step whose inputs all exist is
submitted at once (independent branches run concurrently), each as an ordinary request to its
composing model, through that model's own scheduler, so composing models batch across
ensemble requests. The ensemble answers when every output it must return exists. A failing
step fails that request only. It knows neither the transport nor the backend: composing
models are looked up by name at request time (a reloaded model is used at once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from protocol.datatypes import config_to_wire
from serve.backends.base import BatchTimes
from serve.config.ensemble import step_name
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse, RequestedOutput
from serve.scheduler.statistics import FailureReason, ModelStatistics

log = logging.getLogger("serve.scheduler")

StepResult = InferResponse | ServeError
# The tensors the ensemble produced (by ensemble tensor name), or why it failed.
EnsembleResult = dict[str, np.ndarray] | ServeError


class StepModel(Protocol):
    """What the scheduler needs of a composing model."""

    def submit(self, request: InferRequest, on_done: Callable[[StepResult], None]) -> None: ...


# (model name, version: "" for the latest) -> the model serving it; raises ServeError.
Resolver = Callable[[str, str], StepModel]


@dataclass(frozen=True, slots=True)
class Step:
    """One step of an ensemble: its composing model and version, the ensemble tensor that feeds each
    of its inputs and the one each of its outputs becomes."""

    label: str  # "ensemble_scheduling.step[0] (model 'x')"
    model_name: str
    model_version: str  # "" = the latest ready version
    inputs: dict[str, str]  # the model's input -> ensemble tensor
    outputs: dict[str, str]  # the model's output -> ensemble tensor


def plan_steps(config: mc.ModelConfig) -> list[Step]:
    """The ensemble's steps in config order, as the scheduler runs them; the config was checked
    before (`serve.config.ensemble`)."""
    return [
        Step(
            label=step_name(index, step),
            model_name=step.model_name,
            model_version="" if step.model_version < 0 else str(step.model_version),
            inputs=dict(step.input_map),
            outputs=dict(step.output_map),
        )
        for index, step in enumerate(config.ensemble_scheduling.step)
    ]


class _Run:
    """One ensemble request in flight."""

    __slots__ = (
        "datatypes",
        "finished",
        "in_flight",
        "on_done",
        "request",
        "start_ns",
        "started",
        "tensors",
        "times",
        "wanted",
    )

    def __init__(
        self,
        request: InferRequest,
        wanted: Sequence[str],
        on_done: Callable[[EnsembleResult], None],
        datatypes: dict[str, str],
    ) -> None:
        self.request = request
        self.wanted = wanted
        self.on_done = on_done
        self.tensors: dict[str, np.ndarray] = dict(request.inputs)
        self.datatypes = datatypes
        self.started: set[int] = set()
        self.in_flight = 0
        self.finished = False
        self.start_ns = time.monotonic_ns()
        self.times = BatchTimes()  # the steps' compute durations, summed

    def add_step_times(self, queue_ns: int, times: Any) -> None:
        self.times.compute_input_ns += times.compute_input_ns
        self.times.compute_infer_ns += times.compute_infer_ns
        self.times.compute_output_ns += times.compute_output_ns


class EnsembleScheduler:
    """One ensemble version's scheduler (see above): `enqueue` a validated request, `close` at
    unload. Used on the event loop's thread only."""

    def __init__(
        self,
        config: mc.ModelConfig,
        resolve: Resolver,
        stats: ModelStatistics,
    ) -> None:
        self.name = config.name
        self.steps = plan_steps(config)
        self._resolve = resolve
        self._stats = stats
        self._batched = config.max_batch_size > 0
        self._input_types = {
            t.name: config_to_wire(mc.DataType.Name(t.data_type)) for t in config.input
        }
        self._runs = 0
        self._closing = False
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def in_flight(self) -> int:
        return self._runs

    def enqueue(
        self,
        request: InferRequest,
        wanted: Sequence[str],
        on_done: Callable[[EnsembleResult], None],
    ) -> None:
        """Run a validated request; `on_done` gets the `wanted` ensemble tensors or an error,
        exactly once."""
        if self._closing:
            self._stats.record_failure(0, FailureReason.OTHER)
            on_done(ServeError.unavailable(f"model '{self.name}' is being unloaded"))
            return
        run = _Run(request, wanted, on_done, dict(self._input_types))
        self._runs += 1
        self._idle.clear()
        self._advance(run)

    def _advance(self, run: _Run) -> None:
        """Start every step whose inputs now all exist."""
        for index, step in enumerate(self.steps):
            if run.finished:
                return
            if index in run.started or not all(t in run.tensors for t in step.inputs.values()):
                continue
            run.started.add(index)
            self._start(run, step)
        if not run.finished and run.in_flight == 0:
            missing = [name for name in run.wanted if name not in run.tensors]
            self._fail(
                run, ServeError.internal(f"in ensemble '{self.name}', no step produces {missing}")
            )

    def _start(self, run: _Run, step: Step) -> None:
        inputs: dict[str, np.ndarray] = {}
        datatypes: dict[str, str] = {}
        for key, tensor in step.inputs.items():
            inputs[key] = run.tensors[tensor]
            datatypes[key] = run.datatypes[tensor]
        request = InferRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            inputs=inputs,
            input_datatypes=datatypes,
            requested_outputs=[RequestedOutput(key) for key in step.outputs],
            id=run.request.id,
            parameters=dict(run.request.parameters),  # sequence ids, priority, timeout
            on_stats=run.add_step_times,
            cancellation=run.request.cancellation,  # the ensemble's client gone: its steps too
        )
        run.in_flight += 1
        try:
            self._resolve(step.model_name, step.model_version).submit(
                request, lambda result: self._step_done(run, step, result)
            )
        except ServeError as exc:
            run.in_flight -= 1
            self._fail(run, self._step_error(step, exc))

    def _step_done(self, run: _Run, step: Step, result: StepResult) -> None:
        run.in_flight -= 1
        if run.finished:
            self._note_idle(run)
            return
        if isinstance(result, ServeError):
            self._fail(run, self._step_error(step, result))
            return
        for output in result.outputs:
            tensor = step.outputs.get(output.name)
            if tensor is None:
                continue
            data = output.data
            if output.datatype == "BYTES" and data.dtype != np.object_:
                data = data.astype(np.object_)
            run.tensors[tensor] = data
            run.datatypes[tensor] = output.datatype
        if all(name in run.tensors for name in run.wanted):
            self._succeed(run)
            return
        self._advance(run)

    def _step_error(self, step: Step, exc: ServeError) -> ServeError:
        return ServeError(exc.kind, f"in ensemble '{self.name}', {step.label}: {exc.message}")

    def _succeed(self, run: _Run) -> None:
        run.finished = True
        now = time.monotonic_ns()
        rows = 1
        if self._batched:
            for array in run.request.inputs.values():
                rows = int(array.shape[0]) if array.ndim else 1
                break
        times = run.times
        # As Triton reports an ensemble: its own (nil) queue time, its steps' compute times.
        self._stats.record_execution(
            rows, times.compute_input_ns, times.compute_infer_ns, times.compute_output_ns
        )
        self._stats.record_successes(1, now - run.start_ns, 0, times)
        produced = {name: run.tensors[name] for name in run.wanted}
        self._complete(run, produced)

    def _fail(self, run: _Run, error: ServeError) -> None:
        run.finished = True
        self._stats.record_failure(time.monotonic_ns() - run.start_ns, FailureReason.BACKEND)
        self._complete(run, error)

    def _complete(self, run: _Run, result: EnsembleResult) -> None:
        try:
            run.on_done(result)
        except Exception:  # a broken callback must not stall the ensemble
            log.exception("completion callback failed for request '%s'", run.request.id)
        self._note_idle(run)

    def _note_idle(self, run: _Run) -> None:
        if run.finished and run.in_flight == 0:
            self._runs -= 1
            if self._runs == 0:
                self._idle.set()

    async def close(self) -> None:
        """Stop accepting and wait for the requests under way (their steps included)."""
        self._closing = True
        await self._idle.wait()
