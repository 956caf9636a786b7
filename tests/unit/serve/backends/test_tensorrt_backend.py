"""The tensorrt backend's reading of an engine (through a stand-in with TensorRT's accessors:
no GPU here), the config it completes, the shapes it refuses, and what it says on a machine
without a GPU. Running a real engine: tests/gpu."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import SimpleNamespace

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

import serve.backends.tensorrt as tensorrt_backend
from serve.backends.base import InstanceContext
from serve.backends.registry import get_backend
from serve.backends.tensorrt.engine_io import EngineIO, complete_config, read_engine_io
from serve.backends.tensorrt.instance import TensorRTInstance
from serve.errors import ServeError
from serve.platform import ServingPlatform


class Mode(Enum):
    INPUT = 1
    OUTPUT = 2


TRT = SimpleNamespace(TensorIOMode=Mode, nptype=lambda dtype: dtype)


@dataclass
class FakeEngine:
    """name -> (mode, numpy dtype, shape, profile (min, opt, max) or None)."""

    tensors: dict[str, tuple[Mode, str, tuple[int, ...], tuple[tuple[int, ...], ...] | None]]

    @property
    def num_io_tensors(self) -> int:
        return len(self.tensors)

    @property
    def num_optimization_profiles(self) -> int:
        return 1

    def get_tensor_name(self, index: int) -> str:
        return list(self.tensors)[index]

    def get_tensor_mode(self, name: str) -> Mode:
        return self.tensors[name][0]

    def get_tensor_dtype(self, name: str) -> str:
        return self.tensors[name][1]

    def get_tensor_shape(self, name: str) -> tuple[int, ...]:
        return self.tensors[name][2]

    def get_tensor_profile_shape(self, name: str, profile: int) -> tuple[tuple[int, ...], ...]:
        assert profile == 0
        found = self.tensors[name][3]
        assert found is not None
        return found


RESNET = FakeEngine(
    {
        "images": (
            Mode.INPUT,
            "float32",
            (-1, 3, 224, 224),
            ((1, 3, 224, 224), (8, 3, 224, 224), (32, 3, 224, 224)),
        ),
        "logits": (Mode.OUTPUT, "float16", (-1, 1000), None),
    }
)
FIXED = FakeEngine(
    {
        "x": (Mode.INPUT, "int32", (4, 16), None),
        "y": (Mode.OUTPUT, "int32", (4, 16), None),
    }
)


def _config(text: str = "") -> mc.ModelConfig:
    return text_format.Parse(f'name: "m" {text}', mc.ModelConfig())


def test_an_engine_with_a_dynamic_first_dimension_batches_up_to_its_profile() -> None:
    io = read_engine_io(RESNET, TRT)
    assert [t.name for t in io.inputs] == ["images"] and [t.name for t in io.outputs] == ["logits"]
    assert io.max_batch_size() == 32
    config = _config()
    complete_config(config, io, "m/config.pbtxt")
    assert config.max_batch_size == 32 and config.HasField("dynamic_batching")
    assert (config.input[0].data_type, list(config.input[0].dims)) == (mc.TYPE_FP32, [3, 224, 224])
    assert (config.output[0].data_type, list(config.output[0].dims)) == (mc.TYPE_FP16, [1000])


def test_a_fixed_shape_engine_does_not_batch() -> None:
    io = read_engine_io(FIXED, TRT)
    assert io.max_batch_size() == 0
    config = _config()
    complete_config(config, io, "m/config.pbtxt")
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert list(config.input[0].dims) == [4, 16] and config.input[0].data_type == mc.TYPE_INT32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_batch_size: 64", "max_batch_size 64 exceeds what the engine allows (32"),
        (
            'max_batch_size: 8 input [{ name: "pixels" data_type: TYPE_FP32 dims: [3, 224, 224] }]',
            "input 'pixels' is not an input of the engine (engine inputs: ['images'])",
        ),
        (
            'max_batch_size: 8 input [{ name: "images" data_type: TYPE_FP16 dims: [3, 224, 224] }]',
            "input 'images' has data_type TYPE_FP16 in the config but TYPE_FP32 in the engine",
        ),
        (
            'max_batch_size: 8 output [{ name: "logits" data_type: TYPE_FP16 dims: [10] }]',
            "output 'logits' has dims [10] in the config but [1000] in the engine",
        ),
    ],
)
def test_a_config_that_contradicts_the_engine_is_refused_naming_it(text: str, message: str) -> None:
    with pytest.raises(ServeError) as info:
        complete_config(_config(text), read_engine_io(RESNET, TRT), "m/config.pbtxt")
    assert message in info.value.message and "m/config.pbtxt" in info.value.message


def test_shapes_outside_the_profile_are_refused_naming_the_input() -> None:
    io: EngineIO = read_engine_io(RESNET, TRT)
    io.check_shapes({"images": (8, 3, 224, 224)}, "m")
    with pytest.raises(ServeError, match=r"input 'images' has shape \[64, 3, 224, 224\]"):
        io.check_shapes({"images": (64, 3, 224, 224)}, "m")
    with pytest.raises(
        ServeError, match=r"profile \[\[1, 3, 224, 224\] \.\. \[32, 3, 224, 224\]\]"
    ):
        io.check_shapes({"images": (2, 3, 112, 112)}, "m")


def _plan_model(tmp_path: Path) -> Path:
    path = tmp_path / "m" / "1" / "model.plan"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not read without a GPU")
    return path


def test_without_a_gpu_an_undeclared_engine_is_refused_saying_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    no_gpu = ServingPlatform(2, (), ("CPUExecutionProvider",), ("onnxruntime",), None)
    monkeypatch.setattr(tensorrt_backend, "detect_platform", lambda: no_gpu)
    path = _plan_model(tmp_path)
    backend = get_backend("tensorrt")
    with pytest.raises(ServeError) as info:
        backend.autocomplete(_config('platform: "tensorrt_plan"'), path)
    assert "read only on a GPU with TensorRT (no GPU is visible)" in info.value.message
    declared = _config(
        'platform: "tensorrt_plan" input [{ name: "x" data_type: TYPE_INT32 dims: [4] }]'
        ' output [{ name: "y" data_type: TYPE_INT32 dims: [4] }]'
    )
    backend.autocomplete(declared, path)  # taken as declared
    assert declared.backend == "tensorrt"


def test_an_instance_on_the_cpu_is_refused(tmp_path: Path) -> None:
    path = _plan_model(tmp_path)
    context = InstanceContext(
        "m", 1, tmp_path, tmp_path / "m", path, _config(), "m_0", 0, kind="KIND_CPU"
    )
    with pytest.raises(ServeError, match="the tensorrt backend runs on GPUs only"):
        TensorRTInstance(context).load()
