"""The protocol's gRPC side: control calls shaped like the HTTP client's, infer requests built
once (ids appended on the wire), and the load generator's unary and streaming callers, against
a scripted in-process GRPCInferenceService on a loopback port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import numpy as np
import orjson
import pytest
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from protocol.client import BlockingClient, GrpcClient, HttpClient, open_client
from protocol.client.grpc import parse_grpc_url
from protocol.client.grpc_infer import (
    StreamCaller,
    UnaryCaller,
    encode_grpc_infer_request,
    open_channel,
    with_request_id,
)
from protocol.client.http import Endpoint
from protocol.client.infer_body import SharedMemoryRef, encode_infer_body
from protocol.client.infer_connection import RawRecord
from protocol.errors import ClientError
from protocol.proto_json import message_to_json


class _Tensor:
    def __init__(self, name: str, datatype: str, data: np.ndarray) -> None:
        self.name, self.datatype, self.data = name, datatype, data
        self.shape = tuple(data.shape)


INPUTS = [
    _Tensor("INPUT0", "INT32", np.arange(16, dtype=np.int32).reshape(1, 16)),
    _Tensor("TEXT", "BYTES", np.array([[b"ab", b"c"]], dtype=object)),
]


# requests


def test_infer_request_carries_raw_contents_and_every_output() -> None:
    raw = encode_grpc_infer_request("simple", "1", INPUTS, ["OUTPUT0", "OUTPUT1"])
    request = pb.ModelInferRequest.FromString(raw)
    assert (request.model_name, request.model_version, request.id) == ("simple", "1", "")
    assert [(t.name, t.datatype, list(t.shape)) for t in request.inputs] == [
        ("INPUT0", "INT32", [1, 16]),
        ("TEXT", "BYTES", [1, 2]),
    ]
    assert request.raw_input_contents[0] == np.arange(16, dtype="<i4").tobytes()
    assert request.raw_input_contents[1] == b"\x02\x00\x00\x00ab\x01\x00\x00\x00c"
    assert [o.name for o in request.outputs] == ["OUTPUT0", "OUTPUT1"]


def test_infer_request_names_shared_memory_regions_instead_of_data() -> None:
    refs = {
        "INPUT0": SharedMemoryRef("in0", 64, 128),
        "TEXT": SharedMemoryRef("in1", 11),
        "OUTPUT0": SharedMemoryRef("out0", 4096),
    }
    request = pb.ModelInferRequest.FromString(
        encode_grpc_infer_request("simple", "", INPUTS, ["OUTPUT0"], refs)
    )
    assert len(request.raw_input_contents) == 0
    first = request.inputs[0].parameters
    assert first["shared_memory_region"].string_param == "in0"
    assert first["shared_memory_byte_size"].int64_param == 64
    assert first["shared_memory_offset"].int64_param == 128
    assert "shared_memory_offset" not in request.inputs[1].parameters  # offset 0: left out
    output = request.outputs[0].parameters
    assert output["shared_memory_region"].string_param == "out0"
    assert output["shared_memory_byte_size"].int64_param == 4096


def test_request_id_is_appended_without_reserializing() -> None:
    raw = encode_grpc_infer_request("simple", "", INPUTS, ["OUTPUT0"])
    long_id = "7-" + "9" * 200  # a length past one varint byte
    for request_id in ("1-1", long_id):
        request = pb.ModelInferRequest.FromString(with_request_id(raw, request_id))
        assert request.id == request_id
        assert request.raw_input_contents == pb.ModelInferRequest.FromString(raw).raw_input_contents
    twice = with_request_id(with_request_id(raw, "old"), "new")
    assert pb.ModelInferRequest.FromString(twice).id == "new"


def test_http_body_names_shared_memory_regions() -> None:
    refs = {"INPUT0": SharedMemoryRef("in0", 64, 8), "OUTPUT0": SharedMemoryRef("out0", 100)}
    body, header_length = encode_infer_body(INPUTS[:1], ["OUTPUT0"], shared_memory=refs)
    assert header_length is None  # no binary data follows
    document = orjson.loads(body)
    assert document["inputs"][0]["parameters"] == {
        "shared_memory_region": "in0",
        "shared_memory_byte_size": 64,
        "shared_memory_offset": 8,
    }
    assert "data" not in document["inputs"][0]
    assert document["outputs"] == [
        {
            "name": "OUTPUT0",
            "parameters": {"shared_memory_region": "out0", "shared_memory_byte_size": 100},
        }
    ]


def test_messages_print_as_triton_json_with_numbers() -> None:
    config = mc.ModelConfig(name="m", max_batch_size=8)
    config.input.add(name="A", data_type=mc.TYPE_FP32, dims=[-1, 16])
    config.parameters["k"].string_value = "v"
    document = message_to_json(config)
    assert document["max_batch_size"] == 8
    assert document["input"][0]["dims"] == [-1, 16]
    assert document["input"][0]["data_type"] == "TYPE_FP32"
    assert document["parameters"] == {"k": {"string_value": "v"}}
    stats = pb.ModelStatisticsResponse()
    entry = stats.model_stats.add(name="m", version="1", inference_count=5)
    entry.inference_stats.success.count = 3
    entry.inference_stats.success.ns = 12_000_000_000  # past 32 bits
    entry = message_to_json(stats)["model_stats"][0]
    assert entry["inference_count"] == 5
    assert entry["inference_stats"]["success"] == {"count": 3, "ns": 12_000_000_000}


def test_urls_and_client_choice() -> None:
    assert parse_grpc_url("localhost") == Endpoint("localhost", 8001)
    assert parse_grpc_url("grpc://10.0.0.1:9001") == Endpoint("10.0.0.1", 9001)
    assert isinstance(open_client("grpc", "h:1"), GrpcClient)
    assert isinstance(open_client("http", "h:1"), HttpClient)
    with pytest.raises(ClientError, match="protocol must be one of http, grpc, got 'udp'"):
        open_client("udp", "h:1")


# a scripted server


class _Service(pb_grpc.GRPCInferenceServiceServicer):
    """Answers like Triton for model 'simple'; anything else is NOT_FOUND."""

    def __init__(self) -> None:
        self.loads: list[pb.RepositoryModelLoadRequest] = []
        self.regions: dict[str, pb.SystemSharedMemoryRegisterRequest] = {}
        self.metadata: list[tuple[str, str]] = []
        self.wrong_stream_id = False

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        self.metadata = [(k, v) for k, v in context.invocation_metadata() if k == "x-trace"]
        return pb.ServerMetadataResponse(name="scripted", version="1", extensions=["a", "b"])

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        await _known(request.name, context)
        response = pb.ModelMetadataResponse(name="simple", versions=["1"], platform="x")
        response.inputs.add(name="INPUT0", datatype="INT32", shape=[-1, 16])
        return response

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        await _known(request.name, context)
        return pb.ModelConfigResponse(config=mc.ModelConfig(name="simple", max_batch_size=8))

    async def ModelStatistics(self, request: Any, context: Any) -> Any:
        response = pb.ModelStatisticsResponse()
        response.model_stats.add(name="simple", version="1", execution_count=2)
        return response

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        response = pb.RepositoryIndexResponse()
        response.models.add(name="simple", version="1", state="READY")
        return response

    async def RepositoryModelLoad(self, request: Any, context: Any) -> Any:
        self.loads.append(request)
        if request.model_name == "broken":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad config for 'broken'")
        return pb.RepositoryModelLoadResponse()

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        if request.name in self.regions:
            await context.abort(grpc.StatusCode.ALREADY_EXISTS, f"'{request.name}' exists")
        self.regions[request.name] = request
        return pb.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        if request.name:
            self.regions.pop(request.name, None)
        else:
            self.regions.clear()
        return pb.SystemSharedMemoryUnregisterResponse()

    async def SystemSharedMemoryStatus(self, request: Any, context: Any) -> Any:
        response = pb.SystemSharedMemoryStatusResponse()
        for name, region in self.regions.items():
            status = response.regions[name]
            status.name, status.key = name, region.key
            status.offset, status.byte_size = region.offset, region.byte_size
        return response

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        await _known(request.model_name, context)
        return pb.ModelInferResponse(model_name=request.model_name, id=request.id)

    async def ModelStreamInfer(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        async for request in requests:
            response = pb.ModelStreamInferResponse()
            response.infer_response.id = "other" if self.wrong_stream_id else request.id
            if request.model_name != "simple":
                response.error_message = f"unknown model '{request.model_name}'"
            yield response


async def _known(name: str, context: Any) -> None:
    if name == "loading":
        await context.abort(grpc.StatusCode.UNAVAILABLE, "model 'loading' is not ready")
    if name != "simple":
        await context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{name}'")


Body = Callable[[_Service, str], Awaitable[None]]


def _with_server(body: Body) -> None:
    async def main() -> None:
        service = _Service()
        server = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(service, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            await asyncio.wait_for(body(service, f"127.0.0.1:{port}"), 30)
        finally:
            await server.stop(None)

    asyncio.run(main())


def test_control_calls_return_the_http_clients_documents() -> None:
    async def body(service: _Service, url: str) -> None:
        client = GrpcClient(url, headers={"X-Trace": "on"})
        try:
            assert await client.server_metadata() == {
                "name": "scripted",
                "version": "1",
                "extensions": ["a", "b"],
            }
            assert service.metadata == [("x-trace", "on")]
            metadata = await client.model_metadata("simple")
            assert metadata["inputs"] == [
                {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
            ]
            config = await client.model_config("simple")
            assert (config["name"], config["max_batch_size"]) == ("simple", 8)
            stats = await client.statistics("simple", "1")
            assert stats["model_stats"][0]["execution_count"] == 2
            index = await client.repository_index()
            assert index == [{"name": "simple", "version": "1", "state": "READY", "reason": ""}]
            await client.load_model("simple", {"config": '{"max_batch_size": 4}', "n": 3})
            parameters = service.loads[0].parameters
            assert parameters["config"].string_param == '{"max_batch_size": 4}'
            assert parameters["n"].int64_param == 3
            with pytest.raises(
                ClientError, match="model 'nope' is not known to the server at"
            ) as e:
                await client.model_config("nope")
            assert e.value.status == 404
            with pytest.raises(ClientError, match="bad config for 'broken'") as e:
                await client.load_model("broken")
            assert e.value.status == 400
            # The server's own UNAVAILABLE, not a lost connection: it keeps its status.
            with pytest.raises(ClientError, match=r"refused ModelConfig .*is not ready") as e:
                await client.model_config("loading")
            assert e.value.status == 503
        finally:
            await client.close()

    _with_server(body)


def test_shared_memory_calls() -> None:
    async def body(service: _Service, url: str) -> None:
        client = GrpcClient(url)
        try:
            await client.register_system_shared_memory("r0", "/k0", 64, offset=8)
            await client.register_system_shared_memory("r1", "/k1", 32)
            assert sorted(r["name"] for r in await client.system_shared_memory_status()) == [
                "r0",
                "r1",
            ]
            regions = {r["name"]: r for r in await client.system_shared_memory_status()}
            assert regions["r0"] == {"name": "r0", "key": "/k0", "offset": 8, "byte_size": 64}
            with pytest.raises(ClientError, match="'r0' exists") as e:
                await client.register_system_shared_memory("r0", "/k0", 64)
            assert e.value.status == 400
            await client.unregister_system_shared_memory("r0")
            assert list(service.regions) == ["r1"]
            await client.unregister_system_shared_memory()
            assert service.regions == {}
        finally:
            await client.close()

    _with_server(body)


def test_blocking_client_over_grpc() -> None:
    async def body(service: _Service, url: str) -> None:
        blocking = BlockingClient(url, protocol="grpc")
        config = await asyncio.to_thread(blocking.model_config, "simple")
        assert config["max_batch_size"] == 8

    _with_server(body)


def test_unreachable_server_is_a_client_error_without_status() -> None:
    import socket

    with socket.socket() as holder:  # a port nobody listens on while the call runs
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]

        async def main() -> None:
            client = GrpcClient(f"127.0.0.1:{port}", timeout_s=10)
            try:
                await client.server_metadata()
            finally:
                await client.close()

        with pytest.raises(ClientError, match=f"cannot reach the server at 127.0.0.1:{port}") as e:
            asyncio.run(main())
        assert e.value.status is None


# the load generator's callers


class _Records:
    """The callers' callback: keeps every record, and waits for a number of them."""

    def __init__(self) -> None:
        self.items: list[RawRecord] = []
        self._changed = asyncio.Event()

    def __call__(self, caller: Any, record: RawRecord) -> None:
        self.items.append(record)
        self._changed.set()

    async def wait_for(self, count: int) -> list[RawRecord]:
        while len(self.items) < count:
            self._changed.clear()
            await asyncio.wait_for(self._changed.wait(), 20)
        return self.items


