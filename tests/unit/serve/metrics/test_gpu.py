"""GPU metrics from NVML: read through a fake NVML here (the GPU path needs hardware), and none
at all where nvidia-ml-py or a GPU is missing."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from serve.metrics.gpu import GpuCollector, open_gpu_collector


class FakeNvmlError(Exception):
    pass


@dataclass
class FakeGpu:
    uuid: str
    energy_mj: int | None = 1_000_000
    power_mw: int | None = 75_500


class FakeNvml:
    """The part of pynvml the collector calls, over fixed GPUs."""

    NVMLError = FakeNvmlError

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.shut_down = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> bytes:
        return gpu.uuid.encode()  # older bindings answer bytes

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:
        return SimpleNamespace(gpu=37, memory=5)

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> Any:
        return SimpleNamespace(total=16_000_000_000, used=600_000_000, free=15_400_000_000)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if gpu.power_mw is None:
            raise FakeNvmlError("Not Supported")
        return gpu.power_mw

    def nvmlDeviceGetPowerManagementLimit(self, gpu: FakeGpu) -> int:
        return 300_000

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        if gpu.energy_mj is None:
            raise FakeNvmlError("Not Supported")
        return gpu.energy_mj

    def nvmlShutdown(self) -> None:
        self.shut_down = True


def scrape(collector: GpuCollector) -> dict[str, dict[str, float]]:
    """family -> {gpu_uuid: value}"""
    found: dict[str, dict[str, float]] = {}
    for family in collector.collect():
        for sample in family.samples:
            found.setdefault(family.name, {})[sample.labels["gpu_uuid"]] = sample.value
    return found


def test_every_gpu_is_reported_in_tritons_units() -> None:
    nvml = FakeNvml([FakeGpu("GPU-aaaa"), FakeGpu("GPU-bbbb", energy_mj=5_000_000)])
    collector = GpuCollector(nvml)
    nvml.gpus[0].energy_mj = 1_250_000  # 250 J since the collector was made
    metrics = scrape(collector)
    assert metrics["nv_gpu_utilization"] == {"GPU-aaaa": 0.37, "GPU-bbbb": 0.37}
    assert metrics["nv_gpu_memory_total_bytes"]["GPU-aaaa"] == 16_000_000_000
    assert metrics["nv_gpu_memory_used_bytes"]["GPU-bbbb"] == 600_000_000
    assert metrics["nv_gpu_power_usage"]["GPU-aaaa"] == 75.5
    assert metrics["nv_gpu_power_limit"]["GPU-bbbb"] == 300.0
    assert metrics["nv_energy_consumption"] == {"GPU-aaaa": 250.0, "GPU-bbbb": 0.0}


def test_a_value_a_gpu_does_not_report_is_left_out_for_that_gpu() -> None:
    nvml = FakeNvml([FakeGpu("GPU-aaaa", energy_mj=None, power_mw=None), FakeGpu("GPU-bbbb")])
    metrics = scrape(GpuCollector(nvml))
    assert set(metrics["nv_gpu_power_usage"]) == {"GPU-bbbb"}
    assert set(metrics["nv_energy_consumption"]) == {"GPU-bbbb"}
    assert set(metrics["nv_gpu_utilization"]) == {"GPU-aaaa", "GPU-bbbb"}


def test_no_gpu_reports_no_family() -> None:
    assert scrape(GpuCollector(FakeNvml([]))) == {}


def test_the_machine_gets_gpu_metrics_only_with_nvidia_ml_py_and_a_gpu() -> None:
    collector = open_gpu_collector()  # never raises: no package or no GPU gives None
    if importlib.util.find_spec("pynvml") is None:
        assert collector is None
    if collector is not None:  # nvidia-ml-py found a GPU: every GPU has its memory series
        try:
            assert collector.gpu_count > 0
            assert len(scrape(collector)["nv_gpu_memory_total_bytes"]) == collector.gpu_count
        finally:
            collector.close()
