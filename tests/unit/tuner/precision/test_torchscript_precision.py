"""fp16 / bf16 variants of TorchScript models: built as modules of their own, the config's
types kept at the boundary, judged by the accuracy guard, cached, served by the pytorch
backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

pytest.importorskip("torch")

import torch

from serve.api import open_torchscript
from tuner.candidate import Candidate, apply, variant_filename
from tuner.precision import prepare_variants

pytestmark = pytest.mark.filterwarnings(r"ignore:`torch\.jit\.:DeprecationWarning")


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(image)))
        return self.fc(x.mean(dim=(2, 3)))


class Named(torch.nn.Module):
    """Inputs by name (one of them integer, one optional), a dict out with an integer output."""

    def forward(
        self, scores: torch.Tensor, offset: torch.Tensor, scale: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        shifted = scores + offset.to(scores.dtype)
        if scale is not None:
            shifted = shifted * scale
        return {"shifted": shifted, "top": shifted.argmax(dim=1)}


class TakesAnInt(torch.nn.Module):
    def forward(self, x: torch.Tensor, k: int = 2) -> torch.Tensor:
        return x * k


NET_CONFIG = """
name: "net" backend: "pytorch" max_batch_size: 8
input [{ name: "image" data_type: TYPE_FP32 dims: [3, 16, 16] }]
output [{ name: "logits" data_type: TYPE_FP32 dims: [10] }]
"""
NAMED_CONFIG = """
name: "named" backend: "pytorch" max_batch_size: 8
input [
  { name: "scores" data_type: TYPE_FP32 dims: [5] },
  { name: "offset" data_type: TYPE_INT32 dims: [5] }
]
output [
  { name: "shifted" data_type: TYPE_FP32 dims: [5] },
  { name: "top" data_type: TYPE_INT64 dims: [] }
]
"""


def _model(
    tmp_path: Path, module: torch.nn.Module, config_text: str
) -> tuple[Path, mc.ModelConfig]:
    config = text_format.Parse(config_text, mc.ModelConfig())
    path = tmp_path / config.name / "1" / "model.pt"
    path.parent.mkdir(parents=True)
    torch.manual_seed(0)
    torch.jit.script(module.eval()).save(str(path))
    return path, config


def test_fp16_and_bf16_modules_pass_the_guard_and_int8_is_for_onnx(tmp_path: Path) -> None:
    path, config = _model(tmp_path, Net(), NET_CONFIG)
    cache = tmp_path / "cache"
    # Random weights leave close logits, whose order fp16 may flip: a loose limit (the guard's
    # limits themselves are tested with the ONNX variants).
    wanted = ["fp32", "fp16", "bf16", "int8"]
    variants = prepare_variants(
        path.parent.parent, config, path, wanted, 0.25, None, cache, count=16
    )
    fp32, fp16, bf16, int8 = variants
    assert fp32.model_path == path and fp32.usable
    for variant, dtype in ((fp16, torch.float16), (bf16, torch.bfloat16)):
        assert variant.usable, variant.verdict
        assert variant.model_path is not None and variant.model_path.suffix == ".pt"
        assert variant.accuracy is not None and variant.accuracy.samples == 16
        assert "checked on the CPU" in variant.method
        module = torch.jit.load(str(variant.model_path))
        assert {p.dtype for p in module.parameters()} == {dtype}
        # The protocol's types are the config's: float32 in, float32 out.
        out = module(torch.rand(2, 3, 16, 16))
        assert out.dtype == torch.float32 and out.shape == (2, 10)
    assert not int8.usable and "TorchScript models have fp16, bf16" in str(int8.error)
    again = prepare_variants(path.parent.parent, config, path, wanted, 0.25, None, cache, count=16)
    assert again[2].cached and again[2].model_path == bf16.model_path


def test_a_variant_keeps_forward_names_and_the_config_types(tmp_path: Path) -> None:
    path, config = _model(tmp_path, Named(), NAMED_CONFIG)
    (bf16,) = [
        v
        for v in prepare_variants(
            path.parent.parent, config, path, ["bf16"], 0.05, None, tmp_path / "c", count=8
        )
        if v.precision == "bf16"
    ]
    assert bf16.usable, bf16.verdict
    assert bf16.model_path is not None
    # Served as the tuner serves it: the file beside the original, the config pointing at it.
    served = path.parent / variant_filename(path.name, "bf16")
    served.write_bytes(bf16.model_path.read_bytes())
    served_config = apply(Candidate({"precision": "bf16"}), config)
    assert served_config.default_model_filename == "model.bf16.pt"
    runner = open_torchscript(served_config, served)
    scores = np.array([[0.5, 1.0, 0.25, 0.0, 2.0]], dtype=np.float32)
    offset = np.array([[0, 2, 0, 0, 0]], dtype=np.int32)
    outputs = runner.run({"offset": offset, "scores": scores})  # by name, not by position
    runner.close()
    assert outputs["shifted"].dtype == np.float32 and outputs["top"].dtype == np.int64
    np.testing.assert_allclose(outputs["shifted"], scores + offset, rtol=1e-2)
    assert outputs["top"].tolist() == [1]


def test_a_module_the_cast_cannot_wrap_is_excluded_saying_why(tmp_path: Path) -> None:
    config_text = NET_CONFIG.replace('"net"', '"ints"').replace("[3, 16, 16]", "[4]")
    config_text = config_text.replace("dims: [10]", "dims: [4]")
    path, config = _model(tmp_path, TakesAnInt(), config_text)
    variants = prepare_variants(
        path.parent.parent, config, path, ["fp32", "fp16"], 0.05, None, tmp_path / "c", count=4
    )
    assert variants[0].usable and not variants[1].usable
    assert "forward() argument 'k' is int with a default" in str(variants[1].error)
