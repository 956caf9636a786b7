"""--collect-metrics: reading the server's GPU metrics (Triton's names and labels), merging a
measurement's readings as perf_analyzer does, and the CSV cells and console block."""

from __future__ import annotations

import asyncio
import logging

import pytest

from analyzer.measurement import GpuMetrics
from analyzer.profiler.gpu_metrics import MetricsPoller, merge_readings, parse_scrape, server_gpus
from analyzer.report.console import gpu_metrics_lines
from tests.support.metrics_endpoint import metrics_endpoint

A, B = "GPU-0000-aaaa", "GPU-0001-bbbb"


def _scrape(util_a: float, util_b: float, used_a: int, power_a: float = 100.0) -> str:
    return f"""# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)
# TYPE nv_gpu_utilization gauge
nv_gpu_utilization{{gpu_uuid="{A}"}} {util_a}
nv_gpu_utilization{{gpu_uuid="{B}"}} {util_b}
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes
# TYPE nv_gpu_memory_total_bytes gauge
nv_gpu_memory_total_bytes{{gpu_uuid="{A}"}} 150000000000
nv_gpu_memory_total_bytes{{gpu_uuid="{B}"}} 150000000000
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes
# TYPE nv_gpu_memory_used_bytes gauge
nv_gpu_memory_used_bytes{{gpu_uuid="{A}"}} {used_a}
nv_gpu_memory_used_bytes{{gpu_uuid="{B}"}} 1000
# HELP nv_gpu_power_usage GPU power usage in watts
# TYPE nv_gpu_power_usage gauge
nv_gpu_power_usage{{gpu_uuid="{A}"}} {power_a}
# HELP nv_inference_count Number of inferences performed
# TYPE nv_inference_count counter
nv_inference_count{{model="simple",version="1"}} 12
"""


def test_a_reading_takes_each_gpu_by_uuid_and_ignores_other_metrics() -> None:
    reading = parse_scrape(_scrape(0.5, 0.25, 4_000_000))
    assert reading.utilization == {A: 0.5, B: 0.25}
    assert reading.memory_used_bytes == {A: 4_000_000, B: 1000}
    assert reading.memory_total_bytes == {A: 150_000_000_000, B: 150_000_000_000}
    assert reading.power_w == {A: 100.0}  # a GPU that reports no power has none


def test_readings_merge_as_perf_analyzer_merges_them() -> None:
    readings = [
        parse_scrape(_scrape(0.5, 0.2, 4_000, 100.0)),
        parse_scrape(_scrape(0.7, 0.4, 9_000, 200.0)),
        parse_scrape(_scrape(0.6, 0.3, 5_000, 150.0)),
    ]
    merged = merge_readings(readings)
    assert merged.utilization == pytest.approx({A: 0.6, B: 0.3})  # averages
    assert merged.power_w == pytest.approx({A: 150.0})
    assert merged.memory_used_bytes == {A: 9_000, B: 1000}  # the most
    assert merged.memory_total_bytes == {A: 150_000_000_000, B: 150_000_000_000}
    assert merge_readings([]) == GpuMetrics()


def test_csv_cells_and_console_block_have_perf_analyzer_s_form() -> None:
    merged = merge_readings([parse_scrape(_scrape(0.5, 0.25, 4_000))])
    assert merged.columns() == [
        f"{A}:0.5;{B}:0.25;",
        f"{A}:100;",
        f"{A}:4000;{B}:1000;",
        f"{A}:150000000000;{B}:150000000000;",
    ]
    assert GpuMetrics().columns() == ["", "", "", ""]
    lines = gpu_metrics_lines(merged)
    assert lines[:4] == [
        "  Server Prometheus Metrics: ",
        "    Avg GPU Utilization:",
        f"      {A} : 50%",
        f"      {B} : 25%",
    ]
    assert f"      {A} : 100 watts" in lines and f"      {A} : 4000 bytes" in lines


class _FakeClock:
    def __init__(self) -> None:
        self.now = 0
        self.slept: list[float] = []

    def now_ns(self) -> int:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += int(seconds * 1e9)
        await asyncio.sleep(0)


def test_the_poller_reads_at_its_interval_and_hands_over_what_it_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    texts = iter([_scrape(0.1, 0.1, 1), "nv_other 1\n", _scrape(0.3, 0.3, 3)] * 10)

    async def fetch() -> str:
        return next(texts)

    async def scenario() -> tuple[list[GpuMetrics], list[GpuMetrics], list[float]]:
        clock = _FakeClock()
        poller = MetricsPoller(fetch, 250, clock)
        poller.start()
        for _ in range(6):
            await asyncio.sleep(0)
        first = poller.take()
        for _ in range(3):
            await asyncio.sleep(0)
        second = poller.take()
        await poller.stop()
        return first, second, clock.slept

    with caplog.at_level(logging.WARNING, logger="analyzer.gpu_metrics"):
        first, second, slept = asyncio.run(scenario())
    assert len(first) >= 2 and len(second) >= 1
    assert first[0].utilization == {A: 0.1, B: 0.1} and first[1] == GpuMetrics()
    assert set(slept) == {0.25}
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings.count("WARNING: Unable to parse 'nv_gpu_utilization' metric.") == 1


def test_an_unreachable_endpoint_stops_the_poller_saying_why() -> None:
    async def fetch() -> str:
        raise ConnectionRefusedError(111, "Connection refused")

    async def scenario() -> str | None:
        poller = MetricsPoller(fetch, 1000, _FakeClock(), "127.0.0.1:1/metrics")
        poller.start()
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await poller.stop()
        return poller.error

    error = asyncio.run(scenario())
    assert error is not None and "cannot read the metrics at 127.0.0.1:1/metrics" in error


def test_a_servers_gpus_are_read_from_its_metrics_endpoint() -> None:
    with metrics_endpoint(_scrape(0.5, 0.25, 1000)) as endpoint:
        assert server_gpus(endpoint.url) == {A: 150_000_000_000, B: 150_000_000_000}
        assert server_gpus(f"http://{endpoint.url}/metrics") == server_gpus(endpoint.url)
        endpoint.text = 'nv_inference_count{model="m",version="1"} 3\n'  # no GPU
        assert server_gpus(endpoint.url) == {}
