"""The `autotune` command: tuning on the bare command, and the subcommands serve, perf, report,
baseline and gate.

This module is the composition root: it mounts the other packages' commands (`serve.cli`,
`analyzer.cli`, `gate.cli`), and it is the only module of tuner/ that imports the gate."""

from __future__ import annotations

import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import FrameType

import click
import optuna

from analyzer.cli import perf_command
from gate.cli import baseline_command, gate_command
from serve.cli import serve_command
from tuner.budget import LatencyBudget
from tuner.cli_params import LATENCY, WALL_CLOCK
from tuner.console import TuneConsole
from tuner.duration import Duration
from tuner.errors import EXIT_INTERRUPTED, EXIT_NOT_TUNED, EXIT_OK, TunerError, one_line, worst
from tuner.evaluate import TRIAL_MEASUREMENT, EvaluationSettings
from tuner.mix_run import tune_mix
from tuner.mix_spec import EXAMPLE as MIX_EXAMPLE
from tuner.mix_spec import TrafficMix, TrafficMixError, parse_traffic_mix
from tuner.pipeline_run import tune_pipeline
from tuner.plan import Target, plan, plan_mix
from tuner.remeasure import DEFAULT_REPEATS, DEFAULT_TOP, RemeasureSettings
from tuner.report import render_run_report
from tuner.report.cli import report_command
from tuner.run import (
    DEFAULT_MAX_BATCH_SIZE_CAP,
    DEFAULT_PIPELINE_TRIALS,
    DEFAULT_TRIALS,
    Hooks,
    TuneOptions,
    tune_model,
)
from tuner.samplers import METHODS
from tuner.search_types import ProgressEvent


