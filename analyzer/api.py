"""The analyzer's public Python API (what the tuner calls).

- `measure(options, level, settings)`: one stable measurement at one concurrency or rate.
- `sweep(options, spec, settings)`: perf_analyzer's sweep; the reported measurements.
- `find_max_load(options, settings, latency_limit_us, ...)`: the highest load whose latency
  percentile stays within a limit (doubling, then binary search at the boundary); with
  `first_pass`, a short-window pass first and full windows only at the operating point.
- `find_max_mixed_load(loads, settings, latency_limit_us, ...)`: the same search over a
  traffic mix: several models at once, each at its share of a total request rate.

Each opens its own connections to the server (`analyzer.load.factory.connect`), runs the load
and closes everything. The plain functions run their own event loop; the `*_async` versions
are for callers that already have one. Unreachable servers, unknown models and bad inputs
raise `AnalyzerError`.

Also what a caller needs to build their arguments and read the results (`LoadOptions`,
`SequenceOptions` (a sequence model's load), `LoadLevel`, `MeasureSettings`, `Measurement`
(`composing`: an ensemble's per-model breakdown), `ModelInfo`, `TensorInfo`), input data files
(`read_json_data`, `RANDOM_INT_HIGH`), the GPUs a server reports on its metrics endpoint
(`server_gpus`) and the latency breakdown figure of the perf report
(`LatencyParts`, `breakdown_figure`). Other packages import this module and `analyzer.cli`
only.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field

from analyzer.aio import run as run_sync
from analyzer.errors import AnalyzerError
from analyzer.input_files import read_json_data
from analyzer.inputs import RANDOM_INT_HIGH
from analyzer.load.base import LoadLevel
from analyzer.load.factory import connect
from analyzer.load.options import LoadOptions, ModelInfo, TensorInfo
from analyzer.load.sequences import SequenceOptions
from analyzer.measurement import Measurement
from analyzer.profiler.clock import MonotonicClock, epoch_offset_ns
from analyzer.profiler.gpu_metrics import MetricsPoller, http_fetcher, server_gpus
from analyzer.profiler.level import LevelRun, Probe
from analyzer.profiler.mixed import (
    MixedSearchResult,
    model_settings,
    search_mixed_load,
    start_rate,
    validate_shares,
)
from analyzer.profiler.overhead import CpuMeter
from analyzer.profiler.search import (
    FULL,
    SATURATION_MIN_GAIN,
    SATURATION_SHARE,
    SCOUT,
    SearchResult,
    SearchStep,
    StepReport,
    operating_point,
    search_max_load,
)
from analyzer.profiler.session import LevelProfiler
from analyzer.profiler.settings import MeasureSettings
from analyzer.profiler.staged_search import StagedLimits, search_staged
from analyzer.profiler.statistics_client import ServerStatistics
from analyzer.profiler.sweep import CONCURRENCY, SweepOutcome, SweepSpec, run_sweep
from analyzer.report.html import LatencyParts, breakdown_figure

__all__ = [
    "FULL",
    "RANDOM_INT_HIGH",
    "SATURATION_MIN_GAIN",
    "SATURATION_SHARE",
    "SCOUT",
    "AnalyzerError",
    "LatencyParts",
    "LoadLevel",
    "LoadOptions",
    "MeasureSettings",
    "Measurement",
    "MixedModelLoad",
    "MixedSearchResult",
    "ModelInfo",
    "PerfSession",
    "SearchResult",
    "SearchStep",
    "SequenceOptions",
    "StepReport",
    "SweepSpec",
    "TensorInfo",
    "breakdown_figure",
    "find_max_load",
    "find_max_load_async",
    "find_max_mixed_load",
    "find_max_mixed_load_async",
    "measure",
    "measure_async",
    "open_session",
    "operating_point",
    "read_json_data",
    "server_gpus",
    "sweep",
    "sweep_async",
]


@dataclass(slots=True)
class PerfSession:
    """A connected, ready measurer: the model as the server describes it, the level
    profiler, and how to turn record clocks into epoch time."""

    model: ModelInfo
    profiler: LevelProfiler
    statistics: ServerStatistics
    epoch_offset_ns: int
    runs: list[LevelRun] = field(default_factory=list)
    # What could not be cleaned up at the end (a shared memory region the server kept).
    release_problems: list[str] = field(default_factory=list)

    async def measure(self, level: LoadLevel, settings: MeasureSettings | None = None) -> LevelRun:
        """One level with the session's settings, or `settings` for this level only."""
        run = await self.profiler.measure(level, settings)
        self.runs.append(run)
        return run

    async def measure_settling(self, level: LoadLevel, retries: int) -> LevelRun:
        """`measure`, and while the level does not settle (up to `retries` times) measure it
        again with windows twice as long, as perf_analyzer advises when it gives up."""
        run = await self.measure(level)
        settings = self.profiler.settings
        for _ in range(retries):
            if run.stable or run.failure:
                break
            settings = settings.with_longer_windows()
            run = await self.profiler.measure(level, settings)
            self.runs.append(run)
        return run


