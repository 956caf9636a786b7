"""Running the `autotune` CLI as a user does, on private copies of bundled models."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import BUNDLED_REPOSITORY

SLOW_DIGITS_CONFIG = """name: "digits"
platform: "onnxruntime_onnx"
max_batch_size: 64
input [{ name: "input" data_type: TYPE_FP32 dims: [1, 8, 8] }]
output [{ name: "logits" data_type: TYPE_FP32 dims: [10] }]
dynamic_batching { preferred_batch_size: [64] max_queue_delay_microseconds: 40000 }
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "intra_op_thread_count" value { string_value: "1" } }
"""
"""A digits config that cannot meet a 20 ms budget: each request may wait 40 ms for a full
batch. Any configuration the tuner writes for that budget therefore differs from it."""


@pytest.fixture
def repository_with(tmp_path: Path, bundled_repository: Path) -> Callable[..., Path]:
    """A repository in tmp_path holding copies of the named bundled models."""

    def build(*models: str, configs: dict[str, str] | None = None) -> Path:
        root = tmp_path / "model_repository"
        for model in models:
            shutil.copytree(bundled_repository / model, root / model, symlinks=False)
            if configs and model in configs:
                (root / model / "config.pbtxt").write_text(configs[model])
        return root

    return build


def autotune(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the CLI in `cwd` and return its result (stdout and stderr as text)."""
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
    )


__all__ = ["BUNDLED_REPOSITORY", "SLOW_DIGITS_CONFIG", "autotune"]


def slow_digits_args(seed: int) -> tuple[str, ...]:
    """A short tuning of digits (SLOW_DIGITS_CONFIG) for the tests that kill and resume runs:
    fp32 only, 300 ms windows, no re-measure (the kill and the resume are checked)."""
    return (
        *("--latency-p95", "20ms", "-m", "digits", "--precision", "fp32"),
        *("--measurement-interval", "300", "--seed", str(seed), "--remeasure-top", "0"),
    )
