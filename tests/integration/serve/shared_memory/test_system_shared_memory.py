"""Triton's system shared memory extension on a real server, with Triton's own clients over
HTTP and gRPC and tritonclient's shared-memory utilities creating the regions in /dev/shm."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from protocol.client.control import open_client
from protocol.errors import ClientError
from serve.platform import detect_platform
from tests.conftest import BUNDLED_REPOSITORY
from tests.support.models import write_echo_bytes
from tests.support.perf_analyzer import LOOSE_STABILITY, perf_analyzer_path
from tests.support.server_process import RunningServer, start_server, stop_server

SHM_DIRECTORY = Path("/dev/shm")

# simple: INPUT0, INPUT1 -> OUTPUT0 = sum, OUTPUT1 = difference; [1, 16] INT32 each.
TENSOR_BYTES = 16 * 4


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("shared-memory")
    repository = root / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / "simple")
    write_echo_bytes(repository)
    running = start_server(repository, root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


@dataclass
class Transport:
    name: str
    module: Any  # tritonclient.http or tritonclient.grpc: the same names for the same things
    client: Any

    def status(self, region: str = "") -> list[dict[str, Any]]:
        """The status as HTTP's list of {"name", "key", "offset", "byte_size"}."""
        if self.name == "http":
            result: list[dict[str, Any]] = self.client.get_system_shared_memory_status(region)
            return result
        message = self.client.get_system_shared_memory_status(region)
        return [
            {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size}
            for r in message.regions.values()
        ]

    def successes(self, model: str) -> int:
        """The model's count of successful requests, from the statistics extension."""
        if self.name == "http":
            stats = self.client.get_inference_statistics(model)["model_stats"][0]
            return int(stats["inference_stats"]["success"].get("count", 0))
        message = self.client.get_inference_statistics(model)
        return int(message.model_stats[0].inference_stats.success.count)


