"""gRPC infer requests (ModelInferRequest, serialized once) and the load generator's calls.

A request is built and serialized once per payload; a streamed request gets its id appended
on the wire (protobuf merges a repeated scalar field: the last one wins), so the payload is
never serialized again. `UnaryCaller` sends ModelInfer calls over a shared channel;
`StreamCaller` owns one ModelStreamInfer stream and keeps one request on it at a time,
checking that each response carries the id of the request it answers. Both report through
the same callback and raw record tuple as `InferConnection`, and both answer every request
sent with exactly one record.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from time import perf_counter_ns
from typing import Any

import grpc
from tritonclient.grpc import service_pb2 as pb

from protocol.client.grpc import CHANNEL_OPTIONS, is_transport_failure, rpc_error_message
from protocol.client.infer_body import InferInput, SharedMemoryRef
from protocol.client.infer_connection import RawRecord
from protocol.headers import SHARED_MEMORY_BYTE_SIZE, SHARED_MEMORY_OFFSET, SHARED_MEMORY_REGION
from protocol.tensors import tensor_bytes

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
MODEL_STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
_ID_TAG = b"\x1a"  # ModelInferRequest.id: field 3, length-delimited

Metadata = tuple[tuple[str, str], ...]


def encode_grpc_infer_request(
    model: str,
    version: str,
    inputs: Sequence[InferInput],
    outputs: Sequence[str],
    shared_memory: Mapping[str, SharedMemoryRef] | None = None,
) -> bytes:
    """A serialized ModelInferRequest: the inputs' data in raw_input_contents (or their
    regions, for the names in `shared_memory`), every output in `outputs` requested."""
    regions = shared_memory or {}
    request = pb.ModelInferRequest(model_name=model, model_version=version)
    for tensor in inputs:
        entry = request.inputs.add(name=tensor.name, datatype=tensor.datatype)
        entry.shape.extend(tensor.shape)
        ref = regions.get(tensor.name)
        if ref is None:
            request.raw_input_contents.append(tensor_bytes(tensor.datatype, tensor.data))
        else:
            _set_region(entry.parameters, ref)
    for name in outputs:
        output = request.outputs.add(name=name)
        ref = regions.get(name)
        if ref is not None:
            _set_region(output.parameters, ref)
    return request.SerializeToString()


def with_request_id(request: bytes, request_id: str) -> bytes:
    """`request` (a serialized ModelInferRequest) with its id set to `request_id`."""
    raw = request_id.encode()
    return request + _ID_TAG + _varint(len(raw)) + raw


def _set_region(parameters: Any, ref: SharedMemoryRef) -> None:
    parameters[SHARED_MEMORY_REGION].string_param = ref.region
    parameters[SHARED_MEMORY_BYTE_SIZE].int64_param = ref.byte_size
    if ref.offset:
        parameters[SHARED_MEMORY_OFFSET].int64_param = ref.offset


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def open_channel(address: str) -> grpc.aio.Channel:
    """A plaintext grpc.aio channel to `address` (host:port) with no message size limit either
    way; it connects lazily (see `wait_connected`)."""
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)


async def wait_connected(channel: grpc.aio.Channel, timeout_s: float) -> str:
    """Connect `channel`; "" once ready, else why not (refused, timed out)."""
    state = channel.get_state(try_to_connect=True)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while state != grpc.ChannelConnectivity.READY:
        if state in (
            grpc.ChannelConnectivity.TRANSIENT_FAILURE,
            grpc.ChannelConnectivity.SHUTDOWN,
        ):
            return "the connection failed"
        remaining = deadline - loop.time()
        if remaining <= 0:
            return f"no connection within {timeout_s:g} s"
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(channel.wait_for_state_change(state), remaining)
        state = channel.get_state(try_to_connect=True)
    return ""


Callback = Callable[[Any, RawRecord], None]


class _Caller(abc.ABC):
    """What the load driver needs of a connection: send, state, close."""

    def __init__(self, address: str, on_done: Callback) -> None:
        self._address = address
        self._on_done = on_done
        self._closed = False
        self.was_open = True  # False once a call failed in transit: the owner backs off
        self._busy = False
        self._start = 0
        self._send_ns = 0

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def busy(self) -> bool:
        return self._busy

    def connect_failed(self, reason: str) -> None:
        """The channel did not connect: a request in flight fails now with `reason`."""
        self.was_open = False  # before close() reports: the owner then backs off
        self.close(f"cannot reach the server at {self._address}: {reason}")

    @abc.abstractmethod
    def close(self, reason: str = "") -> None:
        """Close; a request in flight fails now with `reason`."""

    def _finish(self, ok: bool, error: str) -> None:
        end = perf_counter_ns()
        start = self._start or end
        self._busy = False
        self._start = 0
        self._on_done(self, (start, end, self._send_ns, 0, ok, error))


class UnaryCaller(_Caller):
    """ModelInfer calls on a shared channel, one at a time."""

    def __init__(
        self,
        address: str,
        channel: grpc.aio.Channel,
        metadata: Metadata,
        on_done: Callback,
    ) -> None:
        super().__init__(address, on_done)
        self._channel = channel
        self._method = channel.unary_unary(MODEL_INFER)  # bytes in, bytes out
        self._metadata = metadata
        self._call: grpc.aio.UnaryUnaryCall[Any, Any] | None = None
        self._waiter: asyncio.Task[None] | None = None  # held: the loop keeps weak references

    def send(self, request: bytes) -> None:
        if self._closed:
            raise RuntimeError("send() on a closed UnaryCaller")
        self._busy = True
        start = perf_counter_ns()
        self._call = self._method(request, metadata=self._metadata or None)
        self._send_ns = perf_counter_ns() - start
        self._start = start
        self._waiter = asyncio.get_running_loop().create_task(self._complete(self._call))

    def close(self, reason: str = "") -> None:
        self._closed = True
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
        if self._busy:
            self._finish(False, reason or "the client cancelled the call before the response")

    async def _complete(self, call: grpc.aio.UnaryUnaryCall[Any, Any]) -> None:
        try:
            await call
        except asyncio.CancelledError:
            return  # close() has reported it
        except grpc.aio.AioRpcError as exc:
            if call is not self._call:
                return
            self._call = None
            if is_transport_failure(exc, self._channel):
                self._closed = True
                self.was_open = False
                self._finish(
                    False, f"the server at {self._address} failed: {rpc_error_message(exc)}"
                )
            else:
                self._finish(False, rpc_error_message(exc))
            return
        if call is self._call:
            self._call = None
            self._finish(True, "")


class StreamCaller(_Caller):
    """One ModelStreamInfer stream: a request at a time, each with its own id."""

    def __init__(
        self,
        address: str,
        channel: grpc.aio.Channel,
        metadata: Metadata,
        on_done: Callback,
        stream_id: int,
    ) -> None:
        super().__init__(address, on_done)
        self._prefix = f"{stream_id}-"
        self._count = 0
        self._expected = ""
        self._queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._channel = channel
        method = channel.stream_stream(
            MODEL_STREAM_INFER, response_deserializer=pb.ModelStreamInferResponse.FromString
        )
        self._call = method(self._requests(), metadata=metadata or None)
        self._reader = asyncio.get_running_loop().create_task(self._read())

    def send(self, request: bytes) -> None:
        if self._closed:
            raise RuntimeError("send() on a closed StreamCaller")
        self._busy = True
        self._count += 1
        start = perf_counter_ns()
        self._expected = self._prefix + str(self._count)
        self._queue.put_nowait(with_request_id(request, self._expected))
        self._send_ns = perf_counter_ns() - start
        self._start = start

    def close(self, reason: str = "") -> None:
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)
            self._call.cancel()
            self._reader.cancel()
        if self._busy:
            self._finish(False, reason or "the client closed the stream before the response")

    async def _requests(self) -> AsyncIterator[bytes]:
        while True:
            request = await self._queue.get()
            if request is None:
                return
            yield request

    async def _read(self) -> None:
        try:
            async for response in self._call:
                self._answer(response)
        except asyncio.CancelledError:
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.CANCELLED and self._closed:
                return
            failed_in_transit = is_transport_failure(exc, self._channel)
            self._end(
                f"the stream to the server at {self._address} failed: {rpc_error_message(exc)}",
                failed_in_transit,
            )
            return
        self._end(f"the server at {self._address} ended the stream", False)

    def _answer(self, response: pb.ModelStreamInferResponse) -> None:
        if not self._busy:  # a response nobody asked for: the stream is out of step
            self.close()
            return
        answered = response.infer_response.id
        if answered != self._expected and (answered or not response.error_message):
            self._finish(
                False,
                f"the server answered request '{self._expected}' with the response of"
                f" '{answered}' on the stream",
            )
        elif response.error_message:
            self._finish(False, response.error_message)
        else:
            self._finish(True, "")

    def _end(self, reason: str, in_transit: bool) -> None:
        self._closed = True
        if in_transit:
            self.was_open = False
        if self._busy:
            self._finish(False, reason)
