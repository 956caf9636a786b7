"""`autotune baseline` and `autotune gate`: flags, messages and exit codes."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import click

from analyzer.api import AnalyzerError
from gate.baseline_file import (
    DEFAULT_INTERVAL_MS,
    BaselineError,
    GateSettings,
    read_baseline,
    write_baseline,
)
from gate.compare import Tolerance, parse_tolerance
from gate.gating import run_gate
from gate.junit import write_junit
from gate.markdown import write_markdown
from gate.recording import record_baseline
from gate.server import TargetError, models_on_disk, served, survey
from gate.statistic import describe_runs

EXIT_PASS = 0
EXIT_REGRESSION = 1
EXIT_ERROR = 2


def _fail(message: str) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(EXIT_ERROR)


def _concurrencies(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        levels = ()
    if not levels or any(level < 1 for level in levels):
        raise click.BadParameter(
            f"'{value}' is not a list of positive concurrencies (e.g. 1,4)", ctx=ctx, param=param
        )
    return tuple(dict.fromkeys(levels))


def _tolerance(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_tolerance(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


def _local_models(repository: Path, wanted: Sequence[str], whose: str = "") -> list[str]:
    """The models to load into our own server; exit 2 when one is not on disk."""
    try:
        on_disk = models_on_disk(repository)
    except TargetError as exc:
        _fail(str(exc))
    missing = [name for name in wanted if name not in on_disk]
    if missing:
        _fail(
            f"no model {', '.join(repr(m) for m in missing)}{whose} in {repository} "
            f"(models: {', '.join(on_disk) or 'none'})"
        )
    if not (wanted or on_disk):
        _fail(f"no models in {repository}")
    return list(wanted or on_disk)


_model_option = click.option(
    "-m", "--model", "models", multiple=True, help="Model (repeatable; default: all)."
)
_repository_option = click.option(
    "--model-repository",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("model_repository"),
    show_default=True,
    help="Repository to serve (a private server on a free loopback port) unless --url is given.",
)
_url_option = click.option(
    "--url",
    help="host:port of a running server to measure instead (its gRPC endpoint with -i grpc).",
)


@click.command("baseline")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("perf-baseline.json"),
    show_default=True,
    help="Baseline file to write (atomically).",
)
@_model_option
@_repository_option
@click.option(
    "--concurrency",
    "concurrencies",
    callback=_concurrencies,
    default="1,4",
    show_default=True,
    help="Loads to measure, comma-separated.",
)
@click.option(
    "--measurement-interval",
    type=click.IntRange(min=50),
    default=DEFAULT_INTERVAL_MS,
    show_default=True,
    help="Measurement window, ms (the gate reuses it).",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Runs per load; the median of each metric is recorded (the gate measures as many).",
)
@_url_option
@click.option(
    "-i",
    "--protocol",
    type=click.Choice(["http", "grpc"]),
    default="http",
    show_default=True,
    help="Protocol the load speaks (perf's -i); recorded, and the gate speaks it too.",
)
def baseline_command(
    out: Path,
    models: tuple[str, ...],
    model_repository: Path,
    concurrencies: tuple[int, ...],
    measurement_interval: int,
    repeats: int,
    url: str | None,
    protocol: str,
) -> None:
    """Record throughput and p50/p95/p99 latency of each model at fixed loads.

    Each model of the repository (as configured now) is measured at each --concurrency with
    stable measurement windows, --repeats times. The median of each metric, the measurement
    settings (the repeats and the statistic included), each model's config hash and this
    machine's description are written to --out for `autotune gate`, which measures as many
    runs and compares their median.
    Exit codes: 0 written, 2 usage or environment error.
    """
    wanted = list(models) if url else _local_models(model_repository, models)
    settings = GateSettings(
        measurement_interval_ms=measurement_interval, repeats=repeats, protocol=protocol
    )
    try:
        with served(url, model_repository, wanted, protocol) as address:
            baseline = record_baseline(
                address, survey(address, wanted, protocol), concurrencies, settings, click.echo
            )
    except (TargetError, AnalyzerError) as exc:
        _fail(str(exc))
    try:
        write_baseline(out, baseline)
    except OSError as exc:
        _fail(f"cannot write {out}: {exc}")
    click.echo(f"baseline of {len(baseline.models)} model(s) written to {out}")


@click.command("gate")
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("perf-baseline.json"),
    show_default=True,
    help="Baseline recorded by `autotune baseline`.",
)
@click.option(
    "--tolerance",
    callback=_tolerance,
    default="5%",
    show_default=True,
    help="Largest throughput fall or p95 rise that passes: 5% or 0.05.",
)
@click.option(
    "--latency-tolerance",
    callback=_tolerance,
    help="Largest p95 rise that passes, when it needs more room than throughput "
    "(default: --tolerance).",
)
@click.option("--junit", type=click.Path(dir_okay=False, path_type=Path), help="JUnit XML file.")
@click.option(
    "--markdown", type=click.Path(dir_okay=False, path_type=Path), help="Markdown summary file."
)
@_model_option
@_repository_option
@_url_option
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="Re-measurements of a regressed load before it counts, each a whole set of the "
    "baseline's repeats (judged on the median of all its runs).",
)
def gate_command(
    baseline_path: Path,
    tolerance: float,
    latency_tolerance: float | None,
    junit: Path | None,
    markdown: Path | None,
    models: tuple[str, ...],
    model_repository: Path,
    url: str | None,
    retries: int,
) -> None:
    """Measure again what a baseline recorded and fail on a performance regression.

    Each model and load of the baseline is measured with the baseline's settings, as many
    runs as the baseline's repeats, and the median of those runs is compared with the
    baseline's median. A load whose throughput falls by more than --tolerance, or whose p95
    latency rises by more than --latency-tolerance (default: --tolerance), is measured again,
    a whole set of runs at a time (up to --retries times), and regresses only if the median
    of all its runs still does.

    Exit codes: 0 pass, 1 regression, 2 usage or environment error (missing or malformed
    baseline, unreachable server, model missing). A different machine only warns.
    """
    try:
        baseline = read_baseline(baseline_path)
    except BaselineError as exc:
        _fail(str(exc))
    recorded = [m.name for m in baseline.models]
    unknown = [name for name in models if name not in recorded]
    if unknown:
        _fail(
            f"no model {', '.join(repr(m) for m in unknown)} in {baseline_path} "
            f"(models: {', '.join(recorded)})"
        )
    limits = Tolerance(tolerance, tolerance if latency_tolerance is None else latency_tolerance)
    settings = baseline.settings
    click.echo(
        "each load is measured as the baseline's was: "
        + describe_runs(settings.statistic, settings.repeats)
    )
    wanted = list(models or recorded)
    if not url:
        _local_models(model_repository, wanted, f" of {baseline_path}")
    try:
        with served(url, model_repository, wanted, settings.protocol) as address:
            targets = survey(address, wanted, settings.protocol)
            outcome = run_gate(address, baseline, targets, limits, retries, click.echo)
    except (TargetError, AnalyzerError) as exc:
        _fail(str(exc))
    for note in outcome.notes:
        click.echo(f"warning: {note}", err=True)
    try:
        if junit:
            write_junit(junit, outcome, baseline_path)
        if markdown:
            write_markdown(markdown, outcome, baseline_path)
    except OSError as exc:
        _fail(f"cannot write the gate's report: {exc}")
    if outcome.passed:
        click.echo(
            f"gate passed: {len(outcome.checks)} checks within {limits.describe()} "
            f"of {baseline_path}"
        )
        sys.exit(EXIT_PASS)
    click.echo(f"gate failed: {len(outcome.regressions)} regression(s) beyond the tolerance:")
    for check in outcome.regressions:
        click.echo(f"  {check.describe()}")
    sys.exit(EXIT_REGRESSION)
