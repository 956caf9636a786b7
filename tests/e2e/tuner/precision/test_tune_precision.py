"""Reduced precision under the accuracy guard: a variant over the limit is never chosen, one
within it can be. ResNet-18's fp16 variant stays within 1e-4 of FP32 (cosine), its int8
variant does not (about 1e-3), so one run shows both sides."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from serve.config.model_config import read_config_file
from tests.e2e.conftest import autotune


def test_accuracy_guard_excludes_int8_and_admits_fp16(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("resnet18")
    rng = np.random.default_rng(5)
    samples = [
        {"input": {"content": rng.random(3 * 224 * 224).round(4).tolist(), "shape": [3, 224, 224]}}
        for _ in range(32)
    ]
    validation = tmp_path / "validation.json"
    validation.write_text(json.dumps({"data": samples}))
    result = autotune(
        tmp_path,
        "--latency-p95",
        "400ms",
        "-m",
        "resnet18",
        "--model-repository",
        str(repository),
        "--precision",
        "fp32,fp16,int8",
        "--max-accuracy-drop",
        "0.0001",
        *("--validation-data", str(validation)),
        # Trial 2 is fp16 whatever the sampler does: the priors after the config as written
        # are the model's own config, then the same in each other precision.
        "--trials",
        "3",
        "--measurement-interval",
        "300",
        *("--remeasure-top", "0"),  # the guard is checked, not the re-measure
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "reports" / "resnet18" / "summary.json").read_text())
    variants = {v["precision"]: v for v in summary["variants"]}
    assert variants["int8"]["usable"] is False
    assert variants["int8"]["accuracy"]["drop"] > 0.0001
    assert "excluded" in variants["int8"]["verdict"]
    assert variants["fp16"]["usable"] is True
    assert variants["int8"]["accuracy"]["source"] == f"validation data {validation} (32 samples)"

    def precision(trial: dict) -> str:
        return trial["candidate"]["precision"] if trial["candidate"] else ""

    # Excluded before the search: int8 is not even a point of the space.
    assert any(
        line.startswith("precision (") and line.endswith("): fp32, fp16")
        for line in summary["space"]
    )
    assert not any("int8" in line for line in summary["space"])
    assert not [t for t in summary["trials"] if precision(t) == "int8"]
    fp16_trials = [t for t in summary["trials"] if precision(t) == "fp16"]

    def admitted(trial: dict) -> bool:
        """Feasible, or measured within the budget and then pruned only for its throughput
        (fp16 often runs slower than fp32 on a CPU, so the study's pruner may stop it)."""
        outcome = trial["outcome"]
        return trial["feasible"] or (
            outcome["status"] == "pruned"
            and outcome["accuracy_ok"]
            and 0 < outcome["latency_us"] <= 400_000
            and outcome["throughput"] > 0
        )

    assert any(admitted(t) for t in fp16_trials), "a variant within the limit can be chosen"
    assert precision(summary["best"]) != "int8"
    written = read_config_file(repository / "resnet18" / "config.pbtxt")
    assert "int8" not in written.default_model_filename
    assert not (repository / "resnet18" / "1" / "model.int8.onnx").exists()