@asynccontextmanager
async def open_session(
    options: LoadOptions, settings: MeasureSettings, peak: LoadLevel | None = None
) -> AsyncIterator[PerfSession]:
    """Connect to the server, yield a session, and stop the load and close on exit.

    `peak`, the highest level the caller will ask for, lets the factory decide whether
    worker processes are needed (when `options.worker_processes` is 0)."""
    connected = await connect(options, peak)
    driver, model = connected.driver, connected.model
    session: PerfSession | None = None
    try:
        statistics = ServerStatistics(
            connected.client,
            model.name,
            model.version,
            [(c.name, c.version) for c in model.composing],
        )

        def client_pids() -> list[int]:
            return [os.getpid(), *getattr(driver, "pids", ())]

        clock = MonotonicClock()
        gpu = None
        if options.metrics_url is not None:
            fetch = http_fetcher(options.metrics_url)
            gpu = MetricsPoller(fetch, options.metrics_interval_ms, clock, options.metrics_url)
        probe = Probe(stats=statistics, clock=clock, cpu=CpuMeter(client_pids), gpu=gpu)
        profiler = LevelProfiler(
            driver, settings, probe, model=model.name, batch_size=options.batch_size
        )
        session = PerfSession(model, profiler, statistics, epoch_offset_ns())
        try:
            yield session
        finally:
            if gpu is not None:
                await gpu.stop()
            await profiler.close()
    finally:
        problems = await connected.close()
        if session is not None:
            session.release_problems.extend(problems)


async def measure_async(
    options: LoadOptions, level: LoadLevel, settings: MeasureSettings | None = None
) -> Measurement:
    """Measure one level until stable (or `max_trials` windows).

    Returns the merge of the last windows; `Measurement.stable` is False when stability was
    not reached. Raises AnalyzerError when no request succeeded in a window."""
    settings = settings or MeasureSettings()
    async with open_session(options, settings, peak=level) as session:
        run = await session.measure(level)
    if run.measurement is None:
        raise AnalyzerError(run.failure)
    return run.measurement


def measure(
    options: LoadOptions, level: LoadLevel, settings: MeasureSettings | None = None
) -> Measurement:
    """`measure_async` on its own event loop."""
    return run_sync(measure_async(options, level, settings))


async def sweep_outcome_async(
    options: LoadOptions, spec: SweepSpec, settings: MeasureSettings
) -> tuple[SweepOutcome, PerfSession]:
    """The sweep with everything measured (for the CLI's reports)."""
    async with open_session(options, settings) as session:
        outcome = await run_sweep(spec, session.measure, settings)
    return outcome, session


async def sweep_async(
    options: LoadOptions, spec: SweepSpec, settings: MeasureSettings | None = None
) -> list[Measurement]:
    """Run perf_analyzer's sweep; the measurements it would report (stable and within the
    latency threshold), in the order measured."""
    outcome, _ = await sweep_outcome_async(options, spec, settings or MeasureSettings())
    return outcome.reported


def sweep(
    options: LoadOptions, spec: SweepSpec, settings: MeasureSettings | None = None
) -> list[Measurement]:
    """`sweep_async` on its own event loop."""
    return run_sync(sweep_async(options, spec, settings))


