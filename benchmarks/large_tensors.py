"""Large tensors: a 600 KB FP32 input [3, 224, 224] whose model costs nothing (ONNX ReduceMean,
`large_model.py`), served by this checkout (in one process, and with N front-end processes
for each N of --workers, named ours-wN), by an earlier revision of ours, and by NVIDIA Triton
2.51 (a python model doing np.mean, when its peer is installed), HTTP and gRPC, measured by the
real perf_analyzer, all servers interleaved (before, ours, triton, before, ours, ...); plus
onnxruntime in-process on the same input as the ceiling.

    python benchmarks/large_tensors.py                       # before = ca8a635, with Triton
    python benchmarks/large_tensors.py --a-revision HEAD~3 --no-triton --repeats 5

The servers start once on free 127.0.0.1 ports; every server's output is checked with
tritonclient first. Prints every run, then per cell each server's median [range] infer/s and
p95, server CPU seconds per 1,000 requests (its whole process tree) and perf_analyzer's own
CPU seconds per 1,000 requests, the ratios ours / before and ours / triton of the median
throughputs, and what the machine's cores allow: cores / (server + client CPU per request),
and cores / client CPU per request (a server that cost nothing), since client and servers share
these cores. The load average before and after (the machine may be shared: CPU per request
moves less with the load than throughput).
Installs perf_analyzer on first use; Triton only with --install-triton
(scripts/install_triton_peer.sh), else when already there.

Raw results: benchmarks/results/large_tensors.json, or large_tensors-<protocol>.json when
--protocols picks one: results_record's header, the settings (the 'before' revision, whether
Triton ran), the load averages, the in-process rate and every run (server, protocol,
concurrency, infer/s, p95 in us, server and client CPU s per 1,000 requests). `--smoke` (c1,
one repeat, 1 s windows) writes into a new temporary folder, `--output` into the one it names.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

import large_model
import onnxruntime as ort
from peer import (
    ROOT,
    Run,
    Server,
    check_outputs,
    install,
    measure,
    measure_settings,
    median_range,
    ours,
    revision,
    run_main,
    triton,
    worktree,
)
from results_record import header, parse_with_smoke, write_record
from usage import UsageMonitor

DEFAULT_BEFORE = "ca8a635"  # the revision before issue 32
TRITON_WRAPPER = ROOT / ".cache" / "triton-peer" / "bin" / "tritonserver"


def in_process(seconds: float = 2.0) -> float:
    """onnxruntime on one request's input at a time, numpy in and out: inferences/s."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(
        large_model.onnx_model().SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    feeds, _ = large_model.reference()
    for _ in range(50):
        session.run(None, feeds)
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        session.run(None, feeds)
        count += 1
    return count / (time.perf_counter() - start)


def _triton_wrapper(install_it: bool) -> Path | None:
    if install_it:
        return install("install_triton_peer.sh")
    if TRITON_WRAPPER.is_file():
        script = ROOT / "scripts" / "install_triton_peer.sh"  # checks the libraries resolve
        check = subprocess.run(["bash", str(script)], capture_output=True, timeout=900)
        return TRITON_WRAPPER if check.returncode == 0 else None
    return None


def _summary(
    runs: list[Run], cpu: dict[Run, float], client_cpu: dict[Run, float], servers: list[str]
) -> None:
    cores = os.cpu_count() or 1
    print()
    print(
        "median [range] infer/s, p95 ms, server and client (perf_analyzer) CPU s per 1,000 "
        f"requests, what {cores} cores allow at those costs; ratios of medians"
    )
    for cell, concurrency in sorted({(r.cell, r.concurrency) for r in runs}):
        medians: dict[str, float] = {}
        for name in servers:
            key = (cell, concurrency, name)
            side = [r for r in runs if (r.cell, r.concurrency, r.server) == key]
            if not side:
                continue
            rates = [r.infer_per_s for r in side]
            p95 = [r.p95_us / 1000 for r in side]
            cpu_s = [cpu[r] for r in side if r in cpu]
            client_s = [client_cpu[r] for r in side if r in client_cpu]
            medians[name] = statistics.median(rates)
            print(
                f"{cell} c{concurrency} {name:>7}: {median_range(rates, ',.0f')} infer/s, "
                f"p95 {median_range(p95, '.2f')} ms, CPU {median_range(cpu_s, '.3f')} s, "
                f"client {median_range(client_s, '.3f')} s, "
                f"{_ceilings(cores, cpu_s, client_s)}, n={len(side)}"
            )
        ratios = [
            f"{name} / {other} {medians[name] / medians[other]:.2f}"
            for name in medians
            if name.startswith("ours")
            for other in ("before", "triton")
            if other in medians
        ]
        if ratios:
            print(f"{cell} c{concurrency}: {', '.join(ratios)}")


