"""`autotune perf`: perf_analyzer's command line, measuring any KServe v2 server."""

from __future__ import annotations

import sys

import click
from rich.console import Console

from analyzer.aio import run
from analyzer.errors import AnalyzerError
from analyzer.perf_config import PerfFlags, build_config
from analyzer.perf_run import run_perf


@click.command(
    "perf",
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.option("-m", "model", required=True, help="Model name.")
@click.option(
    "-x", "version", default="", show_default=False, help="Model version [default: latest]."
)
@click.option(
    "-u", "url", default=None, help="Server host:port [default: localhost:8000, 8001 for gRPC]."
)
@click.option("-i", "protocol", type=click.Choice(["http", "grpc"]), default="http")
@click.option(
    "--streaming",
    is_flag=True,
    help="gRPC only: send over bidirectional streams (ModelStreamInfer), one per connection.",
)
@click.option("-b", "batch_size", type=int, default=1, help="Batch size of each request.")
@click.option("--concurrency-range", default=None, help="start:end:step [default: 1].")
@click.option("--request-rate-range", default=None, help="start:end:step, requests/s.")
@click.option(
    "--request-distribution", type=click.Choice(["constant", "poisson"]), default="constant"
)
@click.option(
    "--request-intervals",
    default=None,
    help="File of send intervals in microseconds, one a line (looped).",
)
@click.option(
    "--measurement-mode",
    type=click.Choice(["time_windows", "count_windows"]),
    default="time_windows",
)
@click.option("-p", "--measurement-interval", type=int, default=5000, help="Window, ms.")
@click.option("--measurement-request-count", type=int, default=50)
@click.option("-s", "--stability-percentage", type=float, default=10.0)
@click.option("-r", "--max-trials", type=int, default=10)
@click.option("--percentile", type=int, default=None, help="Stabilize on this percentile.")
@click.option("--warmup-request-count", type=int, default=0)
@click.option("-l", "--latency-threshold", type=float, default=0.0, help="ms; 0: no limit.")
@click.option("--binary-search", is_flag=True, help="Binary search within the range.")
@click.option(
    "--input-data", multiple=True, help="random | zero | JSON file | directory [default: random]."
)
@click.option("--shape", "shapes", multiple=True, help="NAME:d1,d2,... (repeatable).")
@click.option("--string-length", type=int, default=128)
@click.option("--string-data", default=None)
@click.option(
    "--shared-memory",
    type=click.Choice(["none", "system", "cuda"]),
    default="none",
    help="Pass tensors through shared memory regions registered with the server (system:"
    " POSIX shared memory; cuda: memory on GPU 0 shared through CUDA IPC, which needs a GPU"
    " and tritonclient's CUDA utilities (cuda-python)).",
)
@click.option(
    "--output-shared-memory-size",
    type=int,
    default=102400,
    help="Bytes of the shared memory region of each output.",
)
@click.option("--input-tensor-format", type=click.Choice(["binary", "json"]), default="binary")
@click.option("--output-tensor-format", type=click.Choice(["binary", "json"]), default="binary")
@click.option("-f", "csv", default=None, help="Write perf_analyzer's CSV here.")
@click.option("--verbose-csv", is_flag=True, help="Add Avg latency, request/response, ...")
@click.option("--profile-export-file", default=None, help="Per-request timestamps (JSON).")
@click.option(
    "--collect-metrics",
    is_flag=True,
    help="Read the server's GPU metrics while measuring (CSV columns with --verbose-csv).",
)
@click.option("--metrics-url", default=None, help="[default: the -u host, port 8002, /metrics]")
@click.option("--metrics-interval", type=int, default=None, help="ms between reads [default: 1000]")
@click.option(
    "-H", "headers", multiple=True, help="'Name: value' HTTP header or gRPC metadata (repeatable)."
)
@click.option("--sync", is_flag=True, help="Synchronous requests (the default).")
@click.option("-a", "--async", "async_mode", is_flag=True, help="Asynchronous requests.")
@click.option("--max-threads", type=int, default=None, help="[default: 16, 4 for rates]")
@click.option("--json", "json_path", default=None, help="Write the measurements as JSON.")
@click.option("--html", default=None, help="Write an HTML page with the plots (opens offline).")
@click.option("--workers", type=int, default=0, help="Load processes; 0: from the load.")
@click.option(
    "--max-connections",
    type=int,
    default=None,
    help="Request-rate modes: connections the load may open; a request due while all are "
    "busy waits (and is counted late) [default: 4096].",
)
@click.option(
    "--sequence-length",
    type=int,
    default=None,
    show_default=False,
    help="Sequence models: requests per sequence, +/- the variation [default: 20, or each"
    " data stream's steps with --input-data files].",
)
@click.option(
    "--sequence-length-variation",
    type=float,
    default=20.0,
    help="Sequence models: how far (percent) a sequence's length may be from"
    " --sequence-length, drawn uniformly.",
)
@click.option(
    "--sequence-id-range",
    default=None,
    show_default=False,
    help="Sequence models: start[:end] of the sequence ids (end excluded; ids wrap within"
    " the range) [default: from 1, no end].",
)
@click.option(
    "--num-of-sequences",
    type=int,
    default=4,
    help="Sequence models, request-rate modes: live sequences the rate is spread over.",
)
@click.option(
    "--serial-sequences",
    is_flag=True,
    help="Sequence models, request-rate modes: at most one request outstanding per sequence.",
)
@click.option("-v", "verbose", count=True, show_default=False, help="Print every window.")
def perf_command(**values: object) -> None:
    """Measure a model's throughput and latency under load, as perf_analyzer does.

    Each load level (a concurrency, or a request rate) is measured in windows until the
    last three agree within -s percent; the stable windows are merged. Prints a table,
    writes perf_analyzer's CSV with -f, JSON with --json and a self-contained HTML page
    (plots of throughput, latency and the server breakdown) with --html. Exits non-zero
    when no level could be measured (unreachable server, unknown model, bad input data,
    unstable load).
    """
    values["json"] = values.pop("json_path")
    flags = PerfFlags(**values)  # type: ignore[arg-type]
    try:
        config = build_config(flags)
    except AnalyzerError as exc:
        raise click.UsageError(str(exc)) from None
    out = Console(highlight=False, soft_wrap=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        status = run(run_perf(config, out, err))
    except AnalyzerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    sys.exit(status)
