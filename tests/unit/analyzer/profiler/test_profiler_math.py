"""Percentiles, stability and server-statistics arithmetic of the measurer."""

from __future__ import annotations

import pytest

from analyzer.profiler.percentiles import (
    mean_and_std,
    percentile_index,
    percentile_of_sorted,
    percentiles_of,
)
from analyzer.profiler.server_stats import ServerCounters, breakdown, select_model_stats
from analyzer.profiler.stability import any_over_threshold, is_stable, spread_within


def test_percentile_index_is_perf_analyzers_rounded_rank() -> None:
    # index = int(p / 100 * (n - 1) + 0.5)
    assert percentile_index(50, 10) == 5
    assert percentile_index(90, 10) == 8
    assert percentile_index(95, 10) == 9
    assert percentile_index(99, 10) == 9
    assert percentile_index(50, 1) == 0
    assert percentile_index(99, 100) == 98
    assert percentile_index(50, 4) == 2  # 1.5 rounds half up


def test_percentiles_are_sample_values_never_interpolated() -> None:
    values = list(range(1, 11))
    assert percentile_of_sorted(values, 50) == 6
    assert percentiles_of(values) == {50: 6, 90: 9, 95: 10, 99: 10}
    assert list(percentiles_of(values, extra=75)) == [50, 75, 90, 95, 99]
    assert percentiles_of([7]) == {50: 7, 90: 7, 95: 7, 99: 7}
    with pytest.raises(ValueError):
        percentile_index(50, 0)


def test_mean_and_sample_std() -> None:
    assert mean_and_std([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx((5.0, 2.138), abs=1e-3)
    assert mean_and_std([3]) == (3.0, 0.0)


def test_spread_is_max_over_min() -> None:
    assert spread_within([100, 110], 10)
    assert not spread_within([100, 110.1], 10)
    assert not spread_within([0, 1], 50)


def test_stability_needs_three_windows_all_within_for_both() -> None:
    assert not is_stable([100, 100], [1, 1], 10)
    assert is_stable([50, 100, 101, 105], [9, 1, 1.05, 1.1], 10)
    assert not is_stable([100, 100, 130], [1, 1, 1], 10)  # throughput spread
    assert not is_stable([100, 100, 100], [1, 1, 1.2], 10)  # latency spread
    assert is_stable([100, 100, 100], [1, 1, 1.2], 10, check_latency=False)
    assert not is_stable([100, 0, 100], [1, 1, 1], 10)  # a window without requests
    assert is_stable([100, 140], [1, 1], 50, window=2)


def test_latency_threshold_looks_at_the_last_three_windows() -> None:
    assert not any_over_threshold([5, 5], 4)  # fewer than three windows
    assert any_over_threshold([5, 1, 1, 1], 4) is False
    assert any_over_threshold([1, 1, 5, 1], 4)
    assert any_over_threshold([1, 1, 4], 4)  # reaching it counts
    assert not any_over_threshold([9, 9, 9], 0)  # no threshold


STATS = {
    "model_stats": [
        {
            "name": "m",
            "version": "1",
            "inference_count": 40,
            "execution_count": 10,
            "inference_stats": {
                "success": {"count": 20, "ns": 20_000_000},
                "fail": {"count": 1, "ns": 5},
                "queue": {"count": 20, "ns": 4_000_000},
                "compute_input": {"count": 10, "ns": 1_000_000},
                "compute_infer": {"count": 10, "ns": 8_000_000},
                "compute_output": {"count": 10, "ns": 1_000_000},
                "cache_hit": {"count": 0, "ns": 0},
                "cache_miss": {"count": 0, "ns": 0},
            },
        },
        {"name": "m", "version": "2", "inference_stats": {}},
        {"name": "other", "version": "1"},
    ]
}


def test_model_stats_selection_by_name_and_version() -> None:
    entry = select_model_stats(STATS, "m", "1")
    assert entry is not None and entry["version"] == "1"
    latest = select_model_stats(STATS, "m", "")
    assert latest is not None and latest["version"] == "2"
    assert select_model_stats(STATS, "missing", "") is None
    assert select_model_stats(STATS["model_stats"][0], "m", "1") is not None


def test_breakdown_divides_each_duration_by_its_own_count() -> None:
    entry = select_model_stats(STATS, "m", "1")
    assert entry is not None
    counters = ServerCounters.from_model_stats(entry)
    assert counters.success_count == 20 and counters.fail_count == 1
    delta = counters.minus(ServerCounters())
    result = breakdown(delta)
    assert result.available
    assert result.request_count == 20
    assert result.execution_count == 10
    assert result.inference_count == 40
    assert result.total_us == pytest.approx(1000.0)
    assert result.queue_us == pytest.approx(200.0)
    assert result.compute_input_us == pytest.approx(100.0)
    assert result.compute_infer_us == pytest.approx(800.0)
    assert result.compute_output_us == pytest.approx(100.0)
    assert result.overhead_us == 0.0  # 1000 - 200 - 1000 is negative: floored


def test_counter_deltas_and_empty_breakdown() -> None:
    before = ServerCounters(success_count=5, success_ns=5_000, queue_count=5, queue_ns=500)
    after = ServerCounters(success_count=15, success_ns=25_000, queue_count=15, queue_ns=2_500)
    delta = after.minus(before)
    assert delta.success_count == 10 and delta.queue_ns == 2_000
    result = breakdown(delta)
    assert result.total_us == pytest.approx(2.0)
    assert result.overhead_us == pytest.approx(1.8)
    assert breakdown(ServerCounters()).total_us == 0.0
