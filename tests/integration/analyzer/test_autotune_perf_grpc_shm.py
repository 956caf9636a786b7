"""`autotune perf` over gRPC (unary and streaming) and with system shared memory (over HTTP
and gRPC) against our server on `simple`: the analyzer's counts fit inside the server's
statistics, shared-memory requests really go through the regions, and the regions are
unregistered and unlinked at the end, after an error and after Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import shared_memory as shm

from analyzer.load.base import LoadLevel
from analyzer.load.factory import connect
from analyzer.load.options import LoadOptions
from common.gpu import list_gpus
from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server
from tests.support.signals import interruptible

QUICK = ["-p", "500", "-s", "50", "-r", "20"]
SHM_DIRECTORY = Path("/dev/shm")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    log_path = tmp_path_factory.mktemp("grpc-shm") / "server.log"
    running = start_server(
        BUNDLED_REPOSITORY, log_path, "--model-control-mode", "explicit", "--load-model", "simple"
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="module")
def grpc_client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        yield client
    finally:
        client.close()


def successes(client: grpcclient.InferenceServerClient) -> int:
    stats = client.get_inference_statistics("simple", as_json=True)
    return int(stats["model_stats"][0]["inference_stats"]["success"].get("count", 0))


def registered(client: grpcclient.InferenceServerClient) -> list[str]:
    return sorted(client.get_system_shared_memory_status(as_json=True).get("regions", {}))


def our_shm_files() -> set[str]:
    return {path.name for path in SHM_DIRECTORY.glob("autotune_*")}


def autotune_perf(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from tuner.cli import main; main()", "perf", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def url_for(server: RunningServer, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.url


MODES = {
    "grpc": ["-i", "grpc"],
    "grpc-streaming": ["-i", "grpc", "--streaming"],
    "http-shm": ["-i", "http", "--shared-memory", "system"],
    "grpc-shm": ["-i", "grpc", "--shared-memory", "system"],
    "grpc-streaming-shm": ["-i", "grpc", "--streaming", "--shared-memory", "system"],
}


@pytest.mark.parametrize("mode", list(MODES))
def test_perf_counts_fit_the_servers(
    server: RunningServer, grpc_client: grpcclient.InferenceServerClient, tmp_path: Path, mode: str
) -> None:
    args = MODES[mode]
    json_path = tmp_path / "perf.json"
    files_before = our_shm_files()
    before = successes(grpc_client)
    result = autotune_perf(
        *("-m", "simple", "-u", url_for(server, args[1]), *args),
        *("--concurrency-range", "1:2", "--json", str(json_path), *QUICK),
    )
    after = successes(grpc_client)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "unregister" not in result.stderr, result.stderr
    measurements: list[dict[str, Any]] = json.loads(json_path.read_text())
    assert sorted(m["concurrency"] for m in measurements) == [1, 2]
    counted = sum(m["request_count"] for m in measurements)
    assert after - before >= counted > 0
    for m in measurements:
        assert m["error_count"] == 0
        assert m["server"]["available"]  # statistics read over the same protocol
        assert 0 < m["server"]["request_count"] <= after - before
    assert registered(grpc_client) == []
    assert our_shm_files() == files_before


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_shared_memory_requests_go_through_the_regions(
    server: RunningServer, grpc_client: grpcclient.InferenceServerClient, protocol: str
) -> None:
    """simple adds and subtracts: the output regions hold INPUT0 + INPUT1 and INPUT0 - INPUT1
    of the data the input regions hold, so the server read and wrote the regions."""
    options = LoadOptions(
        url=url_for(server, protocol),
        model="simple",
        protocol=protocol,
        shared_memory="system",
        worker_processes=1,
    )

    async def main() -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        connected = await connect(options)
        try:
            regions = connected.shared_memory
            assert regions is not None
            names = registered(grpc_client)
            await connected.driver.start(LoadLevel(concurrency=1))
            await asyncio.sleep(0.3)
            records = await connected.driver.stop()
            assert records and all(r.ok for r in records), records[:3]
            in0, in1, out0, out1 = (
                shm.get_contents_as_numpy(handle, np.int32, [1, 16]) for handle in regions.handles
            )
            return names, in0.copy(), in1.copy(), out0.copy(), out1.copy()
        finally:
            assert await connected.close() == []

    files_before = our_shm_files()
    names, in0, in1, out0, out1 = asyncio.run(main())
    assert len(names) == 4 and all(name.startswith("autotune_") for name in names)
    assert np.any(in0) and np.any(in1)  # random data, written once
    np.testing.assert_array_equal(out0, in0 + in1)
    np.testing.assert_array_equal(out1, in0 - in1)
    assert registered(grpc_client) == []
    assert our_shm_files() == files_before


def test_a_refused_region_is_a_clear_error_and_nothing_is_left(
    server: RunningServer, grpc_client: grpcclient.InferenceServerClient
) -> None:
    """An output region too small for the output: the server refuses every request naming
    it; the run says so, and still releases its regions."""
    files_before = our_shm_files()
    result = autotune_perf(
        *("-m", "simple", "-u", server.grpc_url, "-i", "grpc", "--shared-memory", "system"),
        *("--output-shared-memory-size", "8", *QUICK),
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "OUTPUT0" in result.stderr and "requests failed" in result.stderr, result.stderr
    assert registered(grpc_client) == []
    assert our_shm_files() == files_before


def test_interrupted_run_releases_its_regions(
    server: RunningServer, grpc_client: grpcclient.InferenceServerClient
) -> None:
    files_before = our_shm_files()
    command = [sys.executable, "-c", "from tuner.cli import main; main()", "perf"]
    command += ["-m", "simple", "-u", server.grpc_url, "-i", "grpc", "--shared-memory", "system"]
    command += ["-p", "60000"]  # one long window: the interrupt lands mid-measurement
    # PYTHONFAULTHANDLER: should the run not stop, SIGABRT makes it print every thread's stack
    # (it hung so, rarely, in CI: 2 of the last 3 full runs, never alone; the stack says where)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=interruptible,
    )
    try:
        deadline = time.monotonic() + 60
        while not registered(grpc_client):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the run never registered its regions"
            time.sleep(0.05)
        before = successes(grpc_client)
        while successes(grpc_client) == before and time.monotonic() < deadline:
            time.sleep(0.05)  # requests are flowing through the regions
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            _, stacks = process.communicate(timeout=30)
            raise AssertionError(f"no exit within 60 s of SIGINT; its threads:\n{stacks}") from None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert registered(grpc_client) == []
    assert our_shm_files() == files_before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-i", "http", "--streaming"], "--streaming needs -i grpc"),
        pytest.param(
            ["-i", "grpc", "--shared-memory", "cuda"],
            "NVML finds no GPU on this machine",
            marks=pytest.mark.skipif(bool(list_gpus()), reason="this machine has a GPU"),
        ),
    ],
)
def test_options_it_cannot_honour_are_refused(
    server: RunningServer, args: list[str], message: str
) -> None:
    result = autotune_perf("-m", "simple", "-u", server.grpc_url, *args, *QUICK)
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_grpc_to_the_http_port_is_a_clear_error(server: RunningServer) -> None:
    result = autotune_perf("-m", "simple", "-u", server.url, "-i", "grpc", *QUICK, timeout=90)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert f"the server at {server.url}" in result.stderr, result.stderr


def test_unknown_model_over_grpc_names_it(server: RunningServer) -> None:
    result = autotune_perf("-m", "nope", "-u", server.grpc_url, "-i", "grpc", *QUICK)
    assert result.returncode == 1
    assert "model 'nope' is not known to the server" in result.stderr, result.stderr
