"""The `autotune` command: tuning on the bare command, and the subcommands serve, perf, report,
baseline and gate.

This module is the composition root: it mounts the other packages' commands (`serve.cli`,
`analyzer.cli`, `gate.cli`), and it is the only module of tuner/ that imports the gate. It imports
each subcommand's module only when that subcommand runs, and the tuner's machinery only when the
bare command tunes, so that `autotune serve` starts without Optuna or the analyzer."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import click

from tuner.cli_params import LATENCY, SIZE, WALL_CLOCK
from tuner.defaults import (
    DEFAULT_MAX_BATCH_SIZE_CAP,
    DEFAULT_MEASUREMENT_INTERVAL_MS,
    DEFAULT_PIPELINE_TRIALS,
    DEFAULT_REMEASURE_REPEATS,
    DEFAULT_REMEASURE_TOP,
    DEFAULT_TRIALS,
    RECOMMENDED_SEARCH,
    SEARCH_METHODS,
)
from tuner.duration import Duration
from tuner.mix_spec import EXAMPLE as MIX_EXAMPLE
from tuner.mix_spec import TrafficMix, TrafficMixError, parse_traffic_mix
from tuner.precisions import DEFAULT_PRECISIONS, PRECISIONS


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
    known = PRECISIONS
    unknown = [p for p in names if p not in known]
    if not names or unknown:
        raise click.BadParameter(
            f"unknown precision {', '.join(unknown) or '(none)'}; choose from {', '.join(known)}",
            ctx=ctx,
            param=param,
        )
    return names


def _serve_command() -> click.Command:
    from serve.cli import serve_command

    return serve_command


def _perf_command() -> click.Command:
    from analyzer.cli import perf_command

    return perf_command


def _baseline_command() -> click.Command:
    from gate.cli import baseline_command

    return baseline_command


def _gate_command() -> click.Command:
    from gate.cli import gate_command

    return gate_command


def _report_command() -> click.Command:
    from tuner.report.cli import report_command

    return report_command


# subcommand -> its loader, in the order `autotune --help` lists them
SUBCOMMANDS: dict[str, Callable[[], click.Command]] = {
    "serve": _serve_command,
    "perf": _perf_command,
    "baseline": _baseline_command,
    "gate": _gate_command,
    "report": _report_command,
}


def _given_flags(ctx: click.Context) -> list[str]:
    """The bare command's flags given on the command line (not left at their defaults)."""
    return [
        max(param.opts, key=len)
        for param in ctx.command.params
        if isinstance(param, click.Option)
        and param.name is not None
        and ctx.get_parameter_source(param.name) is click.core.ParameterSource.COMMANDLINE
    ]