@pytest.fixture(scope="module", params=["http", "grpc"])
def transport(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[Transport]:
    if request.param == "http":
        opened = Transport("http", httpclient, httpclient.InferenceServerClient(server.url))
    else:
        opened = Transport("grpc", grpcclient, grpcclient.InferenceServerClient(server.grpc_url))
    try:
        yield opened
    finally:
        opened.client.close()


RegionFactory = Callable[[str, int], Any]


@pytest.fixture
def regions(transport: Transport) -> Iterator[RegionFactory]:
    """Creates client regions (named for the test's transport); afterwards unregisters all of
    them on the server and destroys them, leaving nothing in /dev/shm."""
    keys: list[str] = []
    handles: list[Any] = []

    def create(name: str, byte_size: int) -> Any:
        key = f"/autotune_test_{os.getpid()}_{transport.name}_{name}"
        handles.append(shm.create_shared_memory_region(name, key, byte_size, create_only=True))
        keys.append(key)
        return handles[-1]

    try:
        yield create
    finally:
        transport.client.unregister_system_shared_memory()
        for handle in handles:
            shm.destroy_shared_memory_region(handle)
        leftovers = [key for key in keys if (SHM_DIRECTORY / key.lstrip("/")).exists()]
        assert leftovers == []


def key_of(region: Any) -> str:
    return str(region._shm_key)


def simple_inputs(transport: Transport, a: np.ndarray, b: np.ndarray) -> list[Any]:
    inputs = [
        transport.module.InferInput("INPUT0", [1, 16], "INT32"),
        transport.module.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs


def assert_still_serving(transport: Transport) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = transport.client.infer("simple", simple_inputs(transport, a, a))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + a)


def server_maps(server: RunningServer, key: str) -> bool:
    """Whether the server process maps the shared-memory object `key`."""
    maps = Path(f"/proc/{server.process.pid}/maps").read_text()
    return any(line.endswith(str(SHM_DIRECTORY / key.lstrip("/"))) for line in maps.splitlines())


def test_inputs_and_outputs_in_regions(transport: Transport, regions: RegionFactory) -> None:
    inputs_region = regions("inputs", 2 * TENSOR_BYTES)
    outputs_region = regions("outputs", 2 * TENSOR_BYTES + 8)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    shm.set_shared_memory_region(inputs_region, [a, b])
    client = transport.client
    client.register_system_shared_memory("inputs", key_of(inputs_region), 2 * TENSOR_BYTES)
    client.register_system_shared_memory(
        "outputs", key_of(outputs_region), 2 * TENSOR_BYTES, offset=8
    )

    m = transport.module
    in0 = m.InferInput("INPUT0", [1, 16], "INT32")
    in0.set_shared_memory("inputs", TENSOR_BYTES)
    in1 = m.InferInput("INPUT1", [1, 16], "INT32")
    in1.set_shared_memory("inputs", TENSOR_BYTES, offset=TENSOR_BYTES)
    out0 = m.InferRequestedOutput("OUTPUT0")
    out0.set_shared_memory("outputs", TENSOR_BYTES)
    out1 = m.InferRequestedOutput("OUTPUT1")
    out1.set_shared_memory("outputs", TENSOR_BYTES, offset=TENSOR_BYTES)
    result = client.infer("simple", [in0, in1], outputs=[out0, out1])

    # The registered region starts 8 bytes into the object.
    total = shm.get_contents_as_numpy(outputs_region, np.int32, [1, 16], offset=8)
    difference = shm.get_contents_as_numpy(outputs_region, np.int32, [1, 16], 8 + TENSOR_BYTES)
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    output = result.get_output("OUTPUT0")
    if transport.name == "http":
        assert output == {"name": "OUTPUT0", "datatype": "INT32", "shape": [1, 16]}
    else:
        assert list(output.shape) == [1, 16]
        assert list(result.get_response().raw_output_contents) == [b"", b""]


def test_a_region_input_next_to_an_ordinary_one(
    transport: Transport, regions: RegionFactory
) -> None:
    region = regions("one", TENSOR_BYTES)
    b = np.arange(16, dtype=np.int32).reshape(1, 16) * 2
    shm.set_shared_memory_region(region, [b])
    transport.client.register_system_shared_memory("one", key_of(region), TENSOR_BYTES)
    a = np.ones((1, 16), dtype=np.int32)
    inputs = simple_inputs(transport, a, a)
    inputs[1].set_shared_memory("one", TENSOR_BYTES)
    result = transport.client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_bytes_tensors_in_regions(transport: Transport, regions: RegionFactory) -> None:
    text = np.array([[b"shared", b"memory \xff"]], dtype=np.object_)
    serialized = serialize_byte_tensor(text)
    size = serialized.item().__len__()
    in_region = regions("text_in", size)
    out_region = regions("text_out", size)
    shm.set_shared_memory_region(in_region, [serialized])
    transport.client.register_system_shared_memory("text_in", key_of(in_region), size)
    transport.client.register_system_shared_memory("text_out", key_of(out_region), size)

    m = transport.module
    text_input = m.InferInput("TEXT", [1, 2], "BYTES")
    text_input.set_shared_memory("text_in", size)
    echo = m.InferRequestedOutput("ECHO")
    echo.set_shared_memory("text_out", size)
    transport.client.infer("echo_bytes", [text_input], outputs=[echo])
    echoed = shm.get_contents_as_numpy(out_region, np.object_, [1, 2])
    assert echoed.tolist() == text.tolist()


def test_status_and_unregister_one_and_all(
    transport: Transport, regions: RegionFactory, server: RunningServer
) -> None:
    first = regions("first", 64)
    second = regions("second", 64)
    client = transport.client
    client.register_system_shared_memory("first", key_of(first), 64)
    client.register_system_shared_memory("second", key_of(second), 32, offset=16)
    assert sorted(transport.status(), key=lambda r: r["name"]) == [
        {"name": "first", "key": key_of(first), "offset": 0, "byte_size": 64},
        {"name": "second", "key": key_of(second), "offset": 16, "byte_size": 32},
    ]
    assert [r["name"] for r in transport.status("second")] == ["second"]
    assert server_maps(server, key_of(first))

    client.unregister_system_shared_memory("first")
    assert [r["name"] for r in transport.status()] == ["second"]
    assert not server_maps(server, key_of(first))
    client.unregister_system_shared_memory()
    assert transport.status() == []
    assert not server_maps(server, key_of(second))
    client.unregister_system_shared_memory("first")  # unknown: not an error, as in Triton


def expect_error(call: Callable[[], Any], *fragments: str) -> str:
    with pytest.raises(InferenceServerException) as info:
        call()
    message = str(info.value.message())
    for fragment in fragments:
        assert fragment in message
    return message


def test_registration_errors_are_clear_and_the_server_keeps_serving(
    transport: Transport, regions: RegionFactory
) -> None:
    region = regions("small", 64)
    client = transport.client
    register = client.register_system_shared_memory
    expect_error(lambda: register("r", key_of(region), 64, offset=8), "'r'", "exceeds the 64")
    expect_error(lambda: register("r", "/../../etc/passwd", 8), "invalid shm key")
    expect_error(lambda: register("r", "/dir/inside", 8), "invalid shm key")
    missing = f"/autotune_test_{os.getpid()}_missing"
    expect_error(lambda: register("r", missing, 8), "Unable to open", missing)
    register("r", key_of(region), 64)
    expect_error(lambda: register("r", key_of(region), 32), "'r' already in manager")
    expect_error(
        lambda: transport.status("nope"), "Unable to find system shared memory region: 'nope'"
    )
    assert [r["byte_size"] for r in transport.status()] == [64]
    assert_still_serving(transport)


def test_infer_errors_name_the_tensor_and_the_server_keeps_serving(
    transport: Transport, regions: RegionFactory
) -> None:
    region = regions("io", TENSOR_BYTES)
    client = transport.client
    client.register_system_shared_memory("io", key_of(region), TENSOR_BYTES)
    a = np.ones((1, 16), dtype=np.int32)
    m = transport.module

    inputs = simple_inputs(transport, a, a)
    inputs[0].set_shared_memory("nope", TENSOR_BYTES)
    expect_error(
        lambda: client.infer("simple", inputs),
        "Unable to find system shared memory region: 'nope'",
    )

    inputs = simple_inputs(transport, a, a)
    inputs[0].set_shared_memory("io", TENSOR_BYTES, offset=8)
    expect_error(lambda: client.infer("simple", inputs), "input 'INPUT0'", "runs past the end")

    inputs = simple_inputs(transport, a, a)
    inputs[0].set_shared_memory("io", TENSOR_BYTES, offset=TENSOR_BYTES)
    expect_error(lambda: client.infer("simple", inputs), "input 'INPUT0'", "outside")

    inputs = simple_inputs(transport, a, a)
    inputs[0].set_shared_memory("io", 32)
    expect_error(lambda: client.infer("simple", inputs), "input 'INPUT0'", "does not match")

    small = m.InferRequestedOutput("OUTPUT0")
    small.set_shared_memory("io", 32)
    expect_error(
        lambda: client.infer("simple", simple_inputs(transport, a, a), outputs=[small]),
        "output 'OUTPUT0' (32 bytes) should be at least 64 bytes",
    )
    assert_still_serving(transport)


def test_cuda_shared_memory_registration_on_this_machine(transport: Transport) -> None:
    client = transport.client
    client.unregister_cuda_shared_memory()  # nothing registered: fine (perf_analyzer does it)
    status = client.get_cuda_shared_memory_status()
    assert (status if transport.name == "http" else list(status.regions)) == []
    expect_error(
        lambda: client.get_cuda_shared_memory_status("nope"),
        "Unable to find cuda shared memory region: 'nope'",
    )
    # A handle as tritonclient.utils.cuda_shared_memory.get_raw_handle gives it (base64).
    handle = base64.b64encode(bytes(64)).decode()
    reason = "no GPU" if not detect_platform().gpus else ""  # a GPU: a bogus handle's error
    expect_error(
        lambda: client.register_cuda_shared_memory("gpu", handle, 0, 64),
        "failed to register CUDA shared memory region 'gpu'",
        reason,
    )
    short = base64.b64encode(bytes(8)).decode()
    expect_error(
        lambda: client.register_cuda_shared_memory("gpu", short, 0, 64),
        "region 'gpu': 'raw_handle' must be a 64-byte cudaIpcMemHandle (8 bytes given)",
    )
    assert_still_serving(transport)


def test_server_advertises_the_extension(transport: Transport) -> None:
    metadata = transport.client.get_server_metadata()
    extensions = metadata["extensions"] if transport.name == "http" else metadata.extensions
    assert "system_shared_memory" in extensions


def test_perf_analyzer_with_system_shared_memory(
    transport: Transport, server: RunningServer
) -> None:
    """NVIDIA's perf_analyzer registers regions, sends every input and output through them,
    and unregisters all system and CUDA regions at the end."""
    url = server.url if transport.name == "http" else server.grpc_url
    before = transport.successes("simple")
    command = [
        str(perf_analyzer_path()),
        *("-m", "simple", "-u", url, "-i", transport.name, "--shared-memory", "system"),
        *("--concurrency-range", "1:1", "-p", "1000", *LOOSE_STABILITY),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=150)
    output = f"{' '.join(command)}\n{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, output
    assert transport.successes("simple") > before, output
    assert transport.status() == []


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_analyzers_client_registers_cuda_regions(server: RunningServer, protocol: str) -> None:
    """protocol.client's CUDA calls, as `autotune perf --shared-memory cuda` makes them."""
    url = server.url if protocol == "http" else server.grpc_url

    async def calls() -> str:
        client = open_client(protocol, url)
        try:
            await client.unregister_cuda_shared_memory()
            with pytest.raises(ClientError) as info:
                await client.register_cuda_shared_memory("gpu", base64.b64encode(bytes(64)), 0, 64)
            await client.unregister_cuda_shared_memory("gpu")
            return str(info.value)
        finally:
            await client.close()

    message = asyncio.run(calls())
    assert "failed to register CUDA shared memory region 'gpu'" in message
    if not detect_platform().gpus:
        assert "no GPU" in message
