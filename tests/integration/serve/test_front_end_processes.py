"""`autotune serve --workers N`: N front-end processes share the HTTP and gRPC ports, and the
models, schedulers and batchers stay in the core, so one batch holds requests that came through
different front ends. (The rest of the server's tests run against `--workers 2` too: the tier
scripts/run_tests.sh runs with AUTOTUNE_TEST_SERVE_WORKERS=2.)"""

from __future__ import annotations

import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest

from tests.integration.conftest import RepositoryFactory
from tests.support.raw_http import binary_infer, read_responses
from tests.support.server_process import (
    RunningServer,
    refused_start,
    serving,
    stop_server,
)

FRONT_END_MODULE = "serve.workers.front_end"
BATCH = 4
# One batch of BATCH: the scheduler waits up to 30 s for it, far longer than the requests take
# to arrive, and runs it as soon as it is whole.
BATCHING_CONFIG = f"""# from: simple
name: "batched"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
        {{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }},
         {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }} ]
dynamic_batching {{ preferred_batch_size: [ {BATCH} ] max_queue_delay_microseconds: 30000000 }}
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def _front_ends(server: RunningServer) -> list[psutil.Process]:
    """The server's live front-end processes (one that has died and is not reaped yet has no
    command line left to read: it is not counted)."""
    front_ends = []
    for child in psutil.Process(server.process.pid).children():
        try:
            if FRONT_END_MODULE in " ".join(child.cmdline()):
                front_ends.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return front_ends


def _owner(front_ends: list[psutil.Process], server_port: int, client_port: int) -> int:
    """The pid of the front end holding the server side of the connection from client_port."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for front_end in front_ends:
            for connection in front_end.net_connections(kind="tcp"):
                if (
                    connection.laddr.port == server_port
                    and connection.raddr
                    and (connection.raddr.port == client_port)
                ):
                    return front_end.pid
        time.sleep(0.05)
    raise AssertionError(f"no front end holds the connection from port {client_port}")


def _connections_on_each(
    server: RunningServer, front_ends: list[psutil.Process]
) -> list[socket.socket]:
    """BATCH connections, half of them accepted by one front end and half by the other (the
    kernel picks a front end per connection: open more until each has its share)."""
    by_owner: dict[int, list[socket.socket]] = {f.pid: [] for f in front_ends}
    spare: list[socket.socket] = []
    for _ in range(200):
        if all(len(held) >= BATCH // 2 for held in by_owner.values()):
            break
        sock = socket.create_connection((server.host, server.port), timeout=10)
        owner = _owner(front_ends, server.port, sock.getsockname()[1])
        (by_owner[owner] if len(by_owner[owner]) < BATCH // 2 else spare).append(sock)
    for sock in spare:
        sock.close()
    chosen = [sock for held in by_owner.values() for sock in held]
    assert len(chosen) == BATCH, "the kernel gave every connection to one front end"
    return chosen


def test_requests_through_two_front_ends_run_in_one_batch(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    repository = make_repository({"batched": BATCHING_CONFIG})
    with serving(repository, tmp_path / "server.log", "--workers", "2") as server:
        front_ends = _front_ends(server)
        assert len(front_ends) == 2
        connections = _connections_on_each(server, front_ends)
        inputs = [np.full((1, 16), i, np.int32) for i in range(BATCH)]
        for sock, value in zip(connections, inputs, strict=True):
            sock.sendall(
                binary_infer("batched", f"r{value[0, 0]}", {"INPUT0": value, "INPUT1": value})
            )
        with ThreadPoolExecutor(BATCH) as pool:
            answers = list(pool.map(lambda s: read_responses(s, 1, 60.0), connections))
        for sock in connections:
            sock.close()
        assert [a[0].status for a in answers] == [200] * BATCH
        stats = httpx.get(f"{server.base}/v2/models/batched/stats", timeout=10).json()
        model = stats["model_stats"][0]
        assert (model["inference_count"], model["execution_count"]) == (BATCH, 1)
        assert model["batch_stats"][0]["batch_size"] == BATCH


def test_a_front_end_that_dies_is_started_again(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    repository = make_repository({"batched": BATCHING_CONFIG.replace("30000000", "100")})
    with serving(repository, tmp_path / "server.log", "--workers", "2") as server:
        killed = _front_ends(server)[0]
        time.sleep(1.2)  # past the start-up window in which a dying front end is not restarted
        killed.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            alive = [f for f in _front_ends(server) if f.pid != killed.pid and f.is_running()]
            if len(alive) == 2 and "starting it again" in server.log():
                break
            time.sleep(0.1)
        assert len(alive) == 2, server.log()[-2000:]
        for _ in range(20):  # every new connection is answered, whichever front end takes it
            answer = httpx.get(f"{server.base}/v2/health/ready", timeout=10)
            assert answer.status_code == 200


def test_the_processes_end_with_the_server(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    repository = make_repository({"batched": BATCHING_CONFIG})
    with serving(repository, tmp_path / "server.log", "--workers", "3") as server:
        front_ends = _front_ends(server)
        assert len(front_ends) == 3
        assert stop_server(server) == 0
    assert not any(f.is_running() and f.status() != psutil.STATUS_ZOMBIE for f in front_ends)


def test_a_port_another_process_listens_on_is_refused(tmp_path: Path) -> None:
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)  # even one that shares it
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        port = holder.getsockname()[1]
        result = refused_start(
            tmp_path, "--workers", "2", "--http-port", str(port), "--http-address", "127.0.0.1"
        )
    finally:
        holder.close()
    assert result.returncode != 0
    assert "Address already in use" in result.stderr + result.stdout


@pytest.mark.parametrize("flag", ["--http-front-end=uvicorn", "--grpc-front-end=grpcio"])
def test_workers_need_the_native_front_ends(tmp_path: Path, flag: str) -> None:
    result = refused_start(tmp_path, "--workers", "2", flag)
    assert result.returncode == 2
    assert "--workers above 1 needs the native front ends" in result.stderr
