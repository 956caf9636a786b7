"""How much load `autotune perf` and NVIDIA's perf_analyzer each generate on this machine.

One run, one server (`autotune serve` on the bundled repository, model `simple`); the tools run
one after the other, never together, with the same windows (-p, -s, -r):

1. Request-rate capacity: each tool measures --request-rate-range R (one rate per run) for
   R = 1000, 2000, ... Two criteria, each against 95% of R:
   - reached: the CSV's Inferences/Second (a level that never stabilized writes no CSV row and
     is a miss; the mean of its last three windows, from -v, is shown for information);
   - kept up: the server's own count of successful requests per second while the tool ran,
     whatever the tool's stability rule made of the level.
   A tool is dropped after two rates in a row that meet neither; the sweep ends when both are
   dropped. Prints each tool's highest rate by each criterion and the ratios ours / theirs,
   whether the tool warned that it could not keep up, its CPU per request and the server's.
2. Fixed concurrency (1, 4, 8): both tools' throughput side by side, with the ratio.

CPU is sampled with psutil every 0.1 s on the client's process tree (worker processes
included) and on the server's; requests are the server's own success count for `simple`
(statistics extension). Both cover only the span in which that count was moving, so start-up
and the final drain are left out. Both tools run with their defaults apart from the windows
and -v. perf_analyzer's default rate mode is synchronous with 4 threads: when they are all busy
it sends late (and warns what share of the requests it delayed), so its latencies leave out
the wait. The analyzer sends on schedule whatever is outstanding (open loop), so after a stall
requests queue at the server and count in its latencies, and its rate levels fail the
stability rule more easily at the same throughput: hence the second criterion.

Installs perf_analyzer with scripts/install_perf_analyzer.sh when it is missing.
Run: python benchmarks/analyzer_capacity.py [--seconds 2] [--stability 25] [--max-trials 10]

Raw results: benchmarks/results/analyzer_capacity.json (results_record's header, the settings,
the load averages at the start and the end, and every run: tool, mode (rate or concurrency),
level, CSV infer/s and whether it stabilized, served requests/s, client and server CPU per
request, server cores, whether the tool warned, reached and kept up, exit code). `--smoke` (one
rate, concurrency 1, 0.5 s windows, 3 trials) writes into a new temporary folder, `--output`
into the one it names.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from peer import success_count
from results_record import header, parse_with_smoke, write_record

from common.serve_process import ServeProcessError, start_serve_process, stop_serve_process

ROOT = Path(__file__).resolve().parents[1]
REPOSITORY = ROOT / "model_repository"
INSTALL_SCRIPT = ROOT / "scripts" / "install_perf_analyzer.sh"
WRAPPER = ROOT / ".cache" / "perf_analyzer" / "bin" / "perf_analyzer"
MODEL = "simple"
RATES = "1000,2000,3000,4000,4500,5000,5500,6000,7000,8000,10000,12000,14000,16000,20000"
CONCURRENCIES = "1,4,8"
REACHED_SHARE = 0.95
MISSES_TO_DROP = 2
POLL_S = 0.1
# One measurement window in -v output (both tools print this).
_PASS = re.compile(r"Pass \[\d+\] throughput: ([0-9.]+) infer/sec")
OURS = "autotune perf"
THEIRS = "perf_analyzer"


@dataclass
class ToolRun:
    """One tool measuring one level (one invocation)."""

    tool: str
    mode: str  # "rate" or "concurrency"
    level: float  # the requested rate, or the concurrency
    throughput: float | None  # CSV Inferences/Second, else the last 3 windows; None: neither
    stable: bool  # the tool wrote a CSV row (the level stabilized)
    served_per_s: float  # the server's success count per second while the load ran
    requests: int  # the server's success count while the load ran
    client_cpu_us: float  # client CPU per request
    server_cpu_us: float  # server CPU per request
    server_cores: float  # server CPU seconds per second
    warned: bool  # the tool said it could not keep up
    returncode: int
    note: str = ""  # the tool's last line when it wrote no CSV row

    @property
    def reached(self) -> bool:
        """The CSV's throughput is within 95% of the level (a stable level)."""
        return (
            self.stable
            and self.throughput is not None
            and self.throughput >= REACHED_SHARE * self.level
        )

    @property
    def kept_up(self) -> bool:
        """The server answered at least 95% of the asked rate while the tool ran."""
        return self.served_per_s >= REACHED_SHARE * self.level


