"""How many cores this process may use, and what their instruction set offers."""

from __future__ import annotations

import os
from pathlib import Path

# CPU flags (Linux /proc/cpuinfo) that give bfloat16 arithmetic in hardware.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def usable_cpu_count() -> int:
    """Cores this process may run on (the affinity mask, as in a container), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The first processor's feature flags; empty where the file is missing (not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> bool:
    """The CPU computes in bfloat16 natively (AVX-512 BF16 or AMX), so bf16 can beat fp32."""
    return bool((cpu_flags() if flags is None else flags) & BF16_FLAGS)
