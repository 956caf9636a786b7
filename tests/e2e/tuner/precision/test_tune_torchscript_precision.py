"""A TorchScript model's fp16 module through the whole run: built, judged by the guard,
served by the tuning server as `model.fp16.pt` and measured (fp16 on CPU instances, since
`--precision` names it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import autotune

pytest.importorskip("torch")

import torch

CONFIG = """name: "small_pt"
backend: "pytorch"
max_batch_size: 8
input [ { name: "image" data_type: TYPE_FP32 dims: [ 3, 16, 16 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


class Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(image)).mean(dim=(2, 3)))


@pytest.mark.filterwarnings(r"ignore:`torch\.jit\.:DeprecationWarning")
def test_a_torchscript_fp16_module_is_served_and_measured(tmp_path: Path) -> None:
    model_dir = tmp_path / "model_repository" / "small_pt"
    (model_dir / "1").mkdir(parents=True)
    torch.manual_seed(0)
    torch.jit.script(Small().eval()).save(str(model_dir / "1" / "model.pt"))
    (model_dir / "config.pbtxt").write_text(CONFIG)
    result = autotune(
        tmp_path,
        *("--latency-p95", "1s", "-m", "small_pt"),
        *("--model-repository", str(model_dir.parent)),
        *("--precision", "fp32,fp16", "--max-accuracy-drop", "0.25"),
        *("--trials", "4", "--measurement-interval", "300", "--remeasure-top", "0"),
        "--dry-run",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((tmp_path / "reports" / "small_pt" / "summary.json").read_text())
    variants = {v["precision"]: v for v in summary["variants"]}
    assert variants["fp16"]["usable"] is True, variants["fp16"]["verdict"]
    assert any(line.startswith("precision (KIND_CPU): fp32, fp16") for line in summary["space"])
    measured = [
        t
        for t in summary["trials"]
        if t["candidate"]
        and t["candidate"].get("precision") == "fp16"
        and (t["outcome"] or {}).get("throughput")
    ]
    assert measured, "the fp16 module was served and measured"
    assert not (model_dir / "1" / "model.fp16.pt").exists()  # a dry run writes nothing
