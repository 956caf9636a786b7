"""`autotune perf` flags resolved into options, settings and the sweep; bad flag values."""

from __future__ import annotations

from pathlib import Path

import pytest

from analyzer.errors import AnalyzerError
from analyzer.perf_config import PerfFlags, build_config
from analyzer.profiler.sweep import CONCURRENCY, INTERVALS, REQUEST_RATE
from analyzer.ranges import parse_range


def test_defaults_follow_perf_analyzer() -> None:
    config = build_config(PerfFlags(model="m"))
    assert config.options.url == "localhost:8000"
    assert config.options.input_data == ["random"]
    assert config.options.max_threads == 16
    assert config.spec.mode == CONCURRENCY and config.spec.start == 1 and config.spec.end is None
    s = config.settings
    assert (s.measurement_interval_ms, s.stability_percentage, s.max_trials) == (5000, 10.0, 10)
    assert s.measurement_request_count == 50 and s.percentile is None
    assert not s.keep_records and not s.relax_latency_stability


def test_flags_map_onto_options_and_settings(tmp_path: Path) -> None:
    config = build_config(
        PerfFlags(
            model="m",
            version="2",
            url="h:9",
            batch_size=4,
            request_rate_range="10:30:10",
            request_distribution="poisson",
            measurement_mode="count_windows",
            measurement_request_count=80,
            percentile=95,
            shapes=("IN:3,4",),
            headers=("X-Trace: 1",),
            input_data=("zero",),
            async_mode=True,
            workers=2,
            profile_export_file=str(tmp_path / "p.json"),
        )
    )
    o = config.options
    assert (o.url, o.version, o.batch_size, o.request_distribution) == ("h:9", "2", 4, "poisson")
    assert o.shapes == {"IN": [3, 4]} and o.headers == {"X-Trace": "1"}
    assert o.input_data == ["zero"] and o.worker_processes == 2 and not o.sync
    assert o.max_threads == 4  # perf_analyzer's default with a request rate
    assert config.spec.mode == REQUEST_RATE and (config.spec.start, config.spec.end) == (10, 30)
    s = config.settings
    assert s.measurement_mode == "count_windows" and s.measurement_request_count == 80
    assert s.percentile == 95 and s.keep_records and s.relax_latency_stability


def test_request_intervals_run_once_at_their_mean_rate(tmp_path: Path) -> None:
    path = tmp_path / "intervals.txt"
    path.write_text("1000\n3000\n")
    config = build_config(PerfFlags(model="m", request_intervals=str(path)))
    assert config.spec.mode == INTERVALS and config.spec.start == pytest.approx(500.0)
    assert config.options.request_intervals_us == [1000, 3000]


def test_grpc_default_port() -> None:
    assert build_config(PerfFlags(model="m", protocol="grpc")).options.url == "localhost:8001"


@pytest.mark.parametrize(
    ("text", "start", "end", "step"),
    [("4", 4, None, 1), ("1:8", 1, 8, 1), ("2:16:2", 2, 16, 2), ("1:0:4", 1, 0, 4)],
)
def test_ranges(text: str, start: float, end: float | None, step: float) -> None:
    spec = parse_range(text, "--concurrency-range", CONCURRENCY)
    assert (spec.start, spec.end, spec.step) == (start, end, step)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"concurrency_range": "1:2:3:4"}, "at most three values"),
        ({"concurrency_range": "a:2"}, "takes numbers"),
        ({"concurrency_range": "-1:2"}, "cannot be negative"),
        ({"concurrency_range": "0"}, "start must be positive"),
        ({"concurrency_range": "1.5:3"}, "whole numbers"),
        ({"concurrency_range": "4:2"}, "below its start"),
        ({"concurrency_range": "1:0"}, "cannot both be 0"),
        ({"concurrency_range": "1:8", "binary_search": True}, "needs a latency threshold"),
        ({"concurrency_range": "1", "binary_search": True, "latency_threshold": 5}, "range end"),
        ({"concurrency_range": "1", "request_rate_range": "5"}, "cannot use"),
        ({"sync": True, "async_mode": True}, "--sync and --async"),
        ({"percentile": 100}, "--percentile"),
        ({"measurement_interval": 0}, "measurement-interval"),
        ({"stability_percentage": 0}, "stability-percentage"),
        ({"max_trials": 0}, "max-trials"),
        ({"measurement_mode": "both"}, "measurement-mode"),
        ({"batch_size": 0}, "-b"),
        ({"shapes": ("nocolon",)}, "--shape"),
        ({"headers": ("bad header",)}, "-H"),
        ({"request_intervals": "/nonexistent/intervals"}, "cannot read"),
        ({"csv": "/nonexistent/folder/x.csv"}, "does not exist"),
    ],
)
def test_bad_flags_are_refused_with_the_flag_named(flags: dict[str, object], message: str) -> None:
    with pytest.raises(AnalyzerError, match=message):
        build_config(PerfFlags(model="m", **flags))  # type: ignore[arg-type]


def test_collect_metrics_reads_port_8002_of_the_server_host_unless_told() -> None:
    assert build_config(PerfFlags(model="m")).options.metrics_url is None
    collected = build_config(PerfFlags(model="m", url="10.0.0.5:9000", collect_metrics=True))
    assert collected.options.metrics_url == "10.0.0.5:8002/metrics"
    assert collected.options.metrics_interval_ms == 1000
    told = build_config(
        PerfFlags(model="m", collect_metrics=True, metrics_url="h:7/m", metrics_interval=250)
    )
    assert (told.options.metrics_url, told.options.metrics_interval_ms) == ("h:7/m", 250)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"metrics_url": "h:7/m"}, "Must specify --collect-metrics when using the --metrics-url"),
        ({"metrics_interval": 100}, "when using the --metrics-interval option"),
        ({"collect_metrics": True, "metrics_interval": 0}, "--metrics-interval. The value must"),
    ],
)
def test_metrics_flags_are_checked_as_perf_analyzer_checks_them(
    flags: dict[str, object], message: str
) -> None:
    with pytest.raises(AnalyzerError, match=message.replace(".", r"\.")):
        build_config(PerfFlags(model="m", **flags))  # type: ignore[arg-type]