class _LazyGroup(click.Group):
    """A group whose subcommands' modules are imported when the subcommand is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        loader = SUBCOMMANDS.get(cmd_name)
        return None if loader is None else loader()


@click.group(
    cls=_LazyGroup,
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
    "--max-gpu-memory",
    "max_gpu_memory",
    type=SIZE,
    help="Also require the server to hold at most this much GPU memory at a trial's load "
    "(e.g. 8GiB; needs a GPU).",
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
    help="The Triton model repository to tune (its configs are written back here unless "
    "--output-repository or --dry-run).",
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
    type=click.Choice(list(SEARCH_METHODS)),
    default=RECOMMENDED_SEARCH,
    show_default=True,
    help="Search method (each runs as an Optuna sampler: storage, resume and workers alike): "
    "climb (the recommended one: best-first from informed starting points), Optuna's tpe, "
    "tpe-flat, gp (needs torch), random or qmc, or grid (every candidate). optuna: an old "
    "name of climb.",
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
    default=",".join(DEFAULT_PRECISIONS),
    show_default=True,
    help="Precisions to try (comma-separated): fp32, fp16 and int8 model files of ONNX "
    "models; fp16 and bf16 modules of TorchScript models; on a GPU, trt_fp16 / trt_int8 "
    "(onnxruntime's TensorRT provider) and plan_fp16 / plan_int8 (TensorRT engines on the "
    "tensorrt backend). Left at its default, each model gets those its backend has and that "
    "can pay off here (TorchScript: fp16 on GPU instances only, bf16 on a GPU or a CPU with "
    "native bf16); given, every one is tried or excluded saying why.",
)
@click.option(
    "--max-accuracy-drop",
    type=click.FloatRange(min=0),
    default=0.01,
    show_default=True,
    help="Largest accuracy drop a reduced precision may have against fp32, per output, by the "
    "metric chosen for it: classifier logits 1 - top-1 agreement (0.01: 1 in 100 rows may "
    "change class), embeddings and wide outputs 1 - mean cosine similarity, integer or "
    "single-value outputs the max relative error.",
)
@click.option(
    "--validation-data",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="perf_analyzer-format JSON inputs for the accuracy check and calibration.",
)
@click.option(
    "--measurement-interval",
    type=click.IntRange(min=50),
    default=DEFAULT_MEASUREMENT_INTERVAL_MS,
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
    default=DEFAULT_REMEASURE_TOP,
    show_default=True,
    help="Re-measure this many of the best distinct feasible configurations (the config as "
    "written among them when feasible), interleaved, before writing the winner; 0: off.",
)
@click.option(
    "--remeasure-repeats",
    type=click.IntRange(min=1),
    default=DEFAULT_REMEASURE_REPEATS,
    show_default=True,
    help="Interleaved rounds of the re-measure (windows twice --measurement-interval).",
)
@click.option(
    "--server",
    type=click.Choice(["autotune", "tritonserver"]),
    help="The server each trial measures: a private `autotune serve` (default) or a private "
    "tritonserver per worker (explicit model control, free loopback ports, its log in the "
    "report folder).",
)
@click.option(
    "--tritonserver",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The tritonserver executable for --server tritonserver (default: the one on PATH).",
)
@click.option(
    "--server-arg",
    "server_args",
    multiple=True,
    help="A flag passed through to the private tritonserver, e.g. --server-arg=--log-verbose=1 "
    "(repeatable).",
)
@click.option(
    "--server-url",
    help="HOST:PORT (HTTP) of a running server in explicit model control to tune on: each "
    "candidate is loaded with a config override, nothing is written to its disk, and its "
    "models are put back as they were at the end. Write-back goes to --model-repository.",
)
@click.option("--server-grpc-url", help="HOST:PORT of that server's gRPC endpoint (for -i grpc).")
@click.option(
    "--server-metrics-url",
    help="HOST:PORT of that server's metrics endpoint: its GPUs (nv_gpu_*) decide the space.",
)
@click.option("--storage", help="Optuna storage URL (default: sqlite in the report folder).")
@click.option("--study-name", help="Study name (default: from the model and the budget).")
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the search's sampler (the same seed and measurements: the same trials).",
)
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
    help="Where each model's report, summary.json, trials CSV, study database and server "
    "logs go (a folder per model), and report.html for the run.",
)
@click.pass_context
def main(
    ctx: click.Context,
    latency_p95: Duration | None,
    latency_p99: Duration | None,
    latency_p90: Duration | None,
    min_throughput: float | None,
    max_gpu_memory: int | None,
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
    server: str | None,
    tritonserver: Path | None,
    server_args: tuple[str, ...],
    server_url: str | None,
    server_grpc_url: str | None,
    server_metrics_url: str | None,
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
    tuning_flags = _given_flags(ctx)
    if ctx.invoked_subcommand is not None:
        if tuning_flags:
            raise click.UsageError(
                f"{', '.join(tuning_flags)}: tuning flags, which do nothing for `autotune "
                f"{ctx.invoked_subcommand}`; its own flags go after it"
            )
        return
    given = [(p, v) for p, v in ((95, latency_p95), (99, latency_p99), (90, latency_p90)) if v]
    if not given and not tuning_flags:
        click.echo(ctx.get_help())
        ctx.exit(0)
    if not given:
        raise click.UsageError(
            "tuning needs a latency budget: --latency-p95, --latency-p99 or --latency-p90 "
            "(e.g. --latency-p95 10ms)"
        )
    if search == "optuna":
        click.echo(
            f"note: --search optuna is an old name of {RECOMMENDED_SEARCH} (a climb from "
            "informed starting points, not Optuna's default sampler): use --search "
            f"{RECOMMENDED_SEARCH}",
            err=True,
        )
        search = RECOMMENDED_SEARCH
    if len(given) > 1:
        raise click.UsageError(
            "give one latency budget: --latency-p95, --latency-p99 or --latency-p90"
        )
    percentile, limit = given[0]
    # the tuner's machinery (Optuna, the analyzer, the serving API) only when tuning
    from tuner.budget import LatencyBudget
    from tuner.evaluate import TRIAL_MEASUREMENT, EvaluationSettings
    from tuner.remeasure import RemeasureSettings
    from tuner.run import TuneOptions
    from tuner.server_target import ServerChoice, ServerChoiceError
    from tuner.tune_command import run_tuning

    try:
        choice = ServerChoice.from_flags(
            server, tritonserver, server_args, server_url, server_grpc_url, server_metrics_url
        )
    except ServerChoiceError as exc:
        raise click.UsageError(str(exc)) from None

    if max_gpu_memory is not None:
        from serve.api import detect_platform

        if not detect_platform().gpus:
            raise click.UsageError("--max-gpu-memory needs a GPU, and NVML finds none here")
    options = TuneOptions(
        repository=model_repository,
        budget=LatencyBudget(percentile, limit),
        models=models,
        trials=trials,
        time_budget=time_budget,
        search=search,
        max_batch_size_cap=max_batch_size_cap,
        precisions=precisions,
        precisions_explicit=click.get_current_context().get_parameter_source("precisions")
        is not click.core.ParameterSource.DEFAULT,
        max_accuracy_drop=max_accuracy_drop,
        validation_data=validation_data,
        storage=storage,
        study_name=study_name,
        seed=seed,
        patience=patience,
        min_throughput=min_throughput,
        max_gpu_memory_bytes=max_gpu_memory,
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
        server=choice,
    )
    if traffic_mix is not None and models:
        raise click.UsageError("give either -m/--model or --traffic-mix (its models are tuned)")
    sys.exit(run_tuning(options, traffic_mix))
