"""GPU metrics through NVML (nvidia-ml-py, the `gpu` extra), in Triton's names, one series per
GPU labelled by its UUID. Without the package, or when NVML finds no GPU, there are none."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric

from common.gpu import import_nvml

log = logging.getLogger("serve.metrics")


@dataclass(slots=True)
class _Gpu:
    handle: Any
    uuid: str
    energy_start_mj: int | None  # None: the GPU does not report energy


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value  # older bindings gave bytes


class GpuCollector:
    """Reads every GPU through `nvml` (the pynvml module, or an object with its functions) at
    each scrape. Energy counts from when the collector was made, as Triton's counts from its
    start. A value a GPU does not report (power on some boards) is left out for that GPU."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._gpus: list[_Gpu] = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            energy = self._read(nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            self._gpus.append(_Gpu(handle, uuid, None if energy is None else int(energy)))

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    def _read(self, function: Callable[[Any], Any], handle: Any) -> Any:
        try:
            return function(handle)
        except self._nvml.NVMLError:
            return None

    def collect(self) -> Iterator[Metric]:
        nvml = self._nvml
        families = {
            "nv_gpu_utilization": Metric(
                "nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0)", "gauge"
            ),
            "nv_gpu_memory_total_bytes": Metric(
                "nv_gpu_memory_total_bytes", "GPU total memory, in bytes", "gauge"
            ),
            "nv_gpu_memory_used_bytes": Metric(
                "nv_gpu_memory_used_bytes", "GPU used memory, in bytes", "gauge"
            ),
            "nv_gpu_power_usage": Metric("nv_gpu_power_usage", "GPU power usage in watts", "gauge"),
            "nv_gpu_power_limit": Metric(
                "nv_gpu_power_limit", "GPU power management limit in watts", "gauge"
            ),
            "nv_energy_consumption": Metric(
                "nv_energy_consumption",
                "GPU energy consumption in joules since the Triton Server started",
                "counter",
            ),
        }
        for gpu in self._gpus:
            values: dict[str, float | None] = {}
            rates = self._read(nvml.nvmlDeviceGetUtilizationRates, gpu.handle)
            values["nv_gpu_utilization"] = None if rates is None else rates.gpu / 100
            memory = self._read(nvml.nvmlDeviceGetMemoryInfo, gpu.handle)
            values["nv_gpu_memory_total_bytes"] = None if memory is None else memory.total
            values["nv_gpu_memory_used_bytes"] = None if memory is None else memory.used
            power = self._read(nvml.nvmlDeviceGetPowerUsage, gpu.handle)  # milliwatts
            values["nv_gpu_power_usage"] = None if power is None else power / 1000
            limit = self._read(nvml.nvmlDeviceGetPowerManagementLimit, gpu.handle)
            values["nv_gpu_power_limit"] = None if limit is None else limit / 1000
            values["nv_energy_consumption"] = None
            if gpu.energy_start_mj is not None:
                energy = self._read(nvml.nvmlDeviceGetTotalEnergyConsumption, gpu.handle)
                if energy is not None:  # millijoules
                    values["nv_energy_consumption"] = (energy - gpu.energy_start_mj) / 1000
            for name, value in values.items():
                if value is not None:
                    families[name].add_sample(name, {"gpu_uuid": gpu.uuid}, value)
        yield from (family for family in families.values() if family.samples)

    def close(self) -> None:
        with contextlib.suppress(self._nvml.NVMLError):
            self._nvml.nvmlShutdown()


def open_gpu_collector() -> GpuCollector | None:
    """A collector over the GPUs NVML finds, or None: no nvidia-ml-py, no driver, no GPU."""
    pynvml = import_nvml()
    if pynvml is None:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        log.info("no GPU metrics: NVML is not available (%s)", exc)
        return None
    try:
        collector = GpuCollector(pynvml)
    except pynvml.NVMLError as exc:
        log.warning("no GPU metrics: NVML failed listing the GPUs (%s)", exc)
        pynvml.nvmlShutdown()
        return None
    if collector.gpu_count == 0:
        collector.close()
        return None
    return collector
