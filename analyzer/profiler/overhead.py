"""The client's own load: perf_analyzer's "Avg client overhead".

perf_analyzer reports the share of each window its worker threads were busy rather than idle
and warns above 50% ("not able to keep up with the desired load"). Here the analogue is the CPU
time the client processes used in the window, as a share of the window: the busiest process
counts, since a saturated sender is what holds the load back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import psutil


class CpuMeter:
    """Samples the CPU time (user + system) of the client processes.

    `pids` is asked at every sample: worker processes appear once the driver has started."""

    def __init__(self, pids: Callable[[], Iterable[int]]) -> None:
        self._pids = pids
        self._processes: dict[int, psutil.Process | None] = {}

    def sample(self) -> dict[int, float]:
        """CPU seconds used so far, per client process id."""
        samples: dict[int, float] = {}
        for pid in self._pids():
            if pid not in self._processes:
                try:
                    self._processes[pid] = psutil.Process(pid)
                except psutil.Error:
                    self._processes[pid] = None
            process = self._processes[pid]
            if process is None:
                continue
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            samples[pid] = times.user + times.system
        return samples


def busy_pct(before: dict[int, float], after: dict[int, float], wall_s: float) -> float:
    """The busiest process's CPU time between two samples, as a percentage of `wall_s`
    (processes present in both samples only)."""
    if wall_s <= 0:
        return 0.0
    used = [after[pid] - before[pid] for pid in after.keys() & before.keys()]
    if not used:
        return 0.0
    return min(100.0, max(0.0, max(used)) / wall_s * 100.0)
