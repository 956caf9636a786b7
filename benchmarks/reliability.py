"""The longer form of the reliability checks that the test suite runs bounded
(tests/integration/serve/test_overload.py, test_http_limits.py, the fuzzers): one server,
loopback only, and the counts docs/reliability.md quotes.

1. Throughput of `simple` at concurrency 8 (the real perf_analyzer), before anything else.
2. A burst far above capacity: `--burst` requests from `--connections` connections at once
   against a slow python model with max_queue_size: every request must be answered 200 or
   503; the model's statistics must count exactly the 200s and the 503s (nothing lost or
   answered twice); the server's peak RSS is reported.
3. `--fuzz` nearly-right requests to `simple` (benchmarks/fuzz_requests.py, from `--seed`):
   every one answered 2xx or 4xx, every error with a message; peak RSS.
4. `--disconnects` clients vanishing mid-request (a third after half a request, the rest after
   a whole one, each closing with a reset): the server's open file descriptors before and
   after, and its queue drained.
5. `--stub-kills` SIGKILLs of the slow model's python process under load: every request
   answered, the model serving again after each.
6. Oversized bodies (`--oversized` of them, each declaring twice the size limit) and requests
   left half sent past the read timeout: every one answered 413 / 408.
7. Throughput of `simple` again (`--repeats` runs before the abuse, as many after): the server
   is back at full speed.

    python benchmarks/reliability.py                     # ~2 minutes
    python benchmarks/reliability.py --burst 500000 --connections 2000 --fuzz 1000000

Raw results: benchmarks/results/reliability.json (results_record's header, the settings, each
throughput run's infer/s and p95, and every step's counts as printed). `--smoke` (a few hundred
requests a step, one repeat, 1 s windows) writes into a new temporary folder, `--output` into
the one it names.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import shutil
import socket
import statistics
import struct
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from fuzz_requests import fuzzed_requests
from peer import ROOT, Server, install, measure, median_range, ours, run_main
from raw_load import Tally, request_bytes, send_all
from results_record import header, parse_with_smoke, write_record

from serve.backends.python.launcher import LAUNCHER_MODULE
from serve.backends.python.process import STUB_MODULE

LIMIT = 1 << 20
SLOW_PATH = "/v2/models/slow/infer"
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


def _countdown(request: bytes, count: int) -> Callable[[], bytes | None]:
    left = count

    def next_request() -> bytes | None:
        nonlocal left
        left -= 1
        return request if left >= 0 else None

    return next_request


def burst(server: Server, requests: int, connections: int) -> dict[str, Any]:
    base = f"http://{server.urls['http']}"
    host, port = server.urls["http"].rsplit(":", 1)
    pid = server.process.pid
    before = _counts(base)
    rss = _status_kb(pid, "VmRSS")
    started = time.monotonic()
    request = request_bytes(SLOW_PATH, BODY, {"Content-Type": "application/json"})
    tally = asyncio.run(send_all(host, int(port), _countdown(request, requests), connections))
    seconds = time.monotonic() - started
    after = _counts(base)
    peak = _status_kb(pid, "VmHWM")
    codes = tally.codes
    ok, shed = codes.get(200, 0), codes.get(503, 0)
    other = {k: v for k, v in codes.items() if k not in (200, 503)}
    lost = requests - tally.sent()
    print(
        f"burst: {requests:,} requests from {connections} connections in {seconds:.1f} s: "
        f"{ok:,} answered 200, {shed:,} shed 503, other {other or 'none'}, lost {lost}; "
        f"statistics count {after[0] - before[0]:,} successes and {after[1] - before[1]:,} "
        f"failures; RSS {rss / 1024:.0f} MB before, peak {peak / 1024:.0f} MB"
    )
    if other or lost or (after[0] - before[0], after[1] - before[1]) != (ok, shed):
        raise SystemExit("burst: answers and statistics disagree")
    return {
        "requests": requests,
        "connections": connections,
        "seconds": seconds,
        "answered_200": ok,
        "shed_503": shed,
        "other": {str(code): n for code, n in other.items()},
        "lost": lost,
        "statistics_successes": after[0] - before[0],
        "statistics_failures": after[1] - before[1],
        "rss_kb_before": rss,
        "rss_kb_peak": peak,
    }


def fuzz(server: Server, count: int, connections: int, seed: int) -> dict[str, Any]:
    """Nearly-right requests (benchmarks/fuzz_requests.py) to `simple`: every one answered,
    none with 5xx, every error a JSON object with a message; the server's peak RSS."""
    host, port = server.urls["http"].rsplit(":", 1)
    pid = server.process.pid
    rss = _status_kb(pid, "VmRSS")
    requests = iter(fuzzed_requests(count, seed))
    started = time.monotonic()
    tally = asyncio.run(send_all(host, int(port), lambda: next(requests, None), connections))
    seconds = time.monotonic() - started
    peak = _status_kb(pid, "VmHWM")
    by_class = Counter(f"{k // 100}xx" if isinstance(k, int) else k for k in tally.codes.elements())
    unexplained = [b for b in tally.error_bodies if not _has_message(b)]
    print(
        f"fuzz: {count:,} requests (seed {seed}) from {connections} connections in "
        f"{seconds:.1f} s: {dict(sorted(by_class.items()))}; errors without a message "
        f"{len(unexplained)}; RSS {rss / 1024:.0f} MB before, peak {peak / 1024:.0f} MB"
    )
    if set(by_class) - {"2xx", "4xx"} or unexplained or tally.sent() != count:
        raise SystemExit(f"fuzz: an answer that is not 2xx/4xx with a message: {tally.codes}")
    return {
        "requests": count,
        "seed": seed,
        "connections": connections,
        "seconds": seconds,
        "answers": dict(sorted(by_class.items())),
        "errors_without_a_message": len(unexplained),
        "rss_kb_before": rss,
        "rss_kb_peak": peak,
    }


