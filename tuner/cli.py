"""The `autotune` command: tuning on the bare command, and the subcommands serve and perf."""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import FrameType

import click
import optuna

from analyzer.cli import perf_command
from serve.cli import serve_command
from tuner.budget import LatencyBudget, parse_duration_us
from tuner.console import TuneConsole
from tuner.evaluate import TRIAL_MEASUREMENT, EvaluationSettings
from tuner.gate.cli import baseline_command, gate_command
from tuner.precision import PrecisionError
from tuner.report import render_run_report
from tuner.report.cli import report_command
from tuner.run import Hooks, TuneError, TuneOptions, model_names, tune_model

EXIT_NO_FEASIBLE = 3


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return parse_duration_us(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None


_TIME_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def _time_budget(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Seconds from '90s', '10m', '1.5h' (a bare number is seconds)."""
    if value is None:
        return None
    text = value.strip().lower()
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz ")
    unit = text[len(number) :].strip() or "s"
    try:
        seconds = float(number) * _TIME_UNITS[unit]
    except (KeyError, ValueError):
        raise click.BadParameter(
            f"'{value}' is not a duration: use a number with s, m or h (e.g. 10m)",
            ctx=ctx,
            param=param,
        ) from None
    if not seconds > 0:
        raise click.BadParameter(f"'{value}' must be longer than zero", ctx=ctx, param=param)
    return seconds


def _precisions(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    names = tuple(p.strip().lower() for p in value.split(",") if p.strip())
    known = ("fp32", "fp16", "int8", "trt_fp16", "trt_int8")
    unknown = [p for p in names if p not in known]
    if not names or unknown:
        raise click.BadParameter(
            f"unknown precision {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}",
            ctx=ctx,
            param=param,
        )
    return names


@click.group(
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="autotune")
@click.option("--latency-p95", callback=_duration, help="p95 latency budget, e.g. 10ms, 500us, 1s.")
@click.option("--latency-p99", callback=_duration, help="p99 latency budget.")
@click.option("--latency-p90", callback=_duration, help="p90 latency budget.")
@click.option(
    "--min-throughput",
    type=click.FloatRange(min=0, min_open=True),
    help="Also require at least this many inferences/s.",
)
@click.option(
    "-m", "--model", "models", multiple=True, help="Model to tune (repeatable; default: all)."
)
@click.option(
    "--model-repository",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("model_repository"),
    show_default=True,
)
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Trials per model (a resumed study counts its earlier trials).",
)
@click.option(
    "--time-budget",
    callback=_duration,
    help="Wall-clock budget for the whole run, e.g. 10m is not accepted: use 600s.",
)
@click.option(
    "--search", type=click.Choice(["optuna", "grid"]), default="optuna", show_default=True
)
@click.option(
    "--precision",
    "precisions",
    callback=_precisions,
    default="fp32,fp16,int8",
    show_default=True,
    help="Precisions to try (comma-separated).",
)
@click.option(
    "--max-accuracy-drop",
    type=click.FloatRange(min=0),
    default=0.01,
    show_default=True,
    help="Largest accuracy drop a reduced precision may have (top-1 agreement, cosine "
    "or max relative error).",
)
@click.option(
    "--validation-data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="perf_analyzer-format JSON inputs for the accuracy check and calibration.",
)
@click.option(
    "--measurement-interval",
    type=click.IntRange(min=50),
    default=500,
    show_default=True,
    help="Measurement window of each load level, ms (perf's -p).",
)
@click.option("--storage", help="Optuna storage URL (default: sqlite in the report folder).")
@click.option("--study-name", help="Study name (default: from the model and the budget).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--dry-run", is_flag=True, help="Search and report, write nothing back.")
@click.option(
    "--output-repository",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the tuned model folders here instead of into the repository.",
)
@click.option(
    "--report-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("reports"),
    show_default=True,
)
@click.pass_context
def main(
    ctx: click.Context,
    latency_p95: float | None,
    latency_p99: float | None,
    latency_p90: float | None,
    min_throughput: float | None,
    models: tuple[str, ...],
    model_repository: Path,
    trials: int,
    time_budget: float | None,
    search: str,
    precisions: tuple[str, ...],
    max_accuracy_drop: float,
    validation_data: Path | None,
    measurement_interval: int,
    storage: str | None,
    study_name: str | None,
    seed: int,
    dry_run: bool,
    output_repository: Path | None,
    report_dir: Path,
) -> None:
    """Serve Triton model repositories, measure them, and tune their configurations.

    Without a subcommand, tunes: `autotune --latency-p95 10ms` searches, for each model,
    the fastest configuration whose p95 latency stays within 10 ms (and whose reduced
    precision keeps its accuracy), and writes it back as config.pbtxt.
    """
    if ctx.invoked_subcommand is not None:
        return
    given = [(p, v) for p, v in ((95, latency_p95), (99, latency_p99), (90, latency_p90)) if v]
    if not given:
        click.echo(ctx.get_help())
        ctx.exit(0)
    if len(given) > 1:
        raise click.UsageError(
            "give one latency budget: --latency-p95, --latency-p99 or --latency-p90"
        )
    percentile, limit = given[0]
    options = TuneOptions(
        repository=model_repository,
        budget=LatencyBudget(percentile, limit),
        models=models,
        trials=trials,
        time_budget_s=time_budget,
        search=search,
        precisions=precisions,
        max_accuracy_drop=max_accuracy_drop,
        validation_data=validation_data,
        storage=storage,
        study_name=study_name,
        seed=seed,
        min_throughput=min_throughput,
        dry_run=dry_run,
        output_repository=output_repository,
        report_dir=report_dir,
        evaluation=EvaluationSettings(
            measure=replace(TRIAL_MEASUREMENT, measurement_interval_ms=measurement_interval)
        ),
    )
    sys.exit(run_tuning(options))


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Unwind like Ctrl-C: the search marks the running trial, the tuning server is stopped.
    raise KeyboardInterrupt


def run_tuning(options: TuneOptions) -> int:
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the console says what matters
    if not options.repository.is_dir():
        click.echo(f"error: model repository {options.repository} is not a directory", err=True)
        return 2
    try:
        names = model_names(options)
    except TuneError as exc:
        click.echo(f"error: {exc}", err=True)
        return 2
    if not names:
        click.echo(f"error: no models in {options.repository}", err=True)
        return 2
    started = time.monotonic()
    exit_code = 0
    with TuneConsole() as console:
        hooks = Hooks(note=console.note, progress=console.update)
        for index, name in enumerate(names):
            share = None
            if options.time_budget_s is not None:
                left = options.time_budget_s - (time.monotonic() - started)
                share = max(left / (len(names) - index), 1.0)
            try:
                report = tune_model(options, name, share, hooks)
            except (TuneError, PrecisionError) as exc:
                console.console.print(f"[red]error: {exc}")
                exit_code = max(exit_code, 1)
                continue
            except KeyboardInterrupt:
                console.console.print("[yellow]interrupted: the study is kept and resumes next run")
                return 130
            console.summary(report)
            console.note(f"report: {render_run_report(options.report_dir)}")
            if report.best is None:
                exit_code = EXIT_NO_FEASIBLE
    return exit_code


main.add_command(serve_command)
main.add_command(perf_command)
main.add_command(baseline_command)
main.add_command(gate_command)
main.add_command(report_command)
