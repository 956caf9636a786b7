"""A python-backend model instance: the server side of one stub process."""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.invariant import present
from protocol.proto_json import message_to_json
from serve.backends.base import (
    BatchTimes,
    InstanceContext,
    ModelInstance,
    ProducedOutputs,
    RequestResult,
    Rescheduled,
)
from serve.backends.python.calls import ModelCallHandler
from serve.backends.python.environment import execution_env_paths
from serve.backends.python.inbox import Inbox
from serve.backends.python.process import StubExited, StubProcess
from serve.backends.python.protocol import (
    ArenaUpdate,
    BatchFailed,
    Call,
    Execute,
    Failed,
    Finalize,
    Grow,
    Init,
    Probe,
    ProbeResult,
    RequestMsg,
    ResponseMsg,
    Results,
    Streamed,
    TensorMeta,
    arena_array,
    place,
)
from serve.backends.python.response import ERROR_KINDS
from serve.backends.python.shm import Arena
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest

log = logging.getLogger(__name__)

# Request parameters the server interprets itself; the model sees the others (Triton does this).
_RESERVED_PARAMETERS = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output"}
)
_SEQUENCE_START = 1
_SEQUENCE_END = 2
_RESPONSE_FINAL = 1  # pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
CONTROL = "control"  # the inbox key of the stub's answers to Init, Execute and Finalize
_PUMP_S = 0.05  # how long the stream pump reads before looking at its state again
PROBE_TIMEOUT_S = 5.0  # a model's is_ready() answers within this, or it is not ready
READY_FOR_S = 1.0  # how long an is_ready() answer stands before it is asked again
# Batches with more input bytes are copied into shared memory on the instance's thread.
_INLINE_INPUT_BYTES = 1 << 20


