"""Measuring one load level the way perf_analyzer does, and sweeping or searching levels."""