def _has_message(body: bytes) -> bool:
    try:
        error = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return False
    return isinstance(error, str) and bool(error)


def idle_cpu(server: Server, label: str, seconds: float = 3.0) -> dict[str, Any]:
    """CPU seconds the server's process tree uses while no client sends anything: a task or
    thread left spinning by the abuse would show here, whatever the host's noise."""
    root = psutil.Process(server.process.pid)
    processes = [root, *root.children(recursive=True)]
    started = {p.pid: sum(p.cpu_times()[:2]) for p in processes}
    time.sleep(seconds)
    used = 0.0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            used += sum(process.cpu_times()[:2]) - started[process.pid]
    idle = {
        "seconds": seconds,
        "cpu_s": used,
        "threads": root.num_threads(),
        "descriptors": root.num_fds(),
        "rss_kb": _status_kb(root.pid, "VmRSS"),
    }
    print(
        f"idle {label}: {used:.2f} CPU s in {seconds:g} s; {idle['threads']} threads, "
        f"{idle['descriptors']} descriptors, RSS {idle['rss_kb'] / 1024:.0f} MB"
    )
    return idle


def _stubs(pid: int) -> list[psutil.Process]:
    """The python model processes under the server `pid`: those started as the stub module,
    and those forked from the warm launcher (whose command line is the launcher's: a stub is a
    launcher-module process whose parent is the launcher)."""
    stubs = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            command = child.cmdline()
            parent = child.parent()
            forked = (
                LAUNCHER_MODULE in command
                and parent is not None
                and LAUNCHER_MODULE in parent.cmdline()
            )
            if STUB_MODULE in command or forked:
                stubs.append(child)
        except psutil.Error:  # gone, or killed and not yet reaped
            continue
    return stubs