class TreeCpu:
    """CPU seconds (user + system) of a process and its descendants; a process that has
    exited keeps the value last sampled."""

    def __init__(self, pid: int) -> None:
        self._root = psutil.Process(pid)
        self._last: dict[int, float] = {}

    def sample(self) -> float:
        """The tree's CPU seconds now (exited processes at their last sample)."""
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            processes = []
        for process in processes:
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            self._last[process.pid] = times.user + times.system
        return sum(self._last.values())


class Server:
    """`autotune serve` on the bundled repository, with an HTTP client for its statistics and
    its process tree's CPU."""

    def __init__(self, scratch: Path) -> None:
        try:
            self.process, self.url = start_serve_process(REPOSITORY, scratch / "server.log")
        except ServeProcessError as exc:
            raise SystemExit(str(exc)) from None
        self.http = httpx.Client(base_url=f"http://{self.url}", timeout=10)
        self.cpu = TreeCpu(self.process.pid)

    def served(self) -> int:
        """The server's success count for the model so far."""
        stats = self.http.get(f"/v2/models/{MODEL}/stats").json()
        return success_count(stats)

    def stop(self) -> None:
        """Close the client and stop the server."""
        self.http.close()
        stop_serve_process(self.process)


def perf_analyzer() -> Path:
    """The wrapper, installed first when missing (the script is idempotent)."""
    result = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"installing perf_analyzer failed:\n{result.stderr}")
    return Path(result.stdout.strip().splitlines()[-1]) if result.stdout.strip() else WRAPPER


def measure(
    tool: str,
    command: list[str],
    mode: str,
    level: float,
    server: Server,
    csv_path: Path,
) -> ToolRun:
    """Run one tool at one level, sampling CPU and the server's count while it runs."""
    csv_path.unlink(missing_ok=True)
    samples: list[tuple[float, float, float, int]] = []  # time, client, server, served
    with tempfile.TemporaryFile() as output:
        process = psutil.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        client = TreeCpu(process.pid)
        while process.poll() is None:
            samples.append(
                (time.perf_counter(), client.sample(), server.cpu.sample(), server.served())
            )
            time.sleep(POLL_S)
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    throughput = None
    if csv_path.exists():
        with csv_path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        if rows:
            throughput = float(rows[0]["Inferences/Second"])
    stable = throughput is not None
    passes = [float(value) for value in _PASS.findall(text)]
    if throughput is None and passes:
        throughput = sum(passes[-3:]) / len(passes[-3:])
    counts = [sample[3] for sample in samples]
    moving = [i for i in range(1, len(counts)) if counts[i] > counts[i - 1]]
    run = ToolRun(
        tool=tool,
        mode=mode,
        level=level,
        throughput=throughput,
        stable=stable,
        served_per_s=0.0,
        requests=0,
        client_cpu_us=0.0,
        server_cpu_us=0.0,
        server_cores=0.0,
        warned="keep up" in text.lower(),
        returncode=process.returncode,
    )
    if not stable:
        lines = [line for line in text.strip().splitlines() if line.strip()]
        run.note = lines[-1].strip()[:160] if lines else f"exit code {process.returncode}"
    if len(moving) >= 2:
        first, last = samples[moving[0]], samples[moving[-1]]
        requests = last[3] - first[3]
        elapsed = last[0] - first[0]
        run.requests = requests
        run.served_per_s = requests / elapsed
        run.client_cpu_us = (last[1] - first[1]) / requests * 1e6
        run.server_cpu_us = (last[2] - first[2]) / requests * 1e6
        run.server_cores = (last[2] - first[2]) / elapsed
    return run


