"""One `autotune perf` run: connect, sweep, print as it goes, write the outputs.

Exit status: 0 when at least one level was reported (a sweep that ends early because a level
went over -l or did not stabilize still reports the levels before it, as perf_analyzer does);
1 when nothing could be reported (the only level was unstable or over the threshold) or a level
had no successful request at all.
"""

from __future__ import annotations

from collections import Counter

from rich.console import Console

from analyzer.api import PerfSession, open_session
from analyzer.errors import AnalyzerError
from analyzer.load.base import LoadLevel
from analyzer.measurement import Measurement
from analyzer.perf_config import PerfConfig
from analyzer.profiler.level import LevelRun, stabilizing_latency_us
from analyzer.profiler.sweep import CONCURRENCY, SweepOutcome, SweepSpec, run_sweep
from analyzer.report.composing import composing_lines, write_composing_csvs
from analyzer.report.console import gpu_metrics_lines, print_results
from analyzer.report.csv_report import CsvLayout, write_csv
from analyzer.report.html import write_html
from analyzer.report.json_report import write_json
from analyzer.report.profile_export import write_profile_export


async def run_perf(config: PerfConfig, out: Console, err: Console) -> int:
    """Run the sweep of `config`; returns the exit status (see the module docstring)."""
    async with open_session(config.options, config.settings, peak=_peak(config.spec)) as session:

        async def measure(level: LoadLevel) -> LevelRun:
            run = await session.measure(level)
            _print_level(run, config, out, err)
            _print_composing(run, session, out)
            if run.measurement is not None and run.measurement.gpu is not None:
                for line in gpu_metrics_lines(run.measurement.gpu):
                    out.print(line, markup=False, highlight=False)
            return run

        outcome = await run_sweep(config.spec, measure, config.settings)
    if session.statistics.problem:
        err.print(
            f"warning: {session.statistics.problem}; server columns are left out",
            markup=False,
        )
    for problem in session.release_problems:
        err.print(f"warning: {problem}", markup=False)
    reported = outcome.reported
    _write_outputs(config, session, outcome, reported)
    concurrency_mode = config.spec.mode == CONCURRENCY
    print_results(reported, concurrency_mode, out)
    failure = next((run.failure for run in outcome.runs if run.failure), "")
    if failure:
        err.print(f"error: {failure}", markup=False, highlight=False)
        return 1
    if not reported:
        err.print(f"error: {outcome.stop_reason}", markup=False, highlight=False)
        return 1
    if outcome.stop_reason and len(outcome.runs) > 0 and not outcome.runs[-1].reported:
        err.print(f"note: {outcome.stop_reason}", markup=False, highlight=False)
    return 0


def _peak(spec: SweepSpec) -> LoadLevel:
    """The highest level the sweep may ask for (to size the worker processes)."""
    top = spec.start if spec.end is None or spec.unbounded else max(spec.start, spec.end)
    return spec.level(top)


def _print_level(run: LevelRun, config: PerfConfig, out: Console, err: Console) -> None:
    settings = config.settings
    if config.outputs.verbose:
        metric = "avg" if settings.percentile is None else f"p{settings.percentile}"
        for index, (throughput, latency) in enumerate(
            zip(run.throughputs, run.latencies_us, strict=True), start=1
        ):
            out.print(
                f"  Pass [{index}] throughput: {throughput:.1f} infer/sec, "
                f"{metric} latency: {latency:.0f} usec",
                highlight=False,
            )
    m = run.measurement
    if m is not None:
        metric = "latency" if settings.percentile is None else f"p{settings.percentile} latency"
        state = ""
        if not run.within_threshold:
            state = " (over the latency threshold)"
        elif not run.stable:
            state = " (unstable)"
        out.print(
            f"{_describe(run.level)}: throughput {m.throughput:.1f} infer/sec, {metric} "
            f"{stabilizing_latency_us(m, settings.percentile):.0f} usec, "
            f"{m.windows} windows{state}",
            highlight=False,
        )
        for warning in m.warnings:
            err.print(f"warning: {warning}", markup=False, highlight=False)
    errors: Counter[str] = run.errors + run.warmup_errors
    if errors:
        total = sum(errors.values())
        details = "; ".join(f"{count}x {message}" for message, count in errors.most_common())
        err.print(
            f"warning: {run.level.describe()}: {total} requests failed: {details}",
            markup=False,
            highlight=False,
        )


