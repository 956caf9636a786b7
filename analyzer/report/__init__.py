"""Outputs of `autotune perf`: perf_analyzer's CSV, a console table, JSON, profile export."""
