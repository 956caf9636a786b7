"""Start-up of this checkout against another revision, interleaved: launch to ready, and the CPU
the server's process tree spent by then.

    python benchmarks/startup_ab.py [--base HEAD~1] [--repository model_repository] [--rounds 8]

The base revision is checked out in a temporary git worktree; each server runs its own code
(the console script from its own folder, that folder first on the import path) on the same
repository, free 127.0.0.1 ports, the clock and readiness as benchmarks/startup.py has them.
Rounds alternate which goes first. Prints each start, then per side the median [range] of the
seconds to ready and of the CPU seconds, and the ratios this / base per round.

Raw results: benchmarks/results/startup_ab.json (results_record's header, the settings and
every start: round, side, seconds to ready, CPU seconds); `--smoke` (one round) writes into a
new temporary folder, `--output` into the one it names.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from peer import free_port, wait_until_ready, worktree
from results_record import header, parse_with_smoke, write_record
from startup import POLL_INTERVAL_S, READY_TIMEOUT_S, ours_command
from usage import tree_cpu_s

from common.serve_process import serve_env, stop_serve_process

ROOT = Path(__file__).resolve().parents[1]


def start_once(code: Path, repository: Path, log: Path) -> tuple[float, float]:
    """(seconds to ready, CPU seconds of the server's process tree at ready) of the server whose
    code is in `code`."""
    port = free_port()
    # A revision from before tie_to_parent ends only with the stop below.
    env = serve_env(code)
    with log.open("wb") as out:
        started = time.perf_counter()
        process = subprocess.Popen(
            ours_command(repository, port),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=code,
            env=env,
        )
    try:
        wait_until_ready(process, f"127.0.0.1:{port}", log, READY_TIMEOUT_S, POLL_INTERVAL_S)
        seconds = time.perf_counter() - started
        return seconds, tree_cpu_s(process.pid)
    finally:
        stop_serve_process(process)


def _describe(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.2f}{unit} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="HEAD~1", help="the revision to compare with")
    parser.add_argument("--repository", type=Path, default=ROOT / "model_repository")
    parser.add_argument("--rounds", type=int, default=8)
    args = parse_with_smoke(parser, {"rounds": 1})
    repository = args.repository.resolve()
    base_rev = (
        subprocess.run(
            ["git", "rev-parse", "--short", args.base], cwd=ROOT, check=True, capture_output=True
        )
        .stdout.decode()
        .strip()
    )
    with (
        tempfile.TemporaryDirectory(prefix="startup-ab-") as scratch,
        worktree(base_rev, Path(scratch) / "base") as base,
    ):
        sides = {"this checkout": ROOT, f"base {base_rev}": base}
        seconds: dict[str, list[float]] = {name: [] for name in sides}
        cpu: dict[str, list[float]] = {name: [] for name in sides}
        starts: list[dict[str, Any]] = []
        for round_number in range(args.rounds):
            order = list(sides.items())
            if round_number % 2:
                order.reverse()
            for name, code in order:
                wall, used = start_once(code, repository, Path(scratch) / "server.log")
                seconds[name].append(wall)
                cpu[name].append(used)
                starts.append(
                    {"round": round_number + 1, "side": name, "ready_s": wall, "cpu_s": used}
                )
                print(f"#{round_number + 1} {name}: ready in {wall:.2f} s, CPU {used:.2f} s")
        this, other = list(sides)
        for name in sides:
            ready_text = _describe(seconds[name], " s")
            print(f"{name}: ready {ready_text}, CPU {_describe(cpu[name], ' s')}")
        for label, values in (("ready", seconds), ("CPU", cpu)):
            ratios = [a / b for a, b in zip(values[this], values[other], strict=True)]
            print(f"{label} {this} / {other}: {_describe(ratios)}")
    record = {
        **header("startup_ab"),
        "settings": {
            "base": args.base,
            "base_revision": base_rev,
            "repository": str(repository),
            "rounds": args.rounds,
            "poll_interval_s": POLL_INTERVAL_S,
        },
        "starts": starts,
    }
    write_record("startup_ab", record, args.output)


if __name__ == "__main__":
    main()
