"""The raw results a benchmark writes: one JSON record per run, benchmarks/results/<name>.json,
headed by what a figure quoted from it needs to be checked later: which benchmark, when, on what
machine, at which revision, by which command.

    record = {**header("startup_ab"), "settings": {...}, "starts": [...]}
    write_record("startup_ab", record, args.output)   # benchmarks/results/startup_ab.json

A smoke run's figures are no measurement: its records go to a new temporary folder (or the one
--output names), never over those in benchmarks/results/. Not a script.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from peer import ROOT, revision

from common.atomic import write_text_atomic
from gate.machine import describe_machine

RESULTS = ROOT / "benchmarks" / "results"


def header(benchmark: str) -> dict[str, Any]:
    """The fields every record starts with: `benchmark`, the date (UTC, ISO 8601), the machine
    (gate.machine's description and the 1-minute load average now), the git revision of this
    checkout and the command line as run (the script's name and its arguments)."""
    return {
        "benchmark": benchmark,
        "date": datetime.now(UTC).date().isoformat(),
        "machine": {**describe_machine(), "load_average_1m": round(os.getloadavg()[0], 2)},
        "revision": revision(),
        "command": shlex.join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }


def write_record(name: str, record: Mapping[str, Any], directory: Path | None = None) -> Path:
    """Write `record` as `<directory>/<name>.json` (benchmarks/results/ unless `directory` is
    given) atomically: a reader sees the old file or the new one, never part of one. Prints
    "raw results: <path>" and returns the path."""
    path = (RESULTS if directory is None else directory) / f"{name}.json"
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")
    print(f"raw results: {path}", flush=True)
    return path


def results_directory(output: Path | None, smoke: bool) -> Path:
    """Where a run's records go: `output` when given, else a new temporary folder for a smoke
    run, else benchmarks/results/."""
    if output is not None:
        return output
    if smoke:
        return Path(tempfile.mkdtemp(prefix="benchmark-smoke-"))
    return RESULTS


def add_output_option(parser: argparse.ArgumentParser) -> None:
    """--output FOLDER: where the raw results go (`results_directory` resolves it)."""
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FOLDER",
        help="folder of the raw results (default: benchmarks/results; --smoke: a new "
        "temporary one)",
    )


def record_name(base: str, parts: Mapping[str, tuple[Sequence[str], Sequence[str]]]) -> str:
    """`base`, then each part (chosen, every one) whose choice is not every one, its items
    joined by "+": a run of a part does not overwrite the whole run's record."""
    names = [base]
    for chosen, every in parts.values():
        if sorted(chosen) != sorted(every):
            names.append("+".join(chosen))
    return "-".join(names)


def parse_with_smoke(
    parser: argparse.ArgumentParser, smoke: Mapping[str, Any]
) -> argparse.Namespace:
    """`parser`'s arguments, plus --smoke (the values `smoke` holds, by destination, in place of
    the defaults; options given still count) and --output FOLDER; `output` comes back as the
    folder the records go to (`results_directory`)."""
    shown = ", ".join(f"--{name.replace('_', '-')} {_shown(v)}" for name, v in smoke.items())
    parser.add_argument("--smoke", action="store_true", help=f"a short check: {shown}")
    add_output_option(parser)
    args = parser.parse_args()
    unknown = set(smoke) - set(vars(args))
    if unknown:
        raise ValueError(f"smoke settings for options the parser lacks: {sorted(unknown)}")
    if args.smoke:
        # Parsed again over the smoke defaults, so that an option given on the command line wins.
        parser.set_defaults(**smoke)
        args = parser.parse_args()
    args.output = results_directory(args.output, args.smoke)
    return args


def _shown(value: Any) -> str:
    """`value` as it would be typed after its option (a list: its items, space-separated)."""
    if isinstance(value, list | tuple):
        return " ".join(map(str, value))
    return str(value)
