"""The machine a baseline was recorded on, and how another machine differs from it."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

import psutil

from common.cpu import usable_cpu_count

# Fields that make measurements incomparable when they differ; the rest (kernel build,
# hostname-free OS string, autotune version) is recorded for the reader only.
COMPARED = (
    "cpu_model",
    "logical_cpus",
    "usable_cpus",
    "memory_gib",
    "system",
    "arch",
    "python",
    "onnxruntime",
)


def describe_machine() -> dict[str, Any]:
    """This machine and software, as recorded in a baseline."""
    return {
        "cpu_model": _cpu_model(),
        "logical_cpus": os.cpu_count() or 1,
        "usable_cpus": usable_cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "system": platform.system(),
        "arch": platform.machine(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "onnxruntime": _version("onnxruntime"),
        "autotune": _version("autotune"),
    }


def machine_differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """'field: recorded -> current' for every compared field that differs."""
    return [
        f"{key}: {recorded.get(key)!r} -> {current.get(key)!r}"
        for key in COMPARED
        if recorded.get(key) != current.get(key)
    ]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
