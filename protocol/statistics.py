"""Field names of Triton's statistics extension (`GET /v2/models[/{m}[/versions/{v}]]/stats`).

Every duration is an object `{"count": N, "ns": T}`: how many and their nanoseconds in total.
"""

from __future__ import annotations

# `inference_stats` of one `model_stats` entry, in the order Triton prints them.
DURATION_FIELDS: tuple[str, ...] = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)

# The durations of each `batch_stats` entry (besides its `batch_size`).
BATCH_DURATION_FIELDS: tuple[str, ...] = ("compute_input", "compute_infer", "compute_output")
