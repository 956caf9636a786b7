"""scripts/build_model_repository.py: configs parse, built ONNX models compute what they claim."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_model_repository.py"
REPOSITORY = ROOT / "model_repository"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_model_repository", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repository = tmp_path_factory.mktemp("repository")
    _load_script().main(["--repository", str(repository), "--models", "simple,resnet18"])
    return repository


def _parse_config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _session(path: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_built_configs_parse(built: Path) -> None:
    simple = _parse_config(built / "simple" / "config.pbtxt")
    assert simple.name == "simple" and simple.max_batch_size == 8
    resnet = _parse_config(built / "resnet18" / "config.pbtxt")
    assert resnet.max_batch_size == 16
    assert resnet.parameters["intra_op_thread_count"].string_value == "2"


@pytest.mark.parametrize("model", ["digits", "simple", "resnet18", "add_sub_py"])
def test_committed_configs_parse(model: str) -> None:
    config = _parse_config(REPOSITORY / model / "config.pbtxt")
    assert config.name == model
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"
    assert [g.kind for g in config.instance_group] == [model_config_pb2.ModelInstanceGroup.KIND_CPU]


def test_simple_adds_and_subtracts(built: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(-1000, 1000, (3, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (3, 16), dtype=np.int32)
    out0, out1 = _session(built / "simple" / "1" / "model.onnx").run(
        ["OUTPUT0", "OUTPUT1"], {"INPUT0": a, "INPUT1": b}
    )
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


def test_resnet18_runs(built: Path) -> None:
    x = np.random.default_rng(1).standard_normal((2, 3, 224, 224), dtype=np.float32)
    (logits,) = _session(built / "resnet18" / "1" / "model.onnx").run(["logits"], {"input": x})
    assert logits.shape == (2, 1000)
    assert np.isfinite(logits).all()
    assert logits.std() > 0.1
    assert not np.allclose(logits[0], logits[1])


def test_build_skips_existing_files(built: Path) -> None:
    assert _load_script().build_repository(built, ["simple", "resnet18"]) == []


def test_committed_digits_accuracy() -> None:
    model_dir = REPOSITORY / "digits"
    data = json.loads((model_dir / "validation.json").read_text())["data"]
    labels = np.array(json.loads((model_dir / "validation_labels.json").read_text()))
    assert len(data) == len(labels) > 0
    x = np.stack(
        [np.asarray(d["input"]["content"], np.float32).reshape(d["input"]["shape"]) for d in data]
    )
    (logits,) = _session(model_dir / "1" / "model.onnx").run(["logits"], {"input": x})
    assert (logits.argmax(axis=1) == labels).mean() >= 0.97
