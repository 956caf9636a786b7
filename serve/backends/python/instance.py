"""A python-backend model instance: the server side of one stub process."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from google.protobuf import json_format

from serve.backends.base import BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.python.environment import execution_env_paths
from serve.backends.python.process import StubExited, StubProcess, StubTimeout
from serve.backends.python.protocol import (
    ArenaUpdate,
    BatchFailed,
    Execute,
    Failed,
    Finalize,
    Grow,
    Init,
    RequestMsg,
    ResponseMsg,
    Results,
    Streamed,
    TensorMeta,
    arena_array,
    place,
)
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

# pb_utils.TritonError codes -> error kinds; the other codes are internal errors.
_ERROR_KINDS = {
    2: ErrorKind.NOT_FOUND,
    3: ErrorKind.INVALID_ARGUMENT,
    4: ErrorKind.UNAVAILABLE,
    5: ErrorKind.UNSUPPORTED,
    6: ErrorKind.ALREADY_EXISTS,
}


class PythonModelInstance(ModelInstance):
    """Runs one instance of a Triton python model in its own stub process.

    Tensors cross in two shared-memory arenas owned here: inputs (written here, read by the
    stub) and outputs (written by the stub, copied out here). If the stub dies, the batch in
    flight fails and the next batch starts a new stub.
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
        self._inputs = Arena()
        self._outputs = Arena()
        self._loaded = False
        self._lock = threading.Lock()  # unload may come from another thread than execute

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
                self._drop_stub()
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
            stub, self._stub = self._stub, None
            if stub is not None:
                finalized = self._finalize(stub)
                stub.stop(self.stop_timeout_s, ask_first=finalized)
            self._inputs.close()
            self._outputs.close()
        finally:
            self._lock.release()

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
            stub.send(init)
            reply = stub.recv(self.load_timeout_s)
        except StubExited as exc:
            stub.stop(self.stop_timeout_s)
            raise ServeError.unavailable(f"{self._name}: {exc} during load") from None
        except StubTimeout:
            stub.stop(self.stop_timeout_s, ask_first=False)
            raise ServeError.unavailable(
                f"{self._name}: the model did not load within {self.load_timeout_s:g} s"
            ) from None
        if isinstance(reply, Failed):
            stub.stop(self.stop_timeout_s)
            raise ServeError.unavailable(f"{self._name}: {reply.reason}")
        return stub

    def _initialize_args(self) -> dict[str, str]:
        context = self.context
        return {
            "model_config": json_format.MessageToJson(
                context.config, preserving_proto_field_name=True
            ),
            "model_instance_kind": "CPU",
            "model_instance_name": context.instance_name,
            "model_instance_device_id": str(context.device_id),
            "model_repository": str(context.model_dir),
            "model_version": str(context.model_version),
            "model_name": context.model_name,
        }

    def _running_stub(self) -> StubProcess:
        if self._stub is None:
            if not self._loaded:
                raise ServeError.unavailable(f"{self._name}: instance is not loaded")
            log.warning("%s: restarting the python stub process", self.context.instance_name)
            self._stub = self._start()
        return self._stub

    def _round_trip(
        self, stub: StubProcess, requests: Sequence[InferRequest], times: BatchTimes
    ) -> list[RequestResult]:
        start = time.perf_counter_ns()
        messages = self._write_inputs(requests)
        sent = time.perf_counter_ns()
        if self._decoupled:
            return self._stream(stub, requests, messages)
        try:
            stub.send(Execute(self._inputs.ref, self._outputs.ref, messages))
            reply = stub.recv()
            while isinstance(reply, Grow):
                self._outputs.ensure(reply.nbytes)
                stub.send(ArenaUpdate(self._outputs.ref))
                reply = stub.recv()
        except StubExited as exc:
            self._drop_stub()
            log.warning("%s: %s", self.context.instance_name, exc)
            raise ServeError.internal(f"{self._name}: {exc}") from None
        received = time.perf_counter_ns()
        if getattr(reply, "inputs_retained", False):
            self._inputs.close()  # the stub keeps its mapping; the next batch gets a new arena
        if isinstance(reply, BatchFailed):
            raise ServeError.internal(f"{self._name}: {reply.reason}")
        if not isinstance(reply, Results):
            raise ServeError.internal(f"{self._name}: unexpected stub reply {type(reply).__name__}")
        results = [self._read_response(response) for response in reply.responses]
        times.compute_input_ns = sent - start
        times.compute_infer_ns = received - sent
        times.compute_output_ns = time.perf_counter_ns() - received
        return results

    def _stream(
        self, stub: StubProcess, requests: Sequence[InferRequest], messages: list[RequestMsg]
    ) -> list[RequestResult]:
        """A decoupled model's batch: hand each response to its request's `on_response` as it
        comes, until execute has returned and every request has had its final flag. Each
        request's result is {} or the first error it got (for the statistics)."""
        results: list[RequestResult] = [{} for _ in requests]
        open_requests = set(range(len(requests)))
        executed = False
        try:
            stub.send(Execute(self._inputs.ref, self._outputs.ref, messages))
            while open_requests or not executed:
                reply = stub.recv()
                if isinstance(reply, Streamed):
                    self._deliver(requests, results, reply)
                    if reply.flags & _RESPONSE_FINAL:
                        open_requests.discard(reply.position)
                    continue
                if getattr(reply, "inputs_retained", False):
                    self._inputs.close()
                if isinstance(reply, Results):
                    executed = True
                elif isinstance(reply, BatchFailed):
                    error = ServeError.internal(f"{self._name}: {reply.reason}")
                    for index in open_requests:
                        self._fail(requests[index], results, index, error)
                    return results
                else:
                    raise ServeError.internal(
                        f"{self._name}: unexpected stub reply {type(reply).__name__}"
                    )
        except StubExited as exc:
            self._drop_stub()
            log.warning("%s: %s", self.context.instance_name, exc)
            error = ServeError.internal(f"{self._name}: {exc}")
            for index in open_requests:
                self._fail(requests[index], results, index, error)
        return results

    def _deliver(
        self, requests: Sequence[InferRequest], results: list[RequestResult], reply: Streamed
    ) -> None:
        final = bool(reply.flags & _RESPONSE_FINAL)
        result = None if reply.response is None else self._read_response(reply.response)
        if isinstance(result, ServeError) and not isinstance(results[reply.position], ServeError):
            results[reply.position] = result
        on_response = requests[reply.position].on_response
        if on_response is not None:
            on_response(result, final)

    @staticmethod
    def _fail(
        request: InferRequest, results: list[RequestResult], index: int, error: ServeError
    ) -> None:
        results[index] = error
        if request.on_response is not None:
            request.on_response(error, True)

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
        )

    def _read_response(self, response: ResponseMsg) -> RequestResult:
        if response.error is not None:
            kind = _ERROR_KINDS.get(response.error_code, ErrorKind.INTERNAL)
            return ServeError(kind, f"{self._name}: {response.error}")
        outputs: dict[str, np.ndarray] = {}
        buf = self._outputs.buf
        for meta in response.outputs:
            if meta.data is not None:
                outputs[meta.name] = meta.data
            else:
                outputs[meta.name] = arena_array(buf, meta).copy()
        return outputs

    def _drop_stub(self) -> None:
        stub, self._stub = self._stub, None
        if stub is not None:
            stub.stop(self.stop_timeout_s)

    def _finalize(self, stub: StubProcess) -> bool:
        """Run the model's finalize; False when the stub did not answer."""
        try:
            stub.send(Finalize())
            reply = stub.recv(self.finalize_timeout_s)
        except (StubExited, StubTimeout) as exc:
            log.warning("%s: finalize: %s", self.context.instance_name, exc)
            return False
        error = getattr(reply, "error", None)
        if error:
            log.warning("%s: %s", self.context.instance_name, error)
        return True


def _correlation_id(value: Any) -> int | str:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    return str(value)