def commands(
    binary: Path, server: Server, args: argparse.Namespace, load: list[str], csv_path: Path
) -> dict[str, list[str]]:
    """Each tool's command line for one level (`load`), with the same windows and CSV path."""
    windows = [
        *("-p", str(int(args.seconds * 1000))),
        *("-s", str(args.stability)),
        *("-r", str(args.max_trials)),
        *("-f", str(csv_path)),
        "-v",
    ]
    target = ["-m", MODEL, "-u", server.url, "-i", "http", *load, *windows]
    ours = [sys.executable, "-c", "from tuner.cli import main; main()", "perf", *target]
    return {THEIRS: [str(binary), *target], OURS: ours}


def rate_levels(args: argparse.Namespace) -> list[float]:
    """The request rates of --rates, in the order given."""
    return [float(rate) for rate in args.rates.split(",")]


def concurrency_levels(args: argparse.Namespace) -> list[int]:
    """The concurrencies of --concurrencies, in the order given."""
    return [int(concurrency) for concurrency in args.concurrencies.split(",")]


def rate_sweep(
    binary: Path, server: Server, args: argparse.Namespace, scratch: Path
) -> list[ToolRun]:
    """Each tool at each rate in turn, a tool dropped after MISSES_TO_DROP misses in a row."""
    runs: list[ToolRun] = []
    misses = {THEIRS: 0, OURS: 0}
    for rate in rate_levels(args):
        active = [tool for tool, missed in misses.items() if missed < MISSES_TO_DROP]
        if not active:
            break
        csv_path = scratch / "rate.csv"
        load = ["--request-rate-range", f"{rate:g}"]
        for tool in active:
            command = commands(binary, server, args, load, csv_path)[tool]
            run = measure(tool, command, "rate", rate, server, csv_path)
            runs.append(run)
            misses[tool] = 0 if run.reached or run.kept_up else misses[tool] + 1
            print_run(run)
    return runs


def concurrency_runs(
    binary: Path, server: Server, args: argparse.Namespace, scratch: Path
) -> list[ToolRun]:
    """Both tools at each concurrency, one after the other."""
    runs = []
    for concurrency in concurrency_levels(args):
        csv_path = scratch / "concurrency.csv"
        load = ["--concurrency-range", str(concurrency)]
        for tool, command in commands(binary, server, args, load, csv_path).items():
            run = measure(tool, command, "concurrency", concurrency, server, csv_path)
            runs.append(run)
            print_run(run)
    return runs


def print_run(run: ToolRun) -> None:
    """One line for one run, as it finishes."""
    got = f"{run.throughput:9.1f}" if run.throughput is not None else "     none"
    got += "  " if run.stable else "*u"
    state = ""
    if run.mode == "rate":
        state = f"  reached {_yes(run.reached)}  kept up {_yes(run.kept_up)}"
    print(
        f"  {run.tool:<14} {run.mode:<11} {run.level:>6g}  csv {got}/s  served"
        f" {run.served_per_s:7.1f}/s{state}  warned {_yes(run.warned)}"
        f"  client {run.client_cpu_us:5.1f} us/req  server {run.server_cpu_us:5.1f} us/req"
        f" ({run.server_cores:.2f} cores)" + (f"  [{run.note[:70]}]" if run.note else ""),
        flush=True,
    )


def _yes(value: bool) -> str:
    return "yes" if value else "no "


