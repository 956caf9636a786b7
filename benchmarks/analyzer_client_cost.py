"""What the analyzer's load generator costs, beside the real perf_analyzer.

Runs `autotune serve` on the bundled repository, then drives `simple` at one concurrency with
  1. the analyzer's in-process driver (one process), and
  2. perf_analyzer (when `scripts/install_perf_analyzer.sh` has installed it),
and prints each client's requests/s and CPU per request, counting requests with the server's
statistics and CPU with psutil (user + system of the client's process, children included).
Run: python benchmarks/analyzer_client_cost.py [--seconds 5] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from analyzer.aio import run
from analyzer.load.base import LoadLevel
from analyzer.load.factory import connect
from analyzer.load.options import LoadOptions
from common.serve_process import ServeProcessError, start_serve_process, stop_serve_process
from protocol.client.http import HttpClient

ROOT = Path(__file__).resolve().parents[1]
PERF_ANALYZER = ROOT / ".cache" / "perf_analyzer" / "bin" / "perf_analyzer"


def start_server(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    try:
        return start_serve_process(ROOT / "model_repository", log, timeout_s=120)
    except ServeProcessError as exc:
        raise SystemExit(str(exc)) from None


async def served(url: str) -> int:
    client = HttpClient(url)
    stats = await client.statistics("simple")
    await client.close()
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def cpu_seconds(process: psutil.Process) -> float:
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


async def ours(url: str, concurrency: int, seconds: float) -> tuple[float, float]:
    options = LoadOptions(url=url, model="simple", worker_processes=1)
    connected = await connect(options)
    driver = connected.driver
    await driver.start(LoadLevel(concurrency=concurrency))
    await asyncio.sleep(1.0)  # warm up
    await driver.collect()
    me = psutil.Process()
    count_before, cpu_before, start = await served(url), cpu_seconds(me), time.perf_counter()
    await asyncio.sleep(seconds)
    count = await served(url) - count_before
    cpu, elapsed = cpu_seconds(me) - cpu_before, time.perf_counter() - start
    await driver.stop()
    await connected.close()
    return count / elapsed, cpu / count


def perf_analyzer(url: str, concurrency: int, seconds: float) -> tuple[float, float]:
    before = run(served(url))
    start = time.perf_counter()
    process = psutil.Popen(
        [
            str(PERF_ANALYZER),
            *("-m", "simple", "-u", url, "-i", "http"),
            *("--concurrency-range", str(concurrency)),
            *("-p", str(int(seconds * 1000 / 3)), "-s", "50"),
        ],
        stdout=subprocess.DEVNULL,
    )
    cpu = 0.0
    while process.poll() is None:
        cpu = max(cpu, cpu_seconds(process))
        time.sleep(0.05)
    elapsed = time.perf_counter() - start
    count = run(served(url)) - before
    if process.returncode != 0 or count == 0:
        raise SystemExit(f"perf_analyzer failed with exit code {process.returncode}")
    return count / elapsed, cpu / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        server, url = start_server(Path(scratch) / "server.log")
        try:
            rate, cost = run(ours(url, args.concurrency, args.seconds))
            print(f"analyzer (1 process): {rate:8.0f} req/s  {cost * 1e6:6.1f} us CPU/request")
            if PERF_ANALYZER.exists():
                pa_rate, pa_cost = perf_analyzer(url, args.concurrency, args.seconds)
                print(
                    f"perf_analyzer       : {pa_rate:8.0f} req/s"
                    f"  {pa_cost * 1e6:6.1f} us CPU/request"
                )
                print(f"CPU per request, analyzer / perf_analyzer: {cost / pa_cost:.2f}")
            else:
                print("perf_analyzer: not installed (scripts/install_perf_analyzer.sh)")
        finally:
            stop_serve_process(server)


if __name__ == "__main__":
    main()