class PythonModelInstance(ModelInstance):
    """Runs one instance of a Triton python model in its own stub process.

    Tensors cross in two shared-memory arenas owned here: inputs (written here, read by the
    stub) and outputs (written by the stub, copied out here). The thread that waits on the stub
    reads its messages (`Inbox`): the batch's answer, and on the way a decoupled model's
    streamed responses and the model's calls to the server, handled as they come. A decoupled
    batch ends when execute returns; its requests stay open until their final flag, read by a
    pump thread while no batch runs. If the stub dies, the requests it held fail and the next
    batch starts a new stub.
    """

    load_timeout_s = 60.0
    finalize_timeout_s = 30.0
    stop_timeout_s = 5.0

    def __init__(self, context: InstanceContext) -> None:
        super().__init__(context)
        self._name = context.model_name
        self._output_names = [output.name for output in context.config.output]
        self._decoupled = context.config.model_transaction_policy.decoupled
        self._stub: StubProcess | None = None
        self._inbox: Inbox | None = None
        self._inputs = Arena()
        self._outputs = Arena()
        self._loaded = False
        self._lock = threading.Lock()  # unload may come from another thread than execute
        self._next_slot = 0  # request slots, unique over the instance's life
        self._streams: dict[int, InferRequest] = {}  # a decoupled model's open requests
        self._running: tuple[int, Sequence[InferRequest]] = (0, ())  # first slot, the batch
        self._streams_lock = threading.Lock()
        # Errors streamed while the batch's execute runs: they count as the request's result.
        self._executing = range(0)
        self._early_errors: dict[int, ServeError] = {}
        self._pump: threading.Thread | None = None
        self._pump_wake = threading.Event()
        # Readiness from the model's is_ready(), when it has one: the last answer, and when.
        self._probes = False
        self._probe_ids = itertools.count(1)
        self._probe_lock = threading.Lock()  # one probe at a time
        self._ready = True
        self._ready_at = 0.0

    @property
    def pid(self) -> int | None:
        """The stub's process id, while one runs."""
        stub = self._stub
        return None if stub is None else stub.pid

    def load(self) -> None:
        with self._lock:
            try:
                self._stub = self._start()
            except BaseException:
                self._inputs.close()
                self._outputs.close()
                raise
            self._loaded = True
            if self._probes:
                self._probe()  # ready from the start only if the model says so
            if self._decoupled:
                self._pump = threading.Thread(
                    target=self._pump_streams, name=f"{self.context.instance_name}-streams"
                )
                self._pump.daemon = True
                self._pump.start()

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        with self._lock:
            try:
                stub = self._running_stub()
                return self._round_trip(stub, requests, times)
            except ServeError as exc:
                return [exc] * len(requests)
            except Exception as exc:
                # Unexpected here means the conversation may be out of step: start afresh.
                log.exception("%s: execute failed", self.context.instance_name)
                self._drop_stub(ServeError.internal(f"{self._name}: {type(exc).__name__}"))
                error = ServeError.internal(f"{self._name}: {type(exc).__name__}: {exc}")
                return [error] * len(requests)

    def unload(self) -> None:
        if not self._lock.acquire(timeout=self.finalize_timeout_s):
            stub = self._stub
            if stub is not None:
                stub.kill()  # a batch is stuck in the model: its execute returns errors now
            self._lock.acquire()
        try:
            self._loaded = False
            self._pump_wake.set()
            stub, inbox = self._stub, self._inbox
            self._stub = self._inbox = None
            if stub is not None and inbox is not None:
                finalized = self._finalize(stub, inbox)
                stub.stop(self.stop_timeout_s, ask_first=finalized)
                self._release(stub)
            self._fail_streams(ServeError.unavailable(f"{self._name}: the model was unloaded"))
            self._inputs.close()
            self._outputs.close()
        finally:
            self._lock.release()
        if self._pump is not None:
            self._pump.join(self.stop_timeout_s)

    def ready(self) -> bool:
        """Loaded, and, when the model defines is_ready(), its last answer: a probe older
        than READY_FOR_S is renewed in the background (readiness never waits on the model)."""
        if not self._loaded:
            return False
        if not self._probes:
            return True
        if time.monotonic() - self._ready_at > READY_FOR_S and self._probe_lock.acquire(
            blocking=False
        ):
            threading.Thread(target=self._probe_and_release, daemon=True).start()
        return self._ready

    def _probe_and_release(self) -> None:
        try:
            self._probe()
        finally:
            self._probe_lock.release()

    def _probe(self) -> None:
        """Ask the model's is_ready() (at most PROBE_TIMEOUT_S; no answer is not ready)."""
        stub, inbox = self._stub, self._inbox
        ready = False
        if stub is not None and inbox is not None:
            probe_id = next(self._probe_ids)
            try:
                stub.send(Probe(probe_id))
                answer: ProbeResult = inbox.wait(("probe", probe_id), PROBE_TIMEOUT_S)
                ready = answer.ready
                if answer.error:
                    log.warning("%s: is_ready: %s", self.context.instance_name, answer.error)
            except TimeoutError:
                log.warning(
                    "%s: is_ready did not answer within %g s",
                    self.context.instance_name,
                    PROBE_TIMEOUT_S,
                )
            except StubExited as exc:
                log.warning("%s: %s", self.context.instance_name, exc)
        self._ready = ready
        self._ready_at = time.monotonic()

    # -- the stub's life -----------------------------------------------------------------------

    def _start(self) -> StubProcess:
        self._inputs.ensure(0)
        self._outputs.ensure(0)
        stub = StubProcess.start(execution_env_paths(self.context.config, self.context.model_dir))
        try:
            init = Init(
                str(self.context.model_path),
                self._initialize_args(),
                self._inputs.ref,
                self._outputs.ref,
            )
            # initialize() may call the server already (metrics, BLS, readiness).
            calls = ModelCallHandler(
                stub, self.context, owner=_owner(stub), is_cancelled=self._slot_cancelled
            )
            route = functools.partial(self._route, calls)
            inbox = Inbox(stub.recv, route)
            stub.send(init)
            reply = inbox.wait(CONTROL, self.load_timeout_s)
        except StubExited as exc:
            self._stop_failed(stub)
            raise ServeError.unavailable(f"{self._name}: {exc} during load") from None
        except TimeoutError:
            self._stop_failed(stub, ask_first=False)
            raise ServeError.unavailable(
                f"{self._name}: the model did not load within {self.load_timeout_s:g} s"
            ) from None
        if isinstance(reply, Failed):
            self._stop_failed(stub)
            raise ServeError.unavailable(f"{self._name}: {reply.reason}")
        self._inbox = inbox
        self._probes = bool(getattr(reply, "probes", False))
        return stub

    def _stop_failed(self, stub: StubProcess, ask_first: bool = True) -> None:
        stub.stop(self.stop_timeout_s, ask_first=ask_first)
        self._release(stub)

    def _initialize_args(self) -> dict[str, str]:
        context = self.context
        return {
            "model_config": json.dumps(message_to_json(context.config)),
            "model_instance_kind": context.kind.removeprefix("KIND_"),
            "model_instance_name": context.instance_name,
            "model_instance_device_id": str(context.device_id),
            "model_repository": str(context.model_dir),
            "model_version": str(context.model_version),
            "model_name": context.model_name,
        }

    def _running_stub(self) -> StubProcess:
        if self._stub is not None and self._inbox is not None and self._inbox.broken is not None:
            self._drop_stub(ServeError.internal(f"{self._name}: {self._inbox.broken}"))
        if self._stub is None:
            if not self._loaded:
                raise ServeError.unavailable(f"{self._name}: instance is not loaded")
            log.warning("%s: restarting the python stub process", self.context.instance_name)
            self._stub = self._start()
        return self._stub

    def _drop_stub(self, error: ServeError) -> None:
        stub, self._stub, self._inbox = self._stub, None, None
        if stub is not None:
            stub.stop(self.stop_timeout_s)
            self._release(stub)
        self._fail_streams(error)

    def _release(self, stub: StubProcess) -> None:
        if self.context.custom_metrics is not None:
            self.context.custom_metrics.release(_owner(stub))

    def _finalize(self, stub: StubProcess, inbox: Inbox) -> bool:
        """Run the model's finalize; False when the stub did not answer."""
        try:
            stub.send(Finalize())
            reply = inbox.wait(CONTROL, self.finalize_timeout_s)
        except (StubExited, TimeoutError) as exc:
            log.warning("%s: finalize: %s", self.context.instance_name, exc)
            return False
        error = getattr(reply, "error", None)
        if error:
            log.warning("%s: %s", self.context.instance_name, error)
        return True

    # -- one batch -------------------------------------------------------------------------------

    def begin(
        self,
        requests: Sequence[InferRequest],
        times: BatchTimes,
        finish: Callable[[list[RequestResult]], None],
    ) -> bool:
        # The batch's hand-over to the stub is short: doing it on the event loop's thread, and
        # reading the answer there when the socket says it is ready, saves the two thread
        # switches a worker thread costs per batch. Large inputs (their copy into shared
        # memory), a stub to (re)start and decoupled models take the thread.
        stub = self._stub
        inbox = self._inbox
        if (
            self._decoupled
            or stub is None
            or inbox is None
            or inbox.broken is not None
            or _input_bytes(requests) > _INLINE_INPUT_BYTES
            or not self._lock.acquire(blocking=False)
        ):
            return False
        if not inbox.try_lead():  # a readiness probe reads now: the thread waits its turn
            self._lock.release()
            return False
        try:
            batch = self._send_batch(stub, requests, times)
        except StubExited:
            inbox.step_down()
            self._lock.release()
            return False  # the thread's execute restarts the stub and runs the batch
        except BaseException:
            inbox.step_down()
            self._lock.release()
            raise
        loop = asyncio.get_running_loop()
        loop.add_reader(stub.fileno(), self._on_readable, loop, stub, inbox, batch, times, finish)
        return True

    def _on_readable(
        self,
        loop: asyncio.AbstractEventLoop,
        stub: StubProcess,
        inbox: Inbox,
        batch: _Batch,
        times: BatchTimes,
        finish: Callable[[list[RequestResult]], None],
    ) -> None:
        """The stub wrote while a begun batch runs: route it, or end the batch with it."""
        results: list[RequestResult]
        try:
            while True:
                message = stub.recv_ready()
                if not inbox.route(message, CONTROL):
                    pass  # a call, a streamed response or a probe's answer: handled
                elif isinstance(message, Grow):
                    self._grow_outputs(stub, message.nbytes)
                else:
                    break
                if not stub.pending:
                    return  # the socket says when more comes
            loop.remove_reader(stub.fileno())
            results = self._finish_batch(batch, message, times)
        except StubExited as exc:
            loop.remove_reader(stub.fileno())
            inbox.fail(exc)
            log.warning("%s: %s", self.context.instance_name, exc)
            error = ServeError.internal(f"{self._name}: {exc}")
            self._drop_stub(error)
            results = [error] * batch.count
        except ServeError as exc:
            results = [exc] * batch.count
        except Exception as exc:
            loop.remove_reader(stub.fileno())
            log.exception("%s: execute failed", self.context.instance_name)
            self._drop_stub(ServeError.internal(f"{self._name}: {type(exc).__name__}"))
            results = [ServeError.internal(f"{self._name}: {type(exc).__name__}: {exc}")]
            results *= batch.count
        inbox.step_down()
        self._lock.release()
        finish(results)

    def _round_trip(
        self, stub: StubProcess, requests: Sequence[InferRequest], times: BatchTimes
    ) -> list[RequestResult]:
        inbox = present(self._inbox, "a stub executes only once started")
        try:
            batch = self._send_batch(stub, requests, times)
            reply = inbox.wait(CONTROL)
            while isinstance(reply, Grow):
                self._grow_outputs(stub, reply.nbytes)
                reply = inbox.wait(CONTROL)
        except StubExited as exc:
            log.warning("%s: %s", self.context.instance_name, exc)
            error = ServeError.internal(f"{self._name}: {exc}")
            self._drop_stub(error)
            raise error from None
        return self._finish_batch(batch, reply, times)

    def _grow_outputs(self, stub: StubProcess, nbytes: int) -> None:
        """Answer the stub's Grow: a bigger output arena."""
        self._outputs.ensure(nbytes)
        stub.send(ArenaUpdate(self._outputs.ref))

    def _send_batch(
        self, stub: StubProcess, requests: Sequence[InferRequest], times: BatchTimes
    ) -> _Batch:
        start = time.perf_counter_ns()
        messages = self._write_inputs(requests)
        first_slot = self._next_slot
        self._next_slot += len(requests)
        self._running = (first_slot, requests)
        if self._decoupled:
            with self._streams_lock:
                for index, request in enumerate(requests):
                    self._streams[first_slot + index] = request
                self._executing = range(first_slot, first_slot + len(requests))
        sent = time.perf_counter_ns()
        times.compute_input_ns = sent - start
        stub.send(Execute(self._inputs.ref, self._outputs.ref, messages, first_slot))
        return _Batch(first_slot, len(requests), sent)

    def _finish_batch(self, batch: _Batch, reply: Any, times: BatchTimes) -> list[RequestResult]:
        """The batch's results from the stub's answer (raises ServeError for a failed batch)."""
        received = time.perf_counter_ns()
        self._running = (0, ())
        if getattr(reply, "inputs_retained", False):
            self._inputs.close()  # the stub keeps its mapping; the next batch gets a new arena
        if isinstance(reply, BatchFailed):
            error = ServeError.internal(f"{self._name}: {reply.reason}")
            self._fail_streams(error, range(batch.first_slot, batch.first_slot + batch.count))
            raise error
        if not isinstance(reply, Results):
            raise ServeError.internal(f"{self._name}: unexpected stub reply {type(reply).__name__}")
        if self._decoupled:
            with self._streams_lock:
                results: list[RequestResult] = [
                    self._early_errors.pop(slot, {}) for slot in self._executing
                ]
                self._executing = range(0)
                for index in reply.rescheduled:
                    # Its next execution gets a slot of its own; one that failed or had its
                    # final flag already is not run again.
                    slot = batch.first_slot + index
                    ended = isinstance(results[index], ServeError)
                    if not ended and self._streams.pop(slot, None) is not None:
                        results[index] = Rescheduled()
            self._pump_wake.set()  # responses may still come after execute returned
        else:
            results = [self._read_response(response) for response in reply.responses]
            for index in reply.rescheduled:
                results[index] = Rescheduled()
        times.compute_infer_ns = received - batch.sent_ns
        times.compute_output_ns = time.perf_counter_ns() - received
        return results

    def _write_inputs(self, requests: Sequence[InferRequest]) -> list[RequestMsg]:
        """Copy every fixed-size input into the input arena; BYTES inputs ride in the message."""
        fixed = [
            array
            for request in requests
            for array in request.inputs.values()
            if array.dtype.kind not in "OSU"
        ]
        offsets, end = place([array.nbytes for array in fixed])
        self._inputs.ensure(end)
        buf = self._inputs.buf
        slots = iter(offsets)
        messages = []
        for request in requests:
            metas = []
            for name, array in request.inputs.items():
                if array.dtype.kind in "OSU":
                    metas.append(TensorMeta(name, "|O", array.shape, -1, array))
                    continue
                meta = TensorMeta(name, array.dtype.newbyteorder("=").str, array.shape, next(slots))
                np.copyto(arena_array(buf, meta), array)
                metas.append(meta)
            messages.append(self._request_message(request, metas))
        return messages

    def _request_message(self, request: InferRequest, metas: list[TensorMeta]) -> RequestMsg:
        params = request.parameters
        flags = (_SEQUENCE_START if params.get("sequence_start") else 0) | (
            _SEQUENCE_END if params.get("sequence_end") else 0
        )
        others = {k: v for k, v in params.items() if k not in _RESERVED_PARAMETERS}
        if request.requested_outputs is None:
            outputs = self._output_names
        else:
            outputs = [output.name for output in request.requested_outputs]
        return RequestMsg(
            request_id=request.id,
            correlation_id=_correlation_id(params.get("sequence_id", 0)),
            flags=flags,
            parameters=json.dumps(others, default=str) if others else "{}",
            requested_outputs=outputs,
            inputs=metas,
            timeout=request.timeout_us or 0,
        )

    def _read_response(self, response: ResponseMsg) -> RequestResult:
        if response.error is not None:
            kind = ERROR_KINDS.get(response.error_code, ErrorKind.INTERNAL)
            return ServeError(kind, f"{self._name}: {response.error}")
        outputs: dict[str, np.ndarray] = {}
        buf = self._outputs.buf
        for meta in response.outputs:
            if meta.data is not None:
                outputs[meta.name] = meta.data
            else:
                outputs[meta.name] = arena_array(buf, meta).copy()
        if response.parameters:
            return ProducedOutputs(outputs, json.loads(response.parameters))
        return outputs

    # -- messages the stub sends on its own ------------------------------------------------------

    def _route(self, calls: ModelCallHandler, message: Any) -> Hashable | None:
        if isinstance(message, Streamed):
            self._deliver(message)
            return None
        if isinstance(message, Call):
            calls.handle(message)
            return None
        if isinstance(message, ProbeResult):
            return ("probe", message.probe_id)
        return CONTROL

    def _slot_cancelled(self, slot: int) -> bool:
        """The model's is_cancelled(): whether the request in `slot` (of the batch running, or
        a decoupled model's open one) was cancelled; False once it has ended."""
        request = self._streams.get(slot)
        if request is None:
            first, running = self._running
            if 0 <= slot - first < len(running):
                request = running[slot - first]
        return request is not None and request.cancelled

    def _deliver(self, message: Streamed) -> None:
        final = bool(message.flags & _RESPONSE_FINAL)
        with self._streams_lock:
            request = self._streams.pop(message.slot, None) if final else None
            if not final:
                request = self._streams.get(message.slot)
        if request is None:
            log.warning(
                "%s: a response for a request that has ended was dropped",
                self.context.instance_name,
            )
            return
        result = None if message.response is None else self._read_response(message.response)
        if isinstance(result, ServeError):
            with self._streams_lock:
                if message.slot in self._executing:
                    self._early_errors.setdefault(message.slot, result)
        if request.on_response is not None:
            request.on_response(result, final)

    def _fail_streams(self, error: ServeError, slots: Sequence[int] | range | None = None) -> None:
        """End open decoupled requests (all, or those in `slots`) with `error`."""
        with self._streams_lock:
            keys = (
                list(self._streams) if slots is None else [s for s in slots if s in self._streams]
            )
            ended = [self._streams.pop(slot) for slot in keys]
        for request in ended:
            if request.on_response is not None:
                request.on_response(error, True)

    def _pump_streams(self) -> None:
        """Keep reading while a decoupled model's requests are open and no batch runs."""
        while self._loaded:
            self._pump_wake.wait()
            with self._streams_lock:
                idle = not self._streams
            inbox = self._inbox
            if idle or inbox is None:
                self._pump_wake.clear()
                with self._streams_lock:
                    if self._streams:
                        self._pump_wake.set()
                continue
            try:
                inbox.pump(_PUMP_S)
            except StubExited as exc:
                self._fail_streams(ServeError.internal(f"{self._name}: {exc}"))
            except Exception:
                log.exception("%s: reading streamed responses", self.context.instance_name)
                self._fail_streams(ServeError.internal(f"{self._name}: stub connection failed"))


@dataclass(frozen=True, slots=True)
class _Batch:
    first_slot: int
    count: int
    sent_ns: int  # when the stub was handed the batch (perf_counter_ns)


def _input_bytes(requests: Sequence[InferRequest]) -> int:
    return sum(array.nbytes for request in requests for array in request.inputs.values())


def _owner(stub: StubProcess) -> Hashable:
    """Who holds a stub's custom metrics in the registry."""
    return ("stub", stub.pid)


def _correlation_id(value: Any) -> int | str:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    return str(value)