def test_unary_and_stream_callers_record_each_request_once() -> None:
    good = encode_grpc_infer_request("simple", "", INPUTS[:1], ["OUTPUT0"])
    bad = encode_grpc_infer_request("nope", "", INPUTS[:1], ["OUTPUT0"])

    async def body(service: _Service, url: str) -> None:
        channel = open_channel(url)
        try:
            for streaming in (False, True):
                records = _Records()
                callers: list[UnaryCaller | StreamCaller] = [
                    StreamCaller(url, channel, (), records, index)
                    if streaming
                    else UnaryCaller(url, channel, (), records)
                    for index in (1, 2)
                ]
                callers[0].send(good)
                callers[1].send(bad)
                first = await records.wait_for(2)
                outcomes = sorted((r[4], r[5]) for r in first)
                assert outcomes[0][0] is False and "unknown model" in outcomes[0][1]
                assert outcomes[1] == (True, "")
                assert all(r[1] >= r[0] > 0 for r in first)
                # A free caller takes the next request: a stream carries many, one at a time.
                callers[0].send(good)
                assert (await records.wait_for(3))[2][4] is True
                assert len(records.items) == 3
                for caller in callers:
                    caller.close()
                assert len(records.items) == 3  # closing an idle caller records nothing
        finally:
            await channel.close()

    _with_server(body)