def summarize(rate_runs: list[ToolRun], concurrency: list[ToolRun]) -> None:
    """Each tool's highest rate by each criterion, then the fixed-concurrency table."""
    print(
        f"\nRequest-rate capacity on `{MODEL}` (95% of the rate; *u: never stabilized, so no"
        " CSV row: the mean of its last 3 windows is shown)"
    )
    criteria = (
        ("reached (CSV)", lambda r: r.reached),
        ("kept up (served)", lambda r: r.kept_up),
    )
    for name, meets in criteria:
        best: dict[str, ToolRun | None] = {}
        for tool in (OURS, THEIRS):
            passing = [r for r in rate_runs if r.tool == tool and meets(r)]
            top = max(passing, key=lambda r: r.level, default=None)
            best[tool] = top
            if top is None:
                print(f"  {name:<17} {tool:<14} no rate")
                continue
            print(
                f"  {name:<17} {tool:<14} {top.level:>6g}/s (csv {_fmt(top)}, served"
                f" {top.served_per_s:.1f}/s, warned {_yes(top.warned).strip()}); client"
                f" {top.client_cpu_us:.1f} us CPU/req, server {top.server_cpu_us:.1f} us CPU/req"
                f" ({top.server_cores:.2f} cores)"
            )
        ours, theirs = best[OURS], best[THEIRS]
        if ours is not None and theirs is not None:
            print(f"  {name:<17} highest rate, ours / theirs: {ours.level / theirs.level:.2f}")

    print(f"\nFixed concurrency on `{MODEL}` (infer/s; CPU in us per request)")
    print(
        f"  {'conc':>4} {THEIRS:>14} {OURS:>14} {'ratio':>6}"
        "   client CPU (pa / ours)   server CPU (pa / ours)"
    )
    for level in sorted({r.level for r in concurrency}):
        pair = {r.tool: r for r in concurrency if r.level == level}
        a, b = pair.get(THEIRS), pair.get(OURS)
        if a is None or b is None:
            continue
        ratio = f"{b.throughput / a.throughput:.2f}" if a.throughput and b.throughput else "-"
        print(
            f"  {level:>4g} {_fmt(a):>14} {_fmt(b):>14} {ratio:>6}"
            f"   {a.client_cpu_us:8.1f} / {b.client_cpu_us:<8.1f}"
            f"   {a.server_cpu_us:8.1f} / {b.server_cpu_us:<8.1f}"
        )


def _fmt(run: ToolRun) -> str:
    if run.throughput is None:
        return "none"
    return f"{run.throughput:.1f}" + ("" if run.stable else " *u")


def record(
    args: argparse.Namespace, runs: list[ToolRun], load_averages: dict[str, float]
) -> dict[str, Any]:
    """The raw results: results_record's header, the settings, the 1-minute load averages at
    the start and the end, and every run with its two criteria."""
    return {
        **header("analyzer_capacity"),
        "settings": {
            "model": MODEL,
            "window_ms": int(args.seconds * 1000),
            "stability_percent": args.stability,
            "max_trials": args.max_trials,
            "rates": rate_levels(args),
            "concurrencies": concurrency_levels(args),
            "reached_share": REACHED_SHARE,
            "misses_to_drop": MISSES_TO_DROP,
            "cores": psutil.cpu_count(),
        },
        "load_average_1m": load_averages,
        "runs": [{**asdict(r), "reached": r.reached, "kept_up": r.kept_up} for r in runs],
    }


def main() -> None:
    """Measure both tools (rate sweep, then fixed concurrency), print them, write the record."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measurement window (-p)")
    parser.add_argument("--stability", type=float, default=25.0, help="-s, percent")
    parser.add_argument("--max-trials", type=int, default=10, help="-r")
    parser.add_argument("--rates", default=RATES, help="request rates to sweep, ascending")
    parser.add_argument("--concurrencies", default=CONCURRENCIES)
    smoke = {"seconds": 0.5, "max_trials": 3, "rates": "1000", "concurrencies": "1"}
    args = parse_with_smoke(parser, smoke)
    binary = perf_analyzer()
    with tempfile.TemporaryDirectory() as name:
        scratch = Path(name)
        server = Server(scratch)
        try:
            load_averages = {"start": round(os.getloadavg()[0], 2)}
            print(
                f"server {server.url}; windows -p {int(args.seconds * 1000)} -s {args.stability:g}"
                f" -r {args.max_trials}; {psutil.cpu_count()} cores; load average"
                f" {load_averages['start']:.1f}",
                flush=True,
            )
            rate_runs = rate_sweep(binary, server, args, scratch)
            concurrency = concurrency_runs(binary, server, args, scratch)
        finally:
            server.stop()
    summarize(rate_runs, concurrency)
    load_averages["end"] = round(os.getloadavg()[0], 2)
    print(f"\nload average at the end: {load_averages['end']:.1f} (1 min)")
    write_record(
        "analyzer_capacity", record(args, rate_runs + concurrency, load_averages), args.output
    )


if __name__ == "__main__":
    main()