def stub_kills(server: Server, kills: int, connections: int) -> dict[str, Any]:
    """SIGKILL the slow model's stub process `kills` times under load from `connections`
    clients: requests fail only while it is down, every request is answered, and a new stub
    serves after each kill."""
    host, port = server.urls["http"].rsplit(":", 1)
    pid = server.process.pid
    request = request_bytes(SLOW_PATH, BODY, {"Content-Type": "application/json"})
    stop = False

    def next_request() -> bytes | None:
        return None if stop else request

    async def scenario() -> Tally:
        nonlocal stop
        load = asyncio.create_task(send_all(host, int(port), next_request, connections))
        for _ in range(kills):
            await asyncio.sleep(1.0)
            old = {p.pid for p in _stubs(pid)}
            for stub in _stubs(pid):
                stub.kill()
            deadline = time.monotonic() + 60
            while not ({p.pid for p in _stubs(pid)} - old) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        stop = True
        return await load

    tally = asyncio.run(scenario())
    errors = Counter(
        re.sub(rb"\d+", b"N", body).decode(errors="replace") for body in tally.error_bodies
    )
    print(
        f"stub kills: {kills} SIGKILLs of the python model's process under load from "
        f"{connections} connections: {dict(tally.codes)} over {tally.sent():,} requests; "
        f"errors {dict(errors)}"
    )
    after = httpx.post(
        f"http://{server.urls['http']}{SLOW_PATH}",
        content=BODY,
        headers={"content-type": "application/json"},
        timeout=60,
    )
    if after.status_code != 200 or set(tally.codes) - {200, 500, 503}:
        raise SystemExit(f"stub kills: the model did not come back ({after.status_code})")
    return {
        "kills": kills,
        "connections": connections,
        "requests": tally.sent(),
        "answers": {str(code): n for code, n in tally.codes.items()},
        "errors": dict(errors),
    }


def disconnects(server: Server, count: int) -> dict[str, Any]:
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
    fds_after = _fds(pid)
    print(
        f"disconnects: {count:,} clients gone mid-request; open descriptors {fds_before} before, "
        f"{fds_after} after"
    )
    return {"clients": count, "descriptors_before": fds_before, "descriptors_after": fds_after}


def refusals(server: Server, count: int) -> dict[str, Any]:
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
    return {"oversized": count, "half_sent": 1, "answers": {str(c): n for c, n in codes.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--burst", type=int, default=50_000)
    parser.add_argument("--connections", type=int, default=512)
    parser.add_argument("--disconnects", type=int, default=10_000)
    parser.add_argument("--oversized", type=int, default=1000)
    parser.add_argument("--fuzz", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3, help="throughput runs before, after")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stub-kills", type=int, default=10)
    parser.add_argument("--window-ms", type=int, default=2000)
    smoke = {
        "burst": 500,
        "connections": 32,
        "disconnects": 100,
        "oversized": 10,
        "fuzz": 1000,
        "repeats": 1,
        "stub_kills": 1,
        "window_ms": 1000,
    }
    args = parse_with_smoke(parser, smoke)
    binary = install("install_perf_analyzer.sh")
    with tempfile.TemporaryDirectory(prefix="reliability-") as scratch_dir:
        scratch = Path(scratch_dir)
        flags = ("--http-max-input-size", str(LIMIT), "--http-read-timeout", "2")
        with ours(_repository(scratch), scratch / "server.log", flags) as server:
            runs: dict[str, list[float]] = {"warm-up": [], "before": [], "after": []}
            measured: list[dict[str, Any]] = []  # every run: cell is the label

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
                    measured.append(asdict(run))

            throughput("warm-up")  # a fresh server's first runs pay for first allocations
            for _ in range(args.repeats):
                throughput("before")
            steps = {"idle_before": idle_cpu(server, "before")}
            steps["burst"] = burst(server, args.burst, args.connections)
            steps["fuzz"] = fuzz(server, args.fuzz, 32, args.seed)
            steps["disconnects"] = disconnects(server, args.disconnects)
            steps["stub_kills"] = stub_kills(server, args.stub_kills, 16)
            steps["refusals"] = refusals(server, args.oversized)
            steps["idle_after"] = idle_cpu(server, "after")
            for _ in range(args.repeats):
                throughput("after")
            if runs["before"] and runs["after"]:
                ratio = statistics.median(runs["after"]) / statistics.median(runs["before"])
                print(
                    f"simple c8: before {median_range(runs['before'], ',.0f')}, after "
                    f"{median_range(runs['after'], ',.0f')} infer/s: after / before {ratio:.2f}"
                )
    record = {
        **header("reliability"),
        "settings": {
            **{name: value for name, value in vars(args).items() if name != "output"},
            "server_flags": list(flags),
            "throughput": "simple, HTTP, c8, perf_analyzer 2.51 -s 20 -r 15, up to 3 attempts",
        },
        "throughput_runs": measured,
        "steps": steps,
    }
    write_record("reliability", record, args.output)


if __name__ == "__main__":
    run_main(main)