async def find_max_load_async(
    options: LoadOptions,
    settings: MeasureSettings | None,
    latency_limit_us: float,
    percentile: int = 95,
    mode: str = CONCURRENCY,
    start: int = 1,
    max_level: int = 1024,
    max_binary_steps: int = 5,
    unstable_retries: int = 0,
    *,
    first_pass: MeasureSettings | None = None,
    report: StepReport | None = None,
) -> SearchResult:
    """The highest concurrency (or request rate) whose `percentile` latency stays within
    `latency_limit_us`: doubling from `start` up to `max_level`, then binary search at the
    boundary. `SearchResult.best` is the passing measurement with the highest throughput;
    it is None (and `reason` says so) when even `start` is over the limit. A level that does
    not settle is measured again, up to `unstable_retries` times, with windows twice as long
    each time.

    With `first_pass` (short-window settings, e.g. `settings.for_first_pass()`) the search is
    staged (`analyzer.profiler.staged_search`): the doubling and binary steps run with those
    windows (from `start` down as well as up), and `settings`' full windows measure only the
    operating point (`operating_point`'s rule), so the limit is judged on full windows alone.
    `report(step, best throughput within the limit so far)` is called after each passing
    first-pass level and once when the first pass is done; True stops the search there
    (`SearchResult.stopped_early`, no `best`). `SearchResult.steps` times every level."""
    settings = settings or MeasureSettings()
    async with open_session(options, settings) as session:

        async def measure(level: LoadLevel) -> LevelRun:
            return await session.measure_settling(level, unstable_retries)

        if first_pass is not None:
            scout_settings = first_pass

            async def scout(level: LoadLevel) -> LevelRun:
                return await session.measure(level, scout_settings)

            limits = StagedLimits(
                latency_limit_us, percentile, mode, start, max_level, max_binary_steps
            )
            return await search_staged(scout, measure, limits, report)
        return await search_max_load(
            measure,
            latency_limit_us=latency_limit_us,
            percentile=percentile,
            mode=mode,
            start=start,
            max_level=max_level,
            max_binary_steps=max_binary_steps,
        )


def find_max_load(
    options: LoadOptions,
    settings: MeasureSettings | None,
    latency_limit_us: float,
    percentile: int = 95,
    mode: str = CONCURRENCY,
    start: int = 1,
    max_level: int = 1024,
    max_binary_steps: int = 5,
    unstable_retries: int = 0,
    *,
    first_pass: MeasureSettings | None = None,
    report: StepReport | None = None,
) -> SearchResult:
    """`find_max_load_async` on its own event loop."""
    return run_sync(
        find_max_load_async(
            options,
            settings,
            latency_limit_us,
            percentile=percentile,
            mode=mode,
            start=start,
            max_level=max_level,
            max_binary_steps=max_binary_steps,
            unstable_retries=unstable_retries,
            first_pass=first_pass,
            report=report,
        )
    )


@dataclass(frozen=True, slots=True)
class MixedModelLoad:
    """One model of a traffic mix: its load (`options.model` names the model) and its share
    of the total request rate (any positive number; the shares are normalised to 1)."""

    options: LoadOptions
    share: float


async def find_max_mixed_load_async(
    loads: Sequence[MixedModelLoad],
    settings: MeasureSettings | None,
    latency_limit_us: float,
    percentile: int = 95,
    start: int | None = None,
    max_rate: int = 65_536,
    max_binary_steps: int = 5,
    unstable_retries: int = 0,
) -> MixedSearchResult:
    """The highest total request rate R at which every model of `loads`, sent R x its share
    (request-rate mode, all at once), keeps its `percentile` latency within
    `latency_limit_us`: doubling from `start` (default: where every model gets a few requests
    per window), then binary search (`analyzer.profiler.mixed`). AnalyzerError for a model
    given twice or a share that is not > 0."""
    settings = settings or MeasureSettings()
    names = [load.options.model for load in loads]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise AnalyzerError(f"model {', '.join(twice)} appears twice in the traffic mix")
    try:
        shares = validate_shares({load.options.model: load.share for load in loads})
    except ValueError as exc:
        raise AnalyzerError(str(exc)) from None
    async with AsyncExitStack() as stack:
        measures = {}
        for load in loads:
            model = load.options.model
            own = model_settings(settings, shares[model], latency_limit_us)
            session = await stack.enter_async_context(open_session(load.options, own))
            measures[model] = _settling(session, unstable_retries)
        return await search_mixed_load(
            measures,
            shares,
            latency_limit_us=latency_limit_us,
            percentile=percentile,
            start=start if start is not None else start_rate(shares, settings),
            max_rate=max_rate,
            max_binary_steps=max_binary_steps,
        )


def _settling(session: PerfSession, retries: int) -> Callable[[LoadLevel], Awaitable[LevelRun]]:
    async def measure(level: LoadLevel) -> LevelRun:
        return await session.measure_settling(level, retries)

    return measure


def find_max_mixed_load(
    loads: Sequence[MixedModelLoad],
    settings: MeasureSettings | None,
    latency_limit_us: float,
    percentile: int = 95,
    start: int | None = None,
    max_rate: int = 65_536,
    max_binary_steps: int = 5,
    unstable_retries: int = 0,
) -> MixedSearchResult:
    """`find_max_mixed_load_async` on its own event loop."""
    return run_sync(
        find_max_mixed_load_async(
            loads,
            settings,
            latency_limit_us,
            percentile=percentile,
            start=start,
            max_rate=max_rate,
            max_binary_steps=max_binary_steps,
            unstable_retries=unstable_retries,
        )
    )
