"""Our server against itself under two sets of flags, side by side: e.g. the native HTTP front
end against uvicorn's, on the same model, same load, same machine.

Both servers start once on free 127.0.0.1 ports, serving a copy of the bundled `--model`; their
outputs are checked with tritonclient before anything is measured. NVIDIA's perf_analyzer then
measures each protocol and concurrency with the two servers interleaved (A, B, A, B, ...),
`--repeats` times each; each run also records the server's CPU seconds (its whole process tree)
per 1,000 requests. The script prints every run, then per cell the median [range] of each side
and the ratios B / A of the median throughput and of the median CPU per request.

    python benchmarks/ours_ab.py                       # native HTTP front end (B) vs uvicorn (A)
    python benchmarks/ours_ab.py --a-flag=--grpc-front-end=grpcio --b-flag=--grpc-front-end=native \
        --protocols grpc
    python benchmarks/ours_ab.py --a-revision 196d69d --a-flag= --b-flag=   # a revision (A,
        # from a temporary git worktree) against this checkout (B), the same flags

Raw results: benchmarks/results/ours_ab-<model>.json, or ours_ab-<model>-<protocols>.json
(joined by "+") when --protocols is not the default http: results_record's header, the settings
(both sides' flags, A's revision) and every run (side, protocol, concurrency, infer/s, p95 in
us, server CPU s per 1,000 requests). `--smoke` (c1, one repeat, 1 s windows) writes into a
new temporary folder, `--output` into the one it names.

Installs perf_analyzer on first use (scripts/install_perf_analyzer.sh, under .cache/).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from peer import (
    ROOT,
    Run,
    check_outputs,
    install,
    measure,
    measure_settings,
    median_range,
    ours,
    revision,
    run_main,
    worktree,
)
from python_models import reference, simple_reference
from results_record import header, parse_with_smoke, write_record
from usage import UsageMonitor


@dataclass(frozen=True)
class Sample:
    run: Run
    cpu_s_per_1000: float | None


def _print_summary(samples: list[Sample], names: tuple[str, str]) -> None:
    print()
    print("median [range] per cell: infer/s, p95 ms, server CPU s per 1,000 requests; B / A")
    cells = sorted({(s.run.cell, s.run.concurrency) for s in samples})
    for cell, concurrency in cells:
        here = [s for s in samples if (s.run.cell, s.run.concurrency) == (cell, concurrency)]
        sides = [[s for s in here if s.run.server == name] for name in names]
        rows = []
        for name, side in zip(names, sides, strict=True):
            rates = [s.run.infer_per_s for s in side]
            p95 = [s.run.p95_us / 1000 for s in side]
            cpu = [s.cpu_s_per_1000 for s in side if s.cpu_s_per_1000 is not None]
            rows.append((rates, cpu))
            print(
                f"{cell} c{concurrency} {name}: {median_range(rates, ',.0f')} infer/s, "
                f"p95 {median_range(p95, '.2f')} ms, CPU {median_range(cpu, '.3f')} s"
            )
        (rates_a, cpu_a), (rates_b, cpu_b) = rows
        if rates_a and rates_b:
            ratio = statistics.median(rates_b) / statistics.median(rates_a)
            line = f"{cell} c{concurrency} B / A: throughput {ratio:.2f}"
            if cpu_a and cpu_b:
                cpu_ratio = statistics.median(cpu_b) / statistics.median(cpu_a)
                line += f", CPU per request {cpu_ratio:.2f}"
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="simple", choices=("simple", "digits", "resnet18"))
    parser.add_argument("--a-flag", action="append", default=None, metavar="FLAG")
    parser.add_argument("--b-flag", action="append", default=None, metavar="FLAG")
    parser.add_argument("--protocols", nargs="+", default=["http"], choices=("http", "grpc"))
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--a-revision", help="A runs this git revision's server (B: this checkout)")
    args = parse_with_smoke(parser, {"concurrency": [1], "repeats": 1, "window_ms": 1000})
    a_flags = [f for f in args.a_flag or ["--http-front-end=uvicorn"] if f]
    b_flags = [f for f in args.b_flag or ["--http-front-end=native"] if f]
    names = ("A", "B")

    binary = install("install_perf_analyzer.sh")
    a_code = f" at {args.a_revision}" if args.a_revision else ""
    print(f"ours {revision()}; A{a_code}: {' '.join(a_flags)}; B: {' '.join(b_flags)}")
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    samples: list[Sample] = []
    with tempfile.TemporaryDirectory() as scratch_name, ExitStack() as stack:
        scratch = Path(scratch_name)
        repository = scratch / "repository"
        shutil.copytree(ROOT / "model_repository" / args.model, repository / args.model)
        codes = (
            stack.enter_context(worktree(args.a_revision, scratch / "a"))
            if args.a_revision
            else None,
            None,
        )
        servers = [
            stack.enter_context(ours(repository, scratch / f"{name}.log", flags, name, code))
            for name, flags, code in zip(names, (a_flags, b_flags), codes, strict=True)
        ]
        inputs, expected = simple_reference() if args.model == "simple" else reference(args.model)
        tolerance = 0.0 if args.model == "simple" else 1e-4
        for server in servers:
            for protocol in args.protocols:
                check_outputs(server, protocol, args.model, inputs, expected, tolerance)
        for protocol in args.protocols:
            for concurrency in args.concurrency:
                for repeat in range(1, args.repeats + 1):
                    for server in servers:
                        label = f"{protocol} c{concurrency} #{repeat} {server.name}"
                        with UsageMonitor(server, args.model) as monitor:
                            run = measure(
                                args.attempts,
                                label,
                                binary,
                                server,
                                args.model,
                                protocol,
                                concurrency,
                                args.window_ms,
                                scratch,
                                protocol,
                            )
                        if run is not None:
                            usage = monitor.usage
                            cpu = usage.cpu_s_per_1000 if usage is not None else None
                            samples.append(Sample(run, cpu))
    _print_summary(samples, names)
    load_at_end = os.getloadavg()[0]
    print(f"load average at the end: {load_at_end:.2f}")
    record = {
        **header("ours_ab"),
        "settings": {
            "model": args.model,
            "a_flags": a_flags,
            "b_flags": b_flags,
            "a_revision": args.a_revision,
            **measure_settings(args),
        },
        "load_average_1m_at_end": round(load_at_end, 2),
        "runs": [{**asdict(s.run), "cpu_s_per_1000": s.cpu_s_per_1000} for s in samples],
    }
    protocols = "" if args.protocols == ["http"] else "-" + "+".join(args.protocols)
    write_record(f"ours_ab-{args.model}{protocols}", record, args.output)


if __name__ == "__main__":
    run_main(main)