def _traffic_mix(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> TrafficMix | None:
    if value is None:
        return None
    try:
        mix = parse_traffic_mix(value)
    except TrafficMixError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
    if mix.normalised:
        click.echo(
            f"note: the --traffic-mix shares add up to {mix.given_total:g}; normalised to 1: "
            f"{mix.describe()}",
            err=True,
        )
    return mix


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
@click.option("--latency-p95", type=LATENCY, help="p95 latency budget, e.g. 10ms, 500us, 1s.")
@click.option("--latency-p99", type=LATENCY, help="p99 latency budget.")
@click.option("--latency-p90", type=LATENCY, help="p90 latency budget.")
@click.option(
    "--min-throughput",
    type=click.FloatRange(min=0, min_open=True),
    help="Also require at least this many inferences/s.",
)
@click.option(
    "-m", "--model", "models", multiple=True, help="Model to tune (repeatable; default: all)."
)
@click.option(
    "--traffic-mix",
    callback=_traffic_mix,
    help=f"Tune these models jointly, served together under this mix of requests ({MIX_EXAMPLE}:"
    " each model's share of the total rate; shares are normalised to 1): one study, "
    "instances x threads across the models within the cores, each model within the budget. "
    "Not with -m.",
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
    help=f"Trials per model (default {DEFAULT_TRIALS}; {DEFAULT_PIPELINE_TRIALS} for an "
    "ensemble's pipeline; a resumed study counts its earlier trials).",
)
@click.option(
    "--time-budget",
    type=WALL_CLOCK,
    help="Wall-clock budget for the whole run, shared by the models: 90s, 10m, 1.5h "
    "(a bare number is seconds).",
)
@click.option(
    "--search",
    type=click.Choice(list(METHODS)),
    default="optuna",
    show_default=True,
    help="Search method: optuna (the recommended one: a climb from informed starting points), "
    "climb, tpe, tpe-flat, gp (needs torch), random, qmc, or grid (every candidate).",
)
@click.option(
    "--patience",
    type=click.IntRange(min=1),
    help="Stop a model's search when its best feasible throughput has not grown by more "
    "than 1% over this many measured trials (default: run all --trials).",
)
@click.option(
    "--max-batch-size-cap",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_BATCH_SIZE_CAP,
    show_default=True,
    help="Largest max_batch_size to try; a model whose batch dimension is fixed caps it "
    "lower (the config's current value does not).",
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
@click.option(
    "-i",
    "--protocol",
    type=click.Choice(["http", "grpc"]),
    default="http",
    show_default=True,
    help="Protocol the measurements' load speaks to the tuning server (perf's -i).",
)
@click.option(
    "--remeasure-top",
    type=click.IntRange(min=0),
    default=DEFAULT_TOP,
    show_default=True,
    help="Re-measure this many of the best distinct feasible configurations (the config as "
    "written among them when feasible), interleaved, before writing the winner; 0: off.",
)
@click.option(
    "--remeasure-repeats",
    type=click.IntRange(min=1),
    default=DEFAULT_REPEATS,
    show_default=True,
    help="Interleaved rounds of the re-measure (windows twice --measurement-interval).",
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
    latency_p95: Duration | None,
    latency_p99: Duration | None,
    latency_p90: Duration | None,
    min_throughput: float | None,
    models: tuple[str, ...],
    traffic_mix: TrafficMix | None,
    model_repository: Path,
    trials: int | None,
    time_budget: Duration | None,
    search: str,
    max_batch_size_cap: int,
    precisions: tuple[str, ...],
    max_accuracy_drop: float,
    validation_data: Path | None,
    measurement_interval: int,
    protocol: str,
    remeasure_top: int,
    remeasure_repeats: int,
    storage: str | None,
    study_name: str | None,
    seed: int,
    patience: int | None,
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
        time_budget=time_budget,
        search=search,
        max_batch_size_cap=max_batch_size_cap,
        precisions=precisions,
        max_accuracy_drop=max_accuracy_drop,
        validation_data=validation_data,
        storage=storage,
        study_name=study_name,
        seed=seed,
        patience=patience,
        min_throughput=min_throughput,
        dry_run=dry_run,
        output_repository=output_repository,
        report_dir=report_dir,
        evaluation=EvaluationSettings(
            measure=replace(TRIAL_MEASUREMENT, measurement_interval_ms=measurement_interval),
            protocol=protocol,
        ),
        remeasure=RemeasureSettings.for_trial_interval(
            remeasure_top, remeasure_repeats, measurement_interval
        ),
    )
    if traffic_mix is not None and models:
        raise click.UsageError("give either -m/--model or --traffic-mix (its models are tuned)")
    sys.exit(run_tuning(options, traffic_mix))


class _StopRequest:
    """Set by SIGTERM. The interrupt it raises can still be lost (a cancelled task that ends
    normally does not re-raise it), so the run also checks this between trials."""

    requested = False

    @classmethod
    def check(cls) -> None:
        if cls.requested:
            raise KeyboardInterrupt


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Unwind like Ctrl-C: the search marks the running trial, the tuning server is stopped.

    Through SIGINT's handler: while the analyzer's event loop runs, that handler cancels the
    loop's task and KeyboardInterrupt follows once it has unwound; raised here instead, it
    could land in one of the loop's callbacks, which would swallow it."""
    _StopRequest.requested = True
    if callable(signal.getsignal(signal.SIGINT)):
        signal.raise_signal(signal.SIGINT)
    else:  # SIGINT ignored (started in the background): interrupt here
        raise KeyboardInterrupt


def run_tuning(options: TuneOptions, traffic_mix: TrafficMix | None = None) -> int:
    """Tune every target of `options` (`tuner.plan.plan`: each ensemble as a pipeline, each
    model no ensemble uses on its own), one after the other, and return the exit code.

    A target that fails (any `TunerError`, or an unexpected exception) is reported in one line
    and the run goes on with the next one; one the tuner cannot tune is skipped with the
    reason (a failure only when it was asked for by name); the exit code is the most severe
    of the targets' (`tuner.errors.worst`). Ctrl-C or SIGTERM stops the run at once (130)."""
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the console says what matters
    try:
        if traffic_mix is not None:
            targets = [plan_mix(options.repository, traffic_mix.shares)]
        else:
            targets = plan(options.repository, options.models)
    except Exception as exc:
        message, code = failure(exc, options.report_dir)
        click.echo(f"error: {message}", err=True)
        return code
    started = time.monotonic()
    exit_code = EXIT_OK
    with TuneConsole() as console:
        _announce(targets, console)
        skipped = [t for t in targets if t.skip]
        if options.models and skipped:
            exit_code = EXIT_NOT_TUNED
        targets = [t for t in targets if not t.skip]
        for index, target in enumerate(targets):
            share = None
            if options.time_budget is not None:
                left = options.time_budget.s - (time.monotonic() - started)
                share = Duration.from_s(max(left, 0.0) / (len(targets) - index))
            try:
                code = _tune_one(options, target, share, console)
                _StopRequest.check()
            except KeyboardInterrupt:
                console.warning("interrupted: the study is kept and resumes next run")
                return EXIT_INTERRUPTED
            exit_code = worst(exit_code, code)
    return exit_code


def _announce(targets: list[Target], console: TuneConsole) -> None:
    """What the run tunes: the pipelines (with their steps), the models alone, the skipped."""
    pipelines = [t for t in targets if t.kind == "pipeline" and not t.skip]
    models = [t.name for t in targets if t.kind == "model" and not t.skip]
    for target in pipelines:
        console.note(f"pipeline '{target.name}': {' -> '.join(target.steps)} (tuned jointly)")
    if models and pipelines:
        console.note(f"models no ensemble uses, tuned on their own: {', '.join(models)}")
    for target in targets:
        if target.skip:
            console.warning(f"skipping '{target.name}': {target.skip}")


def _tune_one(
    options: TuneOptions, target: Target, share: Duration | None, console: TuneConsole
) -> int:
    """Tune one target, print how it ended and return its exit code; errors become one line."""
    name = target.name
    hooks = Hooks(console.note, _stoppable(console))
    try:
        if share is not None and share.us <= 0:
            raise TunerError("the time budget was spent before its turn")
        if target.kind == "mix":
            summary = tune_mix(options, target, share, hooks)
        elif target.kind == "pipeline":
            summary = tune_pipeline(options, target, share, hooks)
        else:
            summary = tune_model(options, name, share, hooks)
    except Exception as exc:
        message, code = failure(exc, options.report_dir / name)
        console.error(f"'{name}' could not be tuned: {message}")
        return code
    console.summary(summary)
    try:
        console.note(f"report: {render_run_report(options.report_dir)}")
    except (TunerError, OSError) as exc:  # the run's own report folder: the run failed
        console.error(f"the HTML report could not be written: {one_line(exc)}")
        return worst(summary.exit_code, EXIT_NOT_TUNED)
    return summary.exit_code


def _stoppable(console: TuneConsole) -> Callable[[str, ProgressEvent], None]:
    """The console's progress hook, which also ends the run between trials once a stop was
    asked for."""

    def progress(model: str, event: ProgressEvent) -> None:
        console.update(model, event)
        _StopRequest.check()

    return progress


def failure(error: Exception, folder: Path) -> tuple[str, int]:
    """The one place an error becomes the line and the exit code it ends a model (or the run)
    with: a `TunerError` gives its message and its own exit code; anything else is a bug,
    named by its type, its traceback kept in `folder`/error.log, exit code 1."""
    if isinstance(error, TunerError):
        return one_line(error), error.exit_code
    kept = _keep_traceback(folder)
    return (
        f"unexpected {type(error).__name__}: {one_line(error)} (traceback in {kept})",
        EXIT_NOT_TUNED,
    )


def _keep_traceback(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "error.log"
    path.write_text(traceback.format_exc())
    return path


main.add_command(serve_command)
main.add_command(perf_command)
main.add_command(baseline_command)
main.add_command(gate_command)
main.add_command(report_command)
