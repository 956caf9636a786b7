"""From `autotune perf` flag values to what the analyzer runs: LoadOptions, MeasureSettings,
the sweep, and the outputs. Pure: no I/O besides reading --request-intervals."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from analyzer.errors import AnalyzerError
from analyzer.load.factory import parse_header_flag, parse_shape_flag
from analyzer.load.options import DEFAULT_MAX_CONNECTIONS, LoadOptions
from analyzer.load.schedule import intervals_rate, read_intervals_file
from analyzer.load.sequences import (
    DEFAULT_LENGTH_VARIATION_PCT,
    DEFAULT_NUM_OF_SEQUENCES,
    DEFAULT_SEQUENCE_LENGTH,
    SequenceOptions,
    check_sequence_options,
    parse_sequence_id_range,
)
from analyzer.profiler.settings import MeasureSettings
from analyzer.profiler.sweep import CONCURRENCY, INTERVALS, REQUEST_RATE, SweepSpec
from analyzer.ranges import parse_range

DEFAULT_HTTP_URL = "localhost:8000"
DEFAULT_GRPC_URL = "localhost:8001"
DEFAULT_METRICS_PORT = 8002  # Triton's --metrics-port
DEFAULT_METRICS_INTERVAL_MS = 1000


@dataclass(frozen=True, slots=True)
class Outputs:
    """Where a perf run's results go besides the console table (None: not written)."""

    csv: Path | None = None  # -f
    verbose_csv: bool = False
    profile_export: Path | None = None
    json: Path | None = None
    html: Path | None = None  # --html: a self-contained HTML page with the plots
    verbose: int = 0  # -v: print every measurement window


@dataclass(frozen=True, slots=True)
class PerfConfig:
    """A perf run, resolved: what to send, how to measure, which levels, which outputs."""

    options: LoadOptions
    settings: MeasureSettings
    spec: SweepSpec
    outputs: Outputs


@dataclass(frozen=True, slots=True)
class PerfFlags:
    """The flag values as click parsed them (names follow perf_analyzer)."""

    model: str
    version: str = ""
    url: str | None = None
    protocol: str = "http"
    streaming: bool = False
    batch_size: int = 1
    concurrency_range: str | None = None
    request_rate_range: str | None = None
    request_distribution: str = "constant"
    request_intervals: str | None = None
    measurement_mode: str = "time_windows"
    measurement_interval: int = 5000
    measurement_request_count: int = 50
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int | None = None
    warmup_request_count: int = 0
    latency_threshold: float = 0.0
    binary_search: bool = False
    input_data: tuple[str, ...] = ()
    shapes: tuple[str, ...] = ()
    string_length: int = 128
    string_data: str | None = None
    shared_memory: str = "none"
    output_shared_memory_size: int = 102400
    input_tensor_format: str = "binary"
    output_tensor_format: str = "binary"
    csv: str | None = None
    verbose_csv: bool = False
    collect_metrics: bool = False
    metrics_url: str | None = None
    metrics_interval: int | None = None
    profile_export_file: str | None = None
    headers: tuple[str, ...] = ()
    sync: bool = False
    async_mode: bool = False
    max_threads: int | None = None
    json: str | None = None
    html: str | None = None
    workers: int = 0
    max_connections: int | None = None
    verbose: int = 0
    sequence_length: int | None = None
    sequence_length_variation: float = DEFAULT_LENGTH_VARIATION_PCT
    sequence_id_range: str | None = None
    num_of_sequences: int = DEFAULT_NUM_OF_SEQUENCES
    serial_sequences: bool = False


