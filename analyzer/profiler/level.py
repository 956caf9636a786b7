"""Measuring one load level: warmup, windows until stable (or out of trials), merge.

The driver is already sending at the level when `profile_level` is called. Each window's
boundary is one clock reading; the requests that ended up to it belong to the window, later
ones to the next (perf_analyzer assigns a request to the window in which it ended). Server
counters, the in-flight count and the client's CPU time are sampled at every boundary so any
run of consecutive windows has its own server delta.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from analyzer.errors import AnalyzerError
from analyzer.load.base import LoadDriver, LoadLevel, RequestRecord
from analyzer.measurement import Measurement
from analyzer.profiler.clock import Clock
from analyzer.profiler.gpu_metrics import MetricsPoller, merge_readings
from analyzer.profiler.merge import merge_windows
from analyzer.profiler.overhead import CpuMeter, busy_pct
from analyzer.profiler.schedule_check import rate_keeping, schedule_warnings
from analyzer.profiler.server_stats import ServerCounters, StatisticsSource
from analyzer.profiler.settings import TIME_WINDOWS, MeasureSettings
from analyzer.profiler.stability import any_over_threshold, is_stable
from analyzer.profiler.window import Window

_COUNT_WINDOW_POLL_S = 0.1
_WARMUP_POLL_S = 0.02


@dataclass(frozen=True, slots=True)
class Probe:
    """What the level measurer needs besides the driver: where server counters come from,
    the clock, and (optionally) the client processes' CPU meter."""

    stats: StatisticsSource | None
    clock: Clock
    cpu: CpuMeter | None = None
    gpu: MetricsPoller | None = None  # --collect-metrics


@dataclass(slots=True)
class LevelRun:
    """The outcome of measuring one level.

    `measurement` is the merge of the last `stability_window` windows whenever they all had
    successful requests (also when unstable or over the threshold: `stable` tells); it is
    None only when `failure` says why (no successful request in a window).
    """

    level: LoadLevel
    measurement: Measurement | None
    stable: bool
    within_threshold: bool
    failure: str = ""
    errors: Counter[str] = field(default_factory=Counter)  # all windows of the level
    warmup_errors: Counter[str] = field(default_factory=Counter)
    throughputs: list[float] = field(default_factory=list)  # per window, infer/s
    latencies_us: list[float] = field(default_factory=list)  # per window, stability metric
    windows: list[Window] = field(default_factory=list)  # kept only with keep_records
    first_window_start_ns: int = 0

    @property
    def reported(self) -> bool:
        """perf_analyzer reports (CSV, summary) only stable levels within the threshold."""
        return self.measurement is not None and self.stable and self.within_threshold


async def profile_level(
    driver: LoadDriver,
    level: LoadLevel,
    settings: MeasureSettings,
    probe: Probe,
    *,
    model: str,
    batch_size: int,
) -> LevelRun:
    """Warm up, then take windows until the last `stability_window` are stable, the latency
    threshold is reached, or `max_trials` windows were taken; merge the last windows."""
    warmup_errors = await _warm_up(driver, settings.warmup_request_count, probe.clock)
    clock = probe.clock
    start_ns = clock.now_ns()
    # Requests that ended before the first window are not measured.
    pending = [r for r in await driver.collect() if r.end_ns > start_ns]
    counters: list[ServerCounters | None] = [await _snapshot(probe.stats)]
    if probe.gpu is not None:
        probe.gpu.start()  # reads from the first window on (a no-op once running)
        probe.gpu.take()  # what it read before this level's first window is not its own
    cpu_before = probe.cpu.sample() if probe.cpu else {}
    in_flight_before = driver.in_flight
    progress_before = driver.schedule_progress

    windows: list[Window] = []
    throughputs: list[float] = []
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    stable = False
    over_threshold = False
    for _ in range(settings.max_trials):
        window, pending = await _take_window(driver, settings, clock, start_ns, pending)
        window.counters_end = await _snapshot(probe.stats)
        counters.append(window.counters_end)
        if probe.gpu is not None:
            if probe.gpu.error is not None:
                raise AnalyzerError(probe.gpu.error)
            window.gpu_readings = probe.gpu.take()
        cpu_after = probe.cpu.sample() if probe.cpu else {}
        window.busy_pct = busy_pct(cpu_before, cpu_after, window.duration_s)
        cpu_before = cpu_after
        window.in_flight_start = in_flight_before
        window.in_flight_end = driver.in_flight
        window.sent = len(window.ok) + len(window.failed) + window.in_flight_end - in_flight_before
        in_flight_before = window.in_flight_end
        progress = driver.schedule_progress
        window.schedule = progress.since(progress_before)
        progress_before = progress
        windows.append(window)
        errors.update(window.errors())
        throughputs.append(window.throughput(batch_size) if window.ok else 0.0)
        latencies.append(window.stabilizing_latency_us(settings.percentile))
        start_ns = window.end_ns

        stable = is_stable(
            throughputs, latencies, settings.stability_percentage, settings.stability_window
        )
        over_threshold = any_over_threshold(
            latencies, settings.latency_threshold_us, settings.stability_window
        )
        if stable or over_threshold:
            break

    warnings: list[str] = []
    if (
        not stable
        and settings.relax_latency_stability
        and is_stable(
            throughputs,
            latencies,
            settings.stability_percentage,
            settings.stability_window,
            check_latency=False,
        )
    ):
        stable = True
        warnings.append(f"{level.describe()}: latency is not stabilizing; try lowering the load")

    run = LevelRun(
        level=level,
        measurement=None,
        stable=stable,
        within_threshold=not over_threshold,
        errors=errors,
        warmup_errors=warmup_errors,
        throughputs=throughputs,
        latencies_us=latencies,
        windows=windows if settings.keep_records else [],
        first_window_start_ns=windows[0].start_ns if windows else start_ns,
    )
    merged = windows[-settings.stability_window :]
    if any(not window.ok for window in merged):
        run.stable = False
        run.failure = _no_success_message(level, errors)
        return run
    measurement = merge_windows(
        merged,
        counters[len(windows) - len(merged)],
        model=model,
        level=level,
        batch_size=batch_size,
        percentile=settings.percentile,
        stable=stable,
        windows_taken=len(windows),
        warnings=[*warnings, *_load_warnings(level, merged, settings)],
    )
    if probe.gpu is not None:
        readings = [reading for window in merged for reading in window.gpu_readings]
        measurement = replace(measurement, gpu=merge_readings(readings))
    run.measurement = measurement
    if settings.latency_threshold_ms > 0 and not over_threshold:
        run.within_threshold = (
            stabilizing_latency_us(measurement, settings.percentile) < settings.latency_threshold_us
        )
    return run


