"""The longer form of the reliability checks that the test suite runs bounded
(tests/integration/serve/test_overload.py, test_http_limits.py, the fuzzers): one server,
loopback only, and the counts docs/reliability.md quotes.

1. Throughput of `simple` at concurrency 8 (the real perf_analyzer), before anything else.
2. A burst far above capacity: `--burst` requests from `--connections` connections at once
   against a slow python model with max_queue_size: every request must be answered 200 or
   503; the model's statistics must count exactly the 200s and the 503s (nothing lost or
   answered twice); the server's peak RSS is reported.
3. `--disconnects` clients vanishing mid-request (a third after half a request, the rest after
   a whole one, each closing with a reset): the server's open file descriptors before and
   after, and its queue drained.
4. Oversized bodies (`--oversized` of them, each declaring twice the size limit) and requests
   left half sent past the read timeout: every one answered 413 / 408.
5. Throughput of `simple` again (twice before the abuse, twice after): the server is back at
   full speed.

    python benchmarks/reliability.py                     # ~5 minutes
    python benchmarks/reliability.py --burst 50000 --connections 512 --disconnects 20000
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import struct
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson
from peer import ROOT, Server, install, measure, median_range, ours, run_main

LIMIT = 1 << 20
SLOW = """name: "slow"
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] },
       { name: "INPUT1" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] },
        { name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }]
dynamic_batching { default_queue_policy { max_queue_size: 64 } }
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "EXECUTE_DELAY_MS" value { string_value: "5" } }
"""
BODY = orjson.dumps(
    {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
            for n in ("INPUT0", "INPUT1")
        ]
    }
)


def _repository(root: Path) -> Path:
    repository = root / "repository"
    shutil.copytree(ROOT / "model_repository" / "simple", repository / "simple")
    source = ROOT / "model_repository" / "add_sub_py"
    for version in (p for p in source.iterdir() if p.name.isdigit()):
        shutil.copytree(version, repository / "slow" / version.name)
    (repository / "slow" / "config.pbtxt").write_text(SLOW)
    return repository


def _status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise SystemExit(f"no {field} in /proc/{pid}/status")


def _fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def _counts(base: str) -> tuple[int, int]:
    stats = httpx.get(f"{base}/v2/models/slow/stats").json()["model_stats"][0]["inference_stats"]
    return stats["success"]["count"], stats["fail"]["count"]


async def _burst(base: str, requests: int, connections: int) -> Counter[int | str]:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=300) as client:

        async def one() -> int | str:
            try:
                response = await client.post(
                    "/v2/models/slow/infer",
                    content=BODY,
                    headers={"content-type": "application/json"},
                )
            except httpx.HTTPError as exc:
                return type(exc).__name__
            return response.status_code

        return Counter(await asyncio.gather(*(one() for _ in range(requests))))


def burst(server: Server, requests: int, connections: int) -> None:
    base = f"http://{server.urls['http']}"
    pid = server.process.pid
    before = _counts(base)
    rss = _status_kb(pid, "VmRSS")
    started = time.monotonic()
    codes = asyncio.run(_burst(base, requests, connections))
    seconds = time.monotonic() - started
    after = _counts(base)
    peak = _status_kb(pid, "VmHWM")
    ok, shed = codes.get(200, 0), codes.get(503, 0)
    other = {k: v for k, v in codes.items() if k not in (200, 503)}
    lost = requests - ok - shed - sum(other.values())
    print(
        f"burst: {requests:,} requests from {connections} connections in {seconds:.1f} s: "
        f"{ok:,} answered 200, {shed:,} shed 503, other {other or 'none'}, lost {lost}; "
        f"statistics count {after[0] - before[0]:,} successes and {after[1] - before[1]:,} "
        f"failures; RSS {rss / 1024:.0f} MB before, peak {peak / 1024:.0f} MB"
    )
    if other or (after[0] - before[0], after[1] - before[1]) != (ok, shed):
        raise SystemExit("burst: answers and statistics disagree")


def disconnects(server: Server, count: int) -> None:
    host, port = server.urls["http"].rsplit(":", 1)
    pid = server.process.pid
    request = (
        b"POST /v2/models/slow/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(BODY)
    ) + BODY
    reset = struct.pack("ii", 1, 0)
    fds_before = _fds(pid)
    for index in range(count):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request[: len(request) // 2] if index % 3 == 0 else request)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
    deadline = time.monotonic() + 60
    while _fds(pid) > fds_before + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    print(
        f"disconnects: {count:,} clients gone mid-request; open descriptors {fds_before} before, "
        f"{_fds(pid)} after"
    )


def refusals(server: Server, count: int) -> None:
    host, port = server.urls["http"].rsplit(":", 1)
    codes: Counter[int] = Counter()
    head = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (
        2 * LIMIT
    )
    for _ in range(count):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(head)
            codes[int(sock.recv(64).split(b" ", 2)[1])] += 1
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head[:-4])  # the head never ends
        sock.settimeout(30)
        codes[int(sock.recv(64).split(b" ", 2)[1])] += 1
    print(f"refusals: {count:,} oversized bodies and one half-sent request answered {dict(codes)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=5000)
    parser.add_argument("--connections", type=int, default=256)
    parser.add_argument("--disconnects", type=int, default=3000)
    parser.add_argument("--oversized", type=int, default=1000)
    parser.add_argument("--window-ms", type=int, default=2000)
    args = parser.parse_args()
    binary = install("install_perf_analyzer.sh")
    with tempfile.TemporaryDirectory(prefix="reliability-") as scratch_dir:
        scratch = Path(scratch_dir)
        flags = ("--http-max-input-size", str(LIMIT), "--http-read-timeout", "2")
        with ours(_repository(scratch), scratch / "server.log", flags) as server:
            runs: dict[str, list[float]] = {"before": [], "after": []}

            def throughput(label: str) -> None:
                run = measure(
                    3,
                    f"{label:<7}",
                    binary,
                    server,
                    "simple",
                    "http",
                    8,
                    args.window_ms,
                    scratch,
                    label,
                )
                if run is not None:
                    runs[label].append(run.infer_per_s)

            for _ in range(2):
                throughput("before")
            burst(server, args.burst, args.connections)
            disconnects(server, args.disconnects)
            refusals(server, args.oversized)
            for _ in range(2):
                throughput("after")
            if runs["before"] and runs["after"]:
                ratio = statistics.median(runs["after"]) / statistics.median(runs["before"])
                print(
                    f"simple c8: before {median_range(runs['before'], ',.0f')}, after "
                    f"{median_range(runs['after'], ',.0f')} infer/s: after / before {ratio:.2f}"
                )


if __name__ == "__main__":
    run_main(main)