def build_config(flags: PerfFlags) -> PerfConfig:
    """Check the flags together and resolve them; AnalyzerError names the flag at fault."""
    _check_exclusive(flags)
    spec, intervals = _sweep_spec(flags)
    settings = _settings(flags)
    if spec.unbounded and settings.latency_threshold_ms <= 0:
        raise AnalyzerError(
            "the end of the range and the latency threshold (-l) cannot both be 0: give a "
            "range end or -l"
        )
    if spec.binary_search and settings.latency_threshold_ms <= 0:
        raise AnalyzerError("--binary-search needs a latency threshold (-l above 0)")
    options = _load_options(flags, spec, intervals)
    outputs = Outputs(
        csv=_output_path(flags.csv, "-f"),
        verbose_csv=flags.verbose_csv,
        profile_export=_output_path(flags.profile_export_file, "--profile-export-file"),
        json=_output_path(flags.json, "--json"),
        html=_output_path(flags.html, "--html"),
        verbose=flags.verbose,
    )
    if outputs.profile_export is not None:
        settings = _replace_keep_records(settings)
    return PerfConfig(options=options, settings=settings, spec=spec, outputs=outputs)


def _check_exclusive(flags: PerfFlags) -> None:
    given = [
        name
        for name, value in (
            ("--concurrency-range", flags.concurrency_range),
            ("--request-rate-range", flags.request_rate_range),
            ("--request-intervals", flags.request_intervals),
        )
        if value is not None
    ]
    if len(given) > 1:
        raise AnalyzerError(f"cannot use {given[0]} and {given[1]} together: pick one load mode")
    if flags.sync and flags.async_mode:
        raise AnalyzerError("cannot use --sync and --async together")
    if flags.binary_search and flags.request_intervals is not None:
        raise AnalyzerError("--binary-search needs --concurrency-range or --request-rate-range")


def _sweep_spec(flags: PerfFlags) -> tuple[SweepSpec, list[int] | None]:
    if flags.request_intervals is not None:
        intervals = read_intervals_file(flags.request_intervals)
        return SweepSpec(mode=INTERVALS, start=intervals_rate(intervals)), intervals
    if flags.request_rate_range is not None:
        spec = parse_range(
            flags.request_rate_range, "--request-rate-range", REQUEST_RATE, flags.binary_search
        )
        return spec, None
    text = flags.concurrency_range if flags.concurrency_range is not None else "1"
    return parse_range(text, "--concurrency-range", CONCURRENCY, flags.binary_search), None


def _settings(flags: PerfFlags) -> MeasureSettings:
    if flags.measurement_mode not in ("time_windows", "count_windows"):
        raise AnalyzerError(
            f"--measurement-mode must be time_windows or count_windows, "
            f"got '{flags.measurement_mode}'"
        )
    checks = (
        (flags.measurement_interval > 0, "-p/--measurement-interval must be above 0 ms"),
        (flags.measurement_request_count > 0, "--measurement-request-count must be above 0"),
        (flags.stability_percentage > 0, "-s/--stability-percentage must be above 0"),
        (flags.max_trials > 0, "-r/--max-trials must be at least 1"),
        (flags.warmup_request_count >= 0, "--warmup-request-count cannot be negative"),
        (flags.latency_threshold >= 0, "-l/--latency-threshold cannot be negative"),
        (
            flags.percentile is None or 1 <= flags.percentile <= 99,
            f"--percentile must be within 1..99, got {flags.percentile}",
        ),
    )
    for ok, message in checks:
        if not ok:
            raise AnalyzerError(message)
    return MeasureSettings(
        measurement_mode=flags.measurement_mode,
        measurement_interval_ms=flags.measurement_interval,
        measurement_request_count=flags.measurement_request_count,
        stability_percentage=flags.stability_percentage,
        max_trials=flags.max_trials,
        percentile=flags.percentile,
        warmup_request_count=flags.warmup_request_count,
        latency_threshold_ms=flags.latency_threshold,
        relax_latency_stability=flags.async_mode,
    )


def _replace_keep_records(settings: MeasureSettings) -> MeasureSettings:
    from dataclasses import replace

    return replace(settings, keep_records=True)


