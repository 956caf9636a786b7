"""How many cores this process may use."""

from __future__ import annotations

import os


def usable_cpu_count() -> int:
    """Cores this process may run on (the affinity mask, as in a container), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
