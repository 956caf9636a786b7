"""Overload and disconnects, bounded in time, on loopback.

A burst far above capacity (many times what the queue holds, from many connections at once)
against a slow python model with max_queue_size: every request is answered, 200 or 503 and
nothing else; the server's statistics count exactly the 200s as successes and the 503s as
failures (no request lost or answered twice); memory stays bounded; and the server serves
normally after the burst. Then clients that vanish mid-request, many times over: the server
ends with the file descriptors it started with, and its queue drains."""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.raw_http import http_request
from tests.support.server_process import RunningServer, serving

QUEUE = 8
SLOW = f"""# from: add_sub_py
name: "slow"
backend: "python"
max_batch_size: 4
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }},
       {{ name: "INPUT1" data_type: TYPE_FP32 dims: [16] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }},
        {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }}]
dynamic_batching {{ default_queue_policy {{ max_queue_size: {QUEUE} }} }}
instance_group [{{ count: 1 kind: KIND_CPU }}]
parameters {{ key: "EXECUTE_DELAY_MS" value {{ string_value: "20" }} }}
"""
BODY = {
    "inputs": [
        {"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
        for n in ("INPUT0", "INPUT1")
    ]
}
BURST = 600  # requests
CONNECTIONS = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("overload")
    model = root / "repository" / "slow"
    source = BUNDLED_REPOSITORY / "add_sub_py"
    for version in (p for p in source.iterdir() if p.name.isdigit()):
        shutil.copytree(version, model / version.name)
    (model / "config.pbtxt").write_text(SLOW)
    with serving(root / "repository", root / "server.log") as running:
        yield running


def _status_field(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])  # kB
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _stats(server: RunningServer) -> dict[str, int]:
    stats = httpx.get(f"{server.base}/v2/models/slow/stats").json()["model_stats"][0]
    inference = stats["inference_stats"]
    return {"success": inference["success"]["count"], "fail": inference["fail"]["count"]}


async def _burst(server: RunningServer) -> Counter[int]:
    limits = httpx.Limits(max_connections=CONNECTIONS, max_keepalive_connections=CONNECTIONS)
    async with httpx.AsyncClient(base_url=server.base, limits=limits, timeout=120) as client:

        async def one() -> int:
            response = await client.post("/v2/models/slow/infer", json=BODY)
            if response.status_code == 503:
                assert "Exceeds maximum queue size" in response.json()["error"]
            return response.status_code

        codes = await asyncio.gather(*(one() for _ in range(BURST)))
    return Counter(codes)


def test_a_burst_far_above_capacity_is_shed_and_every_request_answered(
    server: RunningServer,
) -> None:
    before = _stats(server)
    rss_before = _status_field(server.process.pid, "VmRSS")
    codes = asyncio.run(_burst(server))
    assert set(codes) <= {200, 503}, codes
    assert codes[200] > 0 and codes[503] > 0, codes
    after = _stats(server)
    assert after["success"] - before["success"] == codes[200]
    assert after["fail"] - before["fail"] == codes[503]
    peak_growth_mb = (_status_field(server.process.pid, "VmHWM") - rss_before) / 1024
    assert peak_growth_mb < 200, f"the burst grew the server by {peak_growth_mb:.0f} MB"
    # and it serves normally afterwards
    response = httpx.post(f"{server.base}/v2/models/slow/infer", json=BODY, timeout=30)
    assert response.status_code == 200
    assert response.json()["outputs"][0]["data"] == [2.0] * 16


def _wait_for(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def test_clients_vanishing_mid_request_leak_nothing(server: RunningServer) -> None:
    pid = server.process.pid
    warm = httpx.post(f"{server.base}/v2/models/slow/infer", json=BODY, timeout=30)
    assert warm.status_code == 200
    fds_before = _open_fds(pid)
    whole = http_request("POST", "/v2/models/slow/infer", orjson.dumps(BODY))
    reset = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends a reset
    for _ in range(10):
        sockets = []
        for index in range(30):
            sock = socket.create_connection((server.host, server.port), timeout=10)
            # a third send half a request, the rest a whole one; all leave before the answer
            sock.sendall(whole[: len(whole) // 2] if index % 3 == 0 else whole)
            sockets.append(sock)
        for sock in sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
            sock.close()  # as a killed client leaves it
    assert _wait_for(lambda: _open_fds(pid) <= fds_before + 2), (
        f"{_open_fds(pid)} file descriptors open after the disconnects, {fds_before} before"
    )
    assert _wait_for(lambda: _queue_empty(server))
    response = httpx.post(f"{server.base}/v2/models/slow/infer", json=BODY, timeout=30)
    assert response.status_code == 200


def _queue_empty(server: RunningServer) -> bool:
    metrics = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    for line in metrics.splitlines():
        if line.startswith("nv_inference_pending_request_count") and 'model="slow"' in line:
            return float(line.rsplit(" ", 1)[1]) == 0
    return True
