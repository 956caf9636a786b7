"""The tuner's TensorRT engines (plan_fp16 / plan_int8) without a GPU: the optimization
profile, the builder's calls through a stand-in of the tensorrt module, and the variant's
wiring (cache, QDQ source for INT8, accuracy run as the backend runs the engine) with the
engine and its runner stood in. Building and running a real engine: tests/gpu."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from tritonclient.grpc import model_config_pb2 as mc

import tuner.precision.variants as variants
from common.gpu import GpuDevice
from serve.api import ServingPlatform
from serve.config.model_config import parse_config_text, read_config_file
from tests.conftest import BUNDLED_REPOSITORY
from tuner.precision import PrecisionError, prepare_variants
from tuner.precision.builders import STATIC_METHOD
from tuner.precision.tensorrt_engine import (
    InputProfile,
    build_engine,
    engine_method,
    input_profiles,
)

DIGITS = BUNDLED_REPOSITORY / "digits"


def _config(text: str) -> mc.ModelConfig:
    return parse_config_text(text, "config.pbtxt")


IMAGES = _config(
    'max_batch_size: 8 input [{name: "images" data_type: TYPE_FP32 dims: [3, -1, 224]}]'
    ' output [{name: "logits" data_type: TYPE_FP32 dims: [1000]}]'
)


def test_the_profile_spans_batch_one_to_the_largest_tried_with_the_config_filling_dims() -> None:
    (profile,) = input_profiles([("images", (-1, 3, 224, -1))], IMAGES, 128)
    assert profile == InputProfile(
        "images", (1, 3, 224, 224), (128, 3, 224, 224), (128, 3, 224, 224)
    )


@pytest.mark.parametrize(
    ("graph", "config", "message"),
    [
        ((-1, 3, -1, 224), IMAGES, "variable dimension in both"),
        ((4, 3, 224, 224), IMAGES, "fixes its first dimension at 4"),
        ((-1, 3, 224), IMAGES, "do not match"),
    ],
)
def test_a_profile_that_cannot_be_made_names_the_input(
    graph: tuple[int, ...], config: mc.ModelConfig, message: str
) -> None:
    with pytest.raises(PrecisionError, match=message) as caught:
        input_profiles([("images", graph)], config, 8)
    assert "'images'" in str(caught.value)


def test_a_model_that_does_not_batch_gets_its_own_dims_and_fixed_inputs_no_profile() -> None:
    config = _config('input [{name: "x" data_type: TYPE_FP32 dims: [4, 16]}]')
    assert input_profiles([("x", (4, 16))], config, 0) == []
    assert input_profiles([("x", (4, -1))], config, 0) == [
        InputProfile("x", (4, 16), (4, 16), (4, 16))
    ]


# -- the builder, through a stand-in of the tensorrt module -----------------------------------


@dataclass
class FakeTensorRT:
    """Records what the builder asks of TensorRT."""

    parses: bool = True
    builds: bool = True
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def module(self) -> Any:
        fake = self

        class Network:
            num_inputs = 1

            def get_input(self, index: int) -> Any:
                return SimpleNamespace(name="images", shape=(-1, 3, 224, 224))

        class Parser:
            num_errors = 1

            def __init__(self, network: Network, logger: Any) -> None:
                pass

            def parse_from_file(self, path: str) -> bool:
                fake.calls.append(("parse", Path(path).name))
                return fake.parses

            def get_error(self, index: int) -> str:
                return "Unsupported ONNX op: NonMaxSuppression"

        class Profile:
            def set_shape(self, name: str, *shapes: tuple[int, ...]) -> None:
                fake.calls.append(("profile", name, *shapes))

        class Settings:
            def set_memory_pool_limit(self, pool: str, size: int) -> None:
                fake.calls.append(("workspace", size))

            def set_flag(self, flag: str) -> None:
                fake.calls.append(("flag", flag))

            def add_optimization_profile(self, profile: Profile) -> None:
                fake.calls.append(("add profile",))

        class Builder:
            def __init__(self, logger: Any) -> None:
                pass

            def create_network(self, flags: int) -> Network:
                return Network()

            def create_builder_config(self) -> Settings:
                return Settings()

            def create_optimization_profile(self) -> Profile:
                return Profile()

            def build_serialized_network(self, network: Network, settings: Settings) -> Any:
                return b"engine bytes" if fake.builds else None

        class Logger:
            WARNING = 2

            def __init__(self, level: int) -> None:
                pass

        return SimpleNamespace(
            Logger=Logger,
            Builder=Builder,
            OnnxParser=Parser,
            MemoryPoolType=SimpleNamespace(WORKSPACE="workspace"),
            BuilderFlag=SimpleNamespace(FP16="fp16", INT8="int8"),
        )


@pytest.mark.parametrize(
    ("precision", "flags"), [("plan_fp16", ["fp16"]), ("plan_int8", ["int8", "fp16"])]
)
def test_the_builder_sets_the_precision_flags_and_one_profile(
    tmp_path: Path, precision: str, flags: list[str]
) -> None:
    fake = FakeTensorRT()
    target = tmp_path / "model.plan"
    build_engine(tmp_path / "model.onnx", target, precision, IMAGES, 32, trt=fake.module())
    assert target.read_bytes() == b"engine bytes"
    assert [c[1] for c in fake.calls if c[0] == "flag"] == flags
    shapes = ((1, 3, 224, 224), (32, 3, 224, 224), (32, 3, 224, 224))
    assert ("profile", "images", *shapes) in fake.calls
    assert fake.calls.count(("add profile",)) == 1


def test_what_tensorrt_refuses_is_said_with_its_reasons(tmp_path: Path) -> None:
    target = tmp_path / "model.plan"
    with pytest.raises(PrecisionError, match=r"cannot parse model\.onnx: Unsupported ONNX op"):
        build_engine(
            tmp_path / "model.onnx",
            target,
            "plan_fp16",
            IMAGES,
            8,
            trt=FakeTensorRT(parses=False).module(),
        )
    with pytest.raises(PrecisionError, match="could not build the plan_int8 engine"):
        build_engine(
            tmp_path / "model.onnx",
            target,
            "plan_int8",
            IMAGES,
            8,
            trt=FakeTensorRT(builds=False).module(),
        )
    assert not target.exists()


def test_the_engine_method_names_what_an_engine_is_bound_to() -> None:
    method = engine_method("plan_int8", "10.9.0", "NVIDIA H200", 64)
    assert method == "TensorRT 10.9.0 engine, INT8+FP16, batch 1..64, for NVIDIA H200"


# -- the variant, wired end to end with the GPU parts stood in --------------------------------


class OnnxRunner:
    """Stands in for serve.api.open_engine: the stand-in engine is its source ONNX model,
    run on the CPU."""

    def __init__(self, path: Path) -> None:
        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])

    def run(self, feeds: Mapping[str, np.ndarray]) -> Any:
        names = [o.name for o in self.session.get_outputs()]
        return SimpleNamespace(
            outputs=dict(zip(names, self.session.run(names, dict(feeds)), strict=True))
        )

    def close(self) -> None:
        pass


def test_engine_variants_build_once_from_the_right_source_and_pass_the_guard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gpu = GpuDevice(0, "NVIDIA H200", "GPU-0", 2**37)
    platform = ServingPlatform(2, (gpu,), ("CPUExecutionProvider",), ("onnxruntime",), "10.9.0")
    built: list[tuple[str, str, int]] = []
    sources: list[Path] = []

    def fake_build(
        source: Path, target: Path, precision: str, config: mc.ModelConfig, max_batch: int
    ) -> None:
        built.append((source.name, precision, max_batch))
        sources.append(source)
        target.write_bytes(source.read_bytes())

    monkeypatch.setattr(variants, "tensorrt_engines_missing", lambda: None)
    monkeypatch.setattr(variants, "detect_platform", lambda: platform)
    monkeypatch.setattr(variants, "build_engine", fake_build)
    monkeypatch.setattr(variants, "open_engine", OnnxRunner)
    config = read_config_file(DIGITS / "config.pbtxt")
    source = DIGITS / "1" / "model.onnx"

    def prepare() -> list[variants.PrecisionVariant]:
        return prepare_variants(
            DIGITS,
            config,
            source,
            ["plan_fp16", "plan_int8"],
            0.05,
            None,
            tmp_path,
            count=32,
            engine_max_batch=64,
        )

    fp16, int8 = prepare()
    # FP16 from the FP32 model; INT8 from the QDQ model calibrated on the validation data.
    assert [(b[0].endswith(".onnx"), b[1], b[2]) for b in built] == [
        (True, "plan_fp16", 64),
        (True, "plan_int8", 64),
    ]
    assert sources[0] == source
    qdq = json.loads(sources[1].with_suffix(".json").read_text())
    assert (qdq["precision"], qdq["method"]) == ("int8", STATIC_METHOD)
    for variant in (fp16, int8):
        assert variant.error is None and variant.usable, variant.verdict
        assert variant.model_path is not None and variant.model_path.suffix == ".plan"
        assert "for NVIDIA H200" in variant.method and not variant.cached
    assert fp16.accuracy is not None and fp16.accuracy.drop == 0.0  # the stand-in runs FP32
    assert int8.accuracy is not None and int8.accuracy.samples == 32
    again = prepare()
    assert len(built) == 2 and all(v.cached for v in again)


def test_without_a_gpu_engine_variants_say_what_is_missing(tmp_path: Path) -> None:
    config = read_config_file(DIGITS / "config.pbtxt")
    fp32, plan = prepare_variants(
        DIGITS, config, DIGITS / "1" / "model.onnx", ["fp32", "plan_fp16"], 0.01, None, tmp_path
    )
    assert fp32.usable and not plan.usable
    assert plan.error is not None and "a TensorRT engine needs a GPU" in plan.error