def _load_options(flags: PerfFlags, spec: SweepSpec, intervals: list[int] | None) -> LoadOptions:
    if flags.batch_size < 1:
        raise AnalyzerError(f"-b (batch size) must be at least 1, got {flags.batch_size}")
    if flags.string_length < 0:
        raise AnalyzerError("--string-length cannot be negative")
    if flags.max_threads is not None and flags.max_threads < 1:
        raise AnalyzerError("--max-threads must be above 0")
    if flags.workers < 0:
        raise AnalyzerError("--workers must be 0 (decide from the load) or more")
    if flags.max_connections is not None:
        if spec.mode == CONCURRENCY:
            raise AnalyzerError(
                "--max-connections applies to --request-rate-range and --request-intervals: in"
                " concurrency mode each outstanding request has its own connection"
            )
        if flags.max_connections < max(1, flags.workers):
            raise AnalyzerError(
                "--max-connections must allow at least one connection per worker process"
            )
    shapes: dict[str, list[int]] = {}
    for text in flags.shapes:
        name, dims = parse_shape_flag(text)
        shapes[name] = dims
    headers: dict[str, str] = {}
    for text in flags.headers:
        name, value = parse_header_flag(text)
        headers[name] = value
    default_threads = 4 if spec.mode != CONCURRENCY else 16
    url = flags.url or (DEFAULT_GRPC_URL if flags.protocol == "grpc" else DEFAULT_HTTP_URL)
    return LoadOptions(
        url=url,
        model=flags.model,
        version=flags.version,
        protocol=flags.protocol,
        streaming=flags.streaming,
        batch_size=flags.batch_size,
        input_data=list(flags.input_data) or ["random"],
        shapes=shapes,
        string_length=flags.string_length,
        string_data=flags.string_data,
        headers=headers,
        request_distribution=flags.request_distribution,
        request_intervals_us=intervals,
        sync=not flags.async_mode,
        max_threads=flags.max_threads or default_threads,
        worker_processes=flags.workers,
        max_connections=flags.max_connections or DEFAULT_MAX_CONNECTIONS,
        shared_memory=flags.shared_memory,
        output_shared_memory_size=flags.output_shared_memory_size,
        output_tensor_format=flags.output_tensor_format,
        input_tensor_format=flags.input_tensor_format,
        metrics_url=_metrics_url(flags, url),
        metrics_interval_ms=flags.metrics_interval or DEFAULT_METRICS_INTERVAL_MS,
        sequence=_sequence_options(flags),
    )


def _metrics_url(flags: PerfFlags, url: str) -> str | None:
    """Where --collect-metrics reads (None: not asked), as perf_analyzer resolves it."""
    for given, name in (
        (flags.metrics_url, "--metrics-url"),
        (flags.metrics_interval, "--metrics-interval"),
    ):
        if given is not None and not flags.collect_metrics:
            raise AnalyzerError(f"Must specify --collect-metrics when using the {name} option.")
    if flags.metrics_interval is not None and flags.metrics_interval <= 0:
        raise AnalyzerError("Failed to parse --metrics-interval. The value must be > 0 msecs.")
    if not flags.collect_metrics:
        return None
    if flags.metrics_url is not None:
        return flags.metrics_url
    host = url.split("://", 1)[-1].rsplit(":", 1)[0]
    return f"{host}:{DEFAULT_METRICS_PORT}/metrics"


def _sequence_options(flags: PerfFlags) -> SequenceOptions:
    """The sequence flags (used only when the model turns out to be a sequence model)."""
    id_start, id_end = 1, None
    if flags.sequence_id_range is not None:
        id_start, id_end = parse_sequence_id_range(flags.sequence_id_range)
    options = SequenceOptions(
        length=DEFAULT_SEQUENCE_LENGTH if flags.sequence_length is None else flags.sequence_length,
        length_given=flags.sequence_length is not None,
        variation_pct=flags.sequence_length_variation,
        id_start=id_start,
        id_end=id_end,
        num_of_sequences=flags.num_of_sequences,
        serial=flags.serial_sequences,
    )
    check_sequence_options(options)
    return options


def _output_path(text: str | None, flag: str) -> Path | None:
    if text is None:
        return None
    path = Path(text)
    if path.is_dir():
        raise AnalyzerError(f"{flag} {text} is a directory; give a file name")
    if not path.parent.is_dir():
        raise AnalyzerError(f"{flag} {text}: the folder {path.parent} does not exist")
    return path
