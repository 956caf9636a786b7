"""Server metadata lists Triton 2.51's extensions, in its order (read off tritonserver 2.51's
GET /v2 on 2026-12-05): clients that check for `sequence` find it."""

from __future__ import annotations

from serve.dataplane import EXTENSIONS

TRITON_2_51 = [
    "classification",
    "sequence",
    "model_repository",
    "model_repository(unload_dependents)",
    "schedule_policy",
    "model_configuration",
    "system_shared_memory",
    "cuda_shared_memory",
    "binary_tensor_data",
    "parameters",
    "statistics",
    "trace",
    "logging",
]


def test_the_extensions_are_tritons() -> None:
    assert EXTENSIONS == TRITON_2_51