def _print_composing(run: LevelRun, session: PerfSession, out: Console) -> None:
    """An ensemble's composing models, as perf_analyzer prints them after each level."""
    if run.measurement is None:
        return
    model = session.model
    lines = composing_lines(
        run.measurement, model.name, model.composing, session.statistics.versions
    )
    for line in lines:
        out.print(line, markup=False, highlight=False)


def _describe(level: LoadLevel) -> str:
    if level.concurrency:
        return f"Concurrency {level.concurrency}"
    return f"Request rate {level.request_rate:g}/s"


def _write_outputs(
    config: PerfConfig,
    session: PerfSession,
    outcome: SweepOutcome,
    reported: list[Measurement],
) -> None:
    outputs = config.outputs
    try:
        if outputs.csv is not None and reported:
            layout = CsvLayout(
                concurrency_mode=config.spec.mode == CONCURRENCY,
                server_stats=all(m.server.available for m in reported),
                cache_columns=_response_cache_enabled(session),
                percentile=config.settings.percentile,
                verbose=outputs.verbose_csv,
                gpu_metrics=config.options.metrics_url is not None,
            )
            write_csv(outputs.csv, reported, layout)
            write_composing_csvs(outputs.csv, reported, session.statistics.versions, layout)
        if outputs.json is not None:
            write_json(outputs.json, reported)
        if outputs.html is not None:
            concurrency_mode = config.spec.mode == CONCURRENCY
            write_html(outputs.html, reported, concurrency_mode, _details(config, outcome))
        if outputs.profile_export is not None:
            write_profile_export(outputs.profile_export, outcome.runs, session.epoch_offset_ns)
    except OSError as exc:
        raise AnalyzerError(f"cannot write {exc.filename}: {exc.strerror}") from None


def _details(config: PerfConfig, outcome: SweepOutcome) -> list[tuple[str, str]]:
    """What the HTML page says about the run (server, model, load, method)."""
    options, settings, spec = config.options, config.settings, config.spec
    if spec.mode == CONCURRENCY:
        load = "concurrency " + _range_text(spec)
    else:
        load = f"request rate {_range_text(spec)}/s, {options.request_distribution}"
    if settings.measurement_mode == "count_windows":
        windows = f"count windows of {settings.measurement_request_count} requests"
    else:
        windows = f"time windows of {settings.measurement_interval_ms} ms"
    details = [
        ("Server", f"{options.url} ({options.protocol})"),
        ("Model", options.model + (f" version {options.version}" if options.version else "")),
        ("Batch size", str(options.batch_size)),
        ("Load", load + (", binary search" if spec.binary_search else "")),
        (
            "Measurement",
            f"{windows}, stable within {settings.stability_percentage:g}% "
            f"(at most {settings.max_trials} windows)",
        ),
    ]
    if outcome.stop_reason:
        details.append(("Stopped", outcome.stop_reason))
    return details


def _range_text(spec: SweepSpec) -> str:
    if spec.end is None or spec.end == spec.start:
        return f"{spec.start:g}"
    end = "until the latency threshold" if spec.unbounded else f"{spec.end:g}"
    return f"{spec.start:g} to {end} step {spec.step:g}"


def _response_cache_enabled(session: PerfSession) -> bool:
    """The model's response cache, or for an ensemble any composing model's (perf_analyzer's
    cache columns then cover the whole pipeline)."""
    configs = [session.model.config, *(c.config for c in session.model.composing)]
    return any(bool((config.get("response_cache") or {}).get("enable")) for config in configs)
