"""The load generator: a perf_analyzer-style client of any KServe v2 server.

The public API is importable from here (loaded on first use):
`measure`, `sweep`, `find_max_load` (and their `*_async` forms), `MeasureSettings`,
`SweepSpec`, `SearchResult`, `LoadOptions`, `SequenceOptions`, `LoadLevel`, `Measurement`,
`AnalyzerError`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "measure": "analyzer.api",
    "measure_async": "analyzer.api",
    "sweep": "analyzer.api",
    "sweep_async": "analyzer.api",
    "find_max_load": "analyzer.api",
    "find_max_load_async": "analyzer.api",
    "open_session": "analyzer.api",
    "MeasureSettings": "analyzer.profiler.settings",
    "SweepSpec": "analyzer.profiler.sweep",
    "SearchResult": "analyzer.profiler.search",
    "LoadOptions": "analyzer.load.options",
    "SequenceOptions": "analyzer.load.sequences",
    "LoadLevel": "analyzer.load.base",
    "Measurement": "analyzer.measurement",
    "ServerBreakdown": "analyzer.measurement",
    "AnalyzerError": "analyzer.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
