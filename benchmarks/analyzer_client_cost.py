"""What the analyzer's load generator costs, beside the real perf_analyzer.

Runs `autotune serve` on the bundled repository, then drives `simple` at one concurrency with
  1. the analyzer's in-process driver (one process), and
  2. perf_analyzer (when `scripts/install_perf_analyzer.sh` has installed it),
and prints each client's requests/s and CPU per request, counting requests with the server's
statistics and CPU with psutil (user + system of the client's process, children included).
Run: python benchmarks/analyzer_client_cost.py [--seconds 5] [--concurrency 8]

Raw results: benchmarks/results/analyzer_client_cost.json (results_record's header, the
settings, whether perf_analyzer was installed, and per client the server's request count, the
seconds and client CPU seconds it was counted over, requests/s and CPU per request, then the
ratio of CPU per request, analyzer / perf_analyzer, when both ran). `--smoke` (1 s a client)
writes into a new temporary folder, `--output` into the one it names.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from peer import cpu_seconds, success_count
from results_record import header, parse_with_smoke, write_record

from analyzer.aio import run
from analyzer.load.base import LoadLevel
from analyzer.load.factory import connect
from analyzer.load.options import LoadOptions
from common.serve_process import ServeProcessError, start_serve_process, stop_serve_process
from protocol.client.http import HttpClient

ROOT = Path(__file__).resolve().parents[1]
PERF_ANALYZER = ROOT / ".cache" / "perf_analyzer" / "bin" / "perf_analyzer"
MODEL = "simple"
OURS = "analyzer (1 process)"
THEIRS = "perf_analyzer"


@dataclass(frozen=True)
class ClientRun:
    """One client driving the model: the server's count and the client's CPU over one span."""

    tool: str
    requests: int  # the server's success count over the span
    seconds: float
    cpu_seconds: float  # the client's user + system, children included

    @property
    def per_second(self) -> float:
        """Requests the server answered per second."""
        return self.requests / self.seconds

    @property
    def cpu_per_request(self) -> float:
        """Client CPU seconds per request."""
        return self.cpu_seconds / self.requests

    def row(self) -> dict[str, Any]:
        """The run as recorded: its fields, requests/s and CPU microseconds per request."""
        return {
            **asdict(self),
            "requests_per_s": self.per_second,
            "cpu_us_per_request": self.cpu_per_request * 1e6,
        }


def start_server(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`autotune serve` on the bundled repository: its process and host:port."""
    try:
        return start_serve_process(ROOT / "model_repository", log, timeout_s=120)
    except ServeProcessError as exc:
        raise SystemExit(str(exc)) from None


async def served(url: str) -> int:
    """The server's success count for the model so far."""
    client = HttpClient(url)
    stats = await client.statistics(MODEL)
    await client.close()
    return success_count(stats)


async def ours(url: str, concurrency: int, seconds: float) -> ClientRun:
    """The analyzer's driver in this process, measured for `seconds` after a 1 s warm-up."""
    options = LoadOptions(url=url, model=MODEL, worker_processes=1)
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
    return ClientRun(OURS, count, elapsed, cpu)


def perf_analyzer(url: str, concurrency: int, seconds: float) -> ClientRun:
    """perf_analyzer at `concurrency` with windows of a third of `seconds`, over its whole run."""
    before = run(served(url))
    start = time.perf_counter()
    process = psutil.Popen(
        [
            str(PERF_ANALYZER),
            *("-m", MODEL, "-u", url, "-i", "http"),
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
    return ClientRun(THEIRS, count, elapsed, cpu)


def print_run(client: ClientRun) -> None:
    """One line for one client."""
    print(
        f"{client.tool:<20}: {client.per_second:8.0f} req/s"
        f"  {client.cpu_per_request * 1e6:6.1f} us CPU/request"
    )


def record(args: argparse.Namespace, runs: list[ClientRun], installed: bool) -> dict[str, Any]:
    """The raw results: results_record's header, the settings, every client's run and the
    ratio of CPU per request (analyzer / perf_analyzer; None unless both ran)."""
    ratio = runs[0].cpu_per_request / runs[1].cpu_per_request if len(runs) == 2 else None
    return {
        **header("analyzer_client_cost"),
        "settings": {
            "model": MODEL,
            "seconds": args.seconds,
            "concurrency": args.concurrency,
            "perf_analyzer_installed": installed,
        },
        "runs": [r.row() for r in runs],
        "cpu_per_request_ratio": ratio,
    }


def main() -> None:
    """Measure the analyzer's driver, then perf_analyzer when installed; print, write the record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parse_with_smoke(parser, {"seconds": 1.0})
    installed = PERF_ANALYZER.exists()
    runs = []
    with tempfile.TemporaryDirectory() as scratch:
        server, url = start_server(Path(scratch) / "server.log")
        try:
            runs.append(run(ours(url, args.concurrency, args.seconds)))
            print_run(runs[-1])
            if installed:
                runs.append(perf_analyzer(url, args.concurrency, args.seconds))
                print_run(runs[-1])
            else:
                print("perf_analyzer: not installed (scripts/install_perf_analyzer.sh)")
        finally:
            stop_serve_process(server)
    result = record(args, runs, installed)
    if result["cpu_per_request_ratio"] is not None:
        print(f"CPU per request, analyzer / perf_analyzer: {result['cpu_per_request_ratio']:.2f}")
    write_record("analyzer_client_cost", result, args.output)


if __name__ == "__main__":
    main()