def stabilizing_latency_us(measurement: Measurement, percentile: int | None) -> float:
    """The latency perf_analyzer watches and compares with -l: average or --percentile."""
    if percentile is None:
        return measurement.latency_avg_us
    return measurement.percentile_us(percentile)


async def _take_window(
    driver: LoadDriver,
    settings: MeasureSettings,
    clock: Clock,
    start_ns: int,
    pending: list[RequestRecord],
) -> tuple[Window, list[RequestRecord]]:
    """Wait out one window; returns it and the records that belong to later windows."""
    if settings.measurement_mode == TIME_WINDOWS:
        await clock.sleep(settings.measurement_interval_ms / 1000.0)
        end_ns = clock.now_ns()
        pending = pending + await driver.collect()
    else:
        await clock.sleep(settings.min_count_window_s)
        while True:
            end_ns = clock.now_ns()
            pending = pending + await driver.collect()
            done = sum(1 for r in pending if r.end_ns <= end_ns)
            if done >= settings.measurement_request_count:
                break
            await clock.sleep(_COUNT_WINDOW_POLL_S)
    window = Window(start_ns=start_ns, end_ns=end_ns)
    later: list[RequestRecord] = []
    for record in pending:
        if record.end_ns > end_ns:
            later.append(record)
        elif record.ok:
            window.ok.append(record)
        else:
            window.failed.append(record)
    return window, later


async def _warm_up(driver: LoadDriver, count: int, clock: Clock) -> Counter[str]:
    """Let `count` requests complete; their records are discarded (errors are kept)."""
    errors: Counter[str] = Counter()
    done = 0
    while done < count:
        await clock.sleep(_WARMUP_POLL_S)
        records = await driver.collect()
        done += len(records)
        errors.update(r.error or "unknown error" for r in records if not r.ok)
    return errors


async def _snapshot(stats: StatisticsSource | None) -> ServerCounters | None:
    return await stats.snapshot() if stats is not None else None


def _load_warnings(level: LoadLevel, windows: list[Window], settings: MeasureSettings) -> list[str]:
    warnings = []
    overhead = sum(w.busy_pct for w in windows) / len(windows)
    if overhead > settings.overhead_warning_pct:
        warnings.append(
            f"{level.describe()}: the client was busy {overhead:.0f}% of the time "
            f"(over {settings.overhead_warning_pct:.0f}%): it may not be able to keep up "
            "with the desired load; the results may not be accurate"
        )
    if level.request_rate and not level.concurrency:
        warnings.extend(schedule_warnings(level, rate_keeping(level, windows)))
    return warnings


def _no_success_message(level: LoadLevel, errors: Counter[str]) -> str:
    message = f"no request completed successfully within a measurement window at {level.describe()}"
    if errors:
        text, count = errors.most_common(1)[0]
        message += f"; {sum(errors.values())} failed, most often ({count}x): {text}"
    else:
        message += "; try a longer --measurement-interval"
    return message
