"""CPU utilization over the time between scrapes and memory, as Triton reports them."""

from __future__ import annotations

import time
from collections import namedtuple

import psutil
import pytest
from prometheus_client.metrics_core import Metric

from serve.metrics.system import CpuCollector, busy_fraction

# The fields psutil.cpu_times() has on Linux.
Times = namedtuple(
    "Times", "user nice system idle iowait irq softirq steal guest guest_nice", defaults=[0] * 10
)


def test_busy_fraction_counts_iowait_as_idle_and_guest_once() -> None:
    before = Times(user=100, system=50, idle=800, iowait=50)
    # 100 s pass over all cores: 30 user (10 of it guest, counted inside user), 10 system,
    # 50 idle, 10 iowait
    after = Times(user=130, system=60, idle=850, iowait=60, guest=10)
    assert busy_fraction(before, after) == pytest.approx(0.4)


def test_busy_fraction_without_elapsed_time_is_zero_and_stays_in_range() -> None:
    sample = Times(user=10, idle=10)
    assert busy_fraction(sample, sample) == 0.0
    assert busy_fraction(Times(user=10, idle=10), Times(user=20, idle=10)) == 1.0


def _values(metrics: list[Metric]) -> dict[str, float]:
    return {m.name: m.samples[0].value for m in metrics}


def test_collector_reports_utilization_since_the_last_scrape_and_memory() -> None:
    collector = CpuCollector()
    spent = time.process_time()
    while time.process_time() - spent < 0.2:  # keep one core busy between two scrapes
        pass
    first = _values(list(collector.collect()))
    assert 0.0 < first["nv_cpu_utilization"] <= 1.0
    memory = psutil.virtual_memory()
    assert first["nv_cpu_memory_total_bytes"] == memory.total
    assert 0 < first["nv_cpu_memory_used_bytes"] < memory.total
    second = _values(list(collector.collect()))
    assert 0.0 <= second["nv_cpu_utilization"] <= 1.0
