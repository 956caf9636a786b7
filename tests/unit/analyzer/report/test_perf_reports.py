"""perf_analyzer's CSV, the JSON output and the profile export, from fixed measurements."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from analyzer.load.base import LoadLevel, RequestRecord
from analyzer.measurement import Measurement, ServerBreakdown
from analyzer.profiler.level import LevelRun
from analyzer.profiler.window import Window
from analyzer.report.csv_report import CsvLayout, csv_text, format_double, header, row
from analyzer.report.json_report import write_json
from analyzer.report.profile_export import profile_export

PA_HEADER = (
    "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
    "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,"
    "p50 latency,p90 latency,p95 latency,p99 latency"
)


def measurement(**changes: object) -> Measurement:
    values: dict[str, object] = {
        "model": "m",
        "concurrency": 2,
        "request_rate": 0.0,
        "batch_size": 1,
        "throughput": 87.2,
        "request_throughput": 87.2,
        "request_count": 262,
        "error_count": 0,
        "errors": {},
        "latency_avg_us": 21874.9,
        "latency_p50_us": 21874.6,
        "latency_p90_us": 28557.2,
        "latency_p95_us": 29768.9,
        "latency_p99_us": 34766.1,
        "client_send_us": 235.7,
        "client_recv_us": 0.4,
        "server": ServerBreakdown(
            request_count=262,
            execution_count=131,
            inference_count=262,
            queue_us=9151.3,
            compute_input_us=190.2,
            compute_infer_us=11346.9,
            compute_output_us=17.5,
            total_us=21000.0,
            available=True,
        ),
    }
    values.update(changes)
    return Measurement(**values)  # type: ignore[arg-type]


def test_header_is_perf_analyzers() -> None:
    assert ",".join(header(CsvLayout())) == PA_HEADER
    rate = ",".join(header(CsvLayout(concurrency_mode=False)))
    assert rate == PA_HEADER.replace("Concurrency,", "Request Rate,", 1)


def test_verbose_percentile_cache_and_no_server_variants() -> None:
    verbose = header(CsvLayout(verbose=True))
    assert verbose[-3:] == ["Avg latency", "request/response", "response wait"]
    with_percentile = header(CsvLayout(verbose=True, percentile=75))
    assert with_percentile[9:14] == [
        "p50 latency",
        "p75 latency",
        "p90 latency",
        "p95 latency",
        "p99 latency",
    ]
    assert with_percentile[-2:] == ["request/response", "response wait"]  # no Avg latency
    cache = header(CsvLayout(cache_columns=True))
    assert cache[8:10] == ["Server Cache Hit", "Server Cache Miss"]
    assert header(CsvLayout(server_stats=False)) == [
        "Concurrency",
        "Inferences/Second",
        "Client Send",
        "Client Recv",
        "p50 latency",
        "p90 latency",
        "p95 latency",
        "p99 latency",
    ]


def test_row_values_are_truncated_microseconds_and_network_is_the_remainder() -> None:
    values = row(measurement(), CsvLayout(verbose=True))
    # wait = 21874.9 - 235.7 - 0.4 = 21638.8; server = 9151.3 + 190.2 + 11346.9 + 17.5
    assert values == [
        "2",
        "87.2",
        "235",
        "932",
        "9151",
        "190",
        "11346",
        "17",
        "0",
        "21874",
        "28557",
        "29768",
        "34766",
        "21874",
        "235",
        "21639",
    ]


def test_network_column_never_goes_negative() -> None:
    busy_server = ServerBreakdown(queue_us=30000.0, compute_infer_us=1.0, available=True)
    assert row(measurement(server=busy_server), CsvLayout())[3] == "0"


def test_doubles_print_like_cpp_streams() -> None:
    assert format_double(69.2) == "69.2"
    assert format_double(1234.5678) == "1234.57"
    assert format_double(100.0) == "100"
    assert format_double(2500000.0) == "2.5e+06"


def test_rows_are_sorted_by_throughput_and_rates_print_as_doubles() -> None:
    rows = [
        measurement(concurrency=0, request_rate=r, throughput=t)
        for r, t in ((100.0, 90.0), (50.5, 50.4), (150.0, 80.0))
    ]
    text = csv_text(rows, CsvLayout(concurrency_mode=False))
    lines = text.splitlines()
    assert lines[0].startswith("Request Rate,Inferences/Second,")
    assert [line.split(",")[0] for line in lines[1:]] == ["50.5", "150", "100"]
    assert text.endswith("\n")


def test_json_output_is_a_list_of_measurements(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    write_json(path, [measurement(), measurement(concurrency=4)])
    data = json.loads(path.read_text())
    assert [d["concurrency"] for d in data] == [2, 4]
    assert data[0]["server"]["queue_us"] == 9151.3


def record(start: int, end: int, ok: bool = True) -> RequestRecord:
    return RequestRecord(start, end, 10, 5, ok, "" if ok else "boom")


def test_profile_export_shape() -> None:
    first = Window(start_ns=100, end_ns=200, ok=[record(90, 150), record(120, 190)])
    second = Window(
        start_ns=200, end_ns=300, ok=[record(210, 250)], failed=[record(220, 260, False)]
    )
    runs = [
        LevelRun(LoadLevel(concurrency=3), None, True, True, windows=[first, second]),
        LevelRun(LoadLevel(request_rate=12.5), None, True, True, errors=Counter()),
    ]
    document = profile_export(runs, offset_ns=1_000)
    assert set(document) == {"experiments", "version", "service_kind", "endpoint"}
    assert document["service_kind"] == "triton"
    one, two = document["experiments"]
    assert one["experiment"] == {"mode": "concurrency", "value": 3}
    assert one["window_boundaries"] == [1100, 1200, 1300]
    assert [r["timestamp"] for r in one["requests"]] == [1090, 1120, 1210, 1220]
    assert one["requests"][0]["response_timestamps"] == [1150]
    assert one["requests"][0]["request_inputs"] == {}
    assert one["requests"][3]["error"] == "boom"
    assert "error" not in one["requests"][0]
    assert two["experiment"] == {"mode": "request_rate", "value": 12.5}
    assert two["requests"] == [] and two["window_boundaries"] == []
    json.dumps(document)