def _ceilings(cores: int, server_s: list[float], client_s: list[float]) -> str:
    """What `cores` allow at the median CPU costs per 1,000 requests: with this server and
    this client, and with the client alone."""
    if not server_s or not client_s:
        return "cores allow -"
    server, client = statistics.median(server_s), statistics.median(client_s)
    both = cores * 1000 / (server + client) if server + client > 0 else float("inf")
    alone = cores * 1000 / client if client > 0 else float("inf")
    return f"cores allow {both:,.0f} (client alone {alone:,.0f}) infer/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a-revision", default=DEFAULT_BEFORE, help="'before': this revision")
    protocols = ("http", "grpc")
    parser.add_argument("--protocols", nargs="+", default=list(protocols), choices=protocols)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window-ms", type=int, default=3000)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument(
        "--workers",
        type=int,
        nargs="*",
        default=[2],
        help="also ours with these --workers counts (named ours-wN); none: one process only",
    )
    parser.add_argument("--no-triton", action="store_true", help="leave Triton out")
    parser.add_argument("--install-triton", action="store_true")
    args = parse_with_smoke(parser, {"concurrency": [1], "repeats": 1, "window_ms": 1000})

    binary = install("install_perf_analyzer.sh")
    wrapper = None if args.no_triton else _triton_wrapper(args.install_triton)
    print(f"ours {revision()}; before: {args.a_revision}; triton: {wrapper or 'not installed'}")
    load_at_start = os.getloadavg()[0]
    print(f"machine: {os.cpu_count()} cores, load average {load_at_start:.2f}")
    in_process_rate = in_process()
    print(f"in-process onnxruntime, one request at a time: {in_process_rate:,.0f} infer/s")
    runs: list[Run] = []
    cpu: dict[Run, float] = {}
    client_cpu: dict[Run, float] = {}
    with tempfile.TemporaryDirectory() as scratch_name, ExitStack() as stack:
        scratch = Path(scratch_name)
        large_model.write_model(scratch / "repository")
        before_code = stack.enter_context(worktree(args.a_revision, scratch / "before"))
        servers: list[Server] = [
            stack.enter_context(
                ours(scratch / "repository", scratch / "before.log", (), "before", before_code)
            ),
            stack.enter_context(ours(scratch / "repository", scratch / "ours.log", (), "ours")),
        ]
        for count in args.workers:
            name = f"ours-w{count}"
            flags = ("--workers", str(count))
            servers.append(
                stack.enter_context(
                    ours(scratch / "repository", scratch / f"{name}.log", flags, name)
                )
            )
        if wrapper is not None:
            large_model.write_model(scratch / "peer", "python")
            peer = triton(wrapper, scratch / "peer", scratch / "triton.log")
            servers.append(stack.enter_context(peer))
        inputs, expected = large_model.reference()
        for server in servers:
            for protocol in args.protocols:
                check_outputs(server, protocol, large_model.NAME, inputs, expected, 1e-5)
        for protocol in args.protocols:
            for concurrency in args.concurrency:
                for repeat in range(1, args.repeats + 1):
                    for server in servers:
                        with UsageMonitor(server, large_model.NAME) as monitor:
                            run = measure(
                                args.attempts,
                                f"{protocol} c{concurrency} #{repeat} {server.name:>7}",
                                binary,
                                server,
                                large_model.NAME,
                                protocol,
                                concurrency,
                                args.window_ms,
                                scratch,
                                protocol,
                            )
                        if run is not None:
                            runs.append(run)
                            usage = monitor.usage
                            if usage is not None and usage.cpu_s_per_1000 is not None:
                                cpu[run] = usage.cpu_s_per_1000
                            if usage is not None and usage.client_cpu_s_per_1000 is not None:
                                client_cpu[run] = usage.client_cpu_s_per_1000
    _summary(runs, cpu, client_cpu, [s.name for s in servers])
    load_at_end = os.getloadavg()[0]
    print(f"load average at the end: {load_at_end:.2f}")
    record = {
        **header("large_tensors"),
        "settings": {
            "before_revision": args.a_revision,
            "triton": str(wrapper) if wrapper is not None else None,
            "servers": [s.name for s in servers],
            **measure_settings(args),
        },
        "load_average_1m": {"start": round(load_at_start, 2), "end": round(load_at_end, 2)},
        "in_process_infer_per_s": in_process_rate,
        "cores": os.cpu_count(),
        "runs": [
            {
                **asdict(run),
                "cpu_s_per_1000": cpu.get(run),
                "client_cpu_s_per_1000": client_cpu.get(run),
            }
            for run in runs
        ],
    }
    variant = "" if sorted(args.protocols) == sorted(protocols) else "-" + "+".join(args.protocols)
    write_record(f"large_tensors{variant}", record, args.output)


if __name__ == "__main__":
    run_main(main)