def test_closing_a_busy_caller_records_its_request_once() -> None:
    request = encode_grpc_infer_request("simple", "", INPUTS[:1], ["OUTPUT0"])

    async def body(service: _Service, url: str) -> None:
        channel = open_channel(url)
        try:
            records = _Records()
            callers = [
                UnaryCaller(url, channel, (), records),
                StreamCaller(url, channel, (), records, 1),
            ]
            for caller in callers:
                caller.send(request)
                caller.close("stopping")
            await asyncio.sleep(0.2)  # a late answer must not add a record
            assert [(r[4], r[5]) for r in records.items] == [(False, "stopping")] * 2
        finally:
            await channel.close()

    _with_server(body)


def test_stream_caller_refuses_a_response_for_another_request() -> None:
    request = encode_grpc_infer_request("simple", "", INPUTS[:1], ["OUTPUT0"])

    async def body(service: _Service, url: str) -> None:
        service.wrong_stream_id = True
        channel = open_channel(url)
        try:
            records = _Records()
            caller = StreamCaller(url, channel, (), records, 3)
            caller.send(request)
            (record,) = await records.wait_for(1)
            assert record[4] is False
            assert "answered request '3-1' with the response of 'other'" in record[5]
            caller.close()
        finally:
            await channel.close()

    _with_server(body)
