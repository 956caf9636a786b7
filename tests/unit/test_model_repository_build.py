"""scripts/build_model_repository.py: configs parse, built ONNX models compute what they claim."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from serve.config.model_config import read_config_file
from serve.config.validate import validate_config
from tests.conftest import (
    BUNDLED_REPOSITORY,
    SOURCE_REPOSITORY,
    committed_config,
    sync_committed,
)
from tuner.writeback import write_back

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_model_repository.py"
REPOSITORY = BUNDLED_REPOSITORY  # as committed: tuning rewrites SOURCE_REPOSITORY's configs


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


def test_built_configs_are_the_repository_s_and_parse(built: Path) -> None:
    for model in ("simple", "resnet18"):
        # Into another repository the script copies the configs of the project's own one
        # (whatever a tuning run left there): compare with those, not with fixed values.
        written = (built / model / "config.pbtxt").read_bytes()
        assert written == (SOURCE_REPOSITORY / model / "config.pbtxt").read_bytes()
        assert _parse_config(built / model / "config.pbtxt").name == model


def test_committed_configs_hold_what_the_docs_say() -> None:
    simple = _parse_config(REPOSITORY / "simple" / "config.pbtxt")
    assert simple.max_batch_size == 8
    resnet = _parse_config(REPOSITORY / "resnet18" / "config.pbtxt")
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


def test_resnet18_weights_do_not_depend_on_the_order_of_sums(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another machine's BLAS adds in another order; the calibrated weights must not see it
    # (a tuning study and the benchmarks' cached grid are keyed to the model file's hash).
    script = _load_script()
    plain = script._conv2d

    def input_channels_in_two_halves(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
        half = max(1, x.shape[1] // 2)
        return plain(x[:, :half], w[:, :half], stride) + plain(x[:, half:], w[:, half:], stride)

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 64, 8, 8)), rng.standard_normal((8, 64, 3, 3))
    assert not np.array_equal(plain(x, w, 1), input_channels_in_two_halves(x, w, 1))

    built = script.resnet18_onnx(calibration_batch=1).SerializeToString()
    monkeypatch.setattr(script, "_conv2d", input_channels_in_two_halves)
    assert script.resnet18_onnx(calibration_batch=1).SerializeToString() == built


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


def test_tests_read_the_committed_configs_even_after_a_tuning_run(tmp_path: Path) -> None:
    source = tmp_path / "model_repository"
    shutil.copytree(REPOSITORY / "digits", source / "digits")
    # What `autotune --latency-p95 50ms` leaves in the project's repository: a rewritten
    # config pointing at a precision variant, the old config kept beside it.
    tuned = read_config_file(source / "digits" / "config.pbtxt")
    tuned.max_batch_size = 4
    tuned.default_model_filename = "model.int8.onnx"
    write_back(source / "digits", tuned, [1], source / "digits" / "1" / "model.onnx")
    assert (source / "digits" / "config.pbtxt.bak").exists()

    sync_committed(source, tmp_path / "copy")
    copy = tmp_path / "copy" / "digits"
    assert (copy / "config.pbtxt").read_bytes() == committed_config("digits")
    assert not list(copy.glob("config.pbtxt.bak")) and not list(copy.glob("1/model.int8.onnx"))
    assert (copy / "1" / "model.onnx").read_bytes() == (
        REPOSITORY / "digits" / "1" / "model.onnx"
    ).read_bytes()


def test_the_tests_copy_is_not_the_project_s_repository() -> None:
    assert BUNDLED_REPOSITORY.resolve() != SOURCE_REPOSITORY.resolve()
    assert not list(BUNDLED_REPOSITORY.glob("*/config.pbtxt.bak"))


@pytest.mark.parametrize(
    ("model", "strategy"), [("accumulator", "direct"), ("stateful_sum", "oldest")]
)
def test_committed_stateful_configs_pass_validation(model: str, strategy: str) -> None:
    path = REPOSITORY / model / "config.pbtxt"
    config = _parse_config(path)
    validate_config(config, str(path), model)
    assert config.WhichOneof("scheduling_choice") == "sequence_batching"
    assert config.sequence_batching.WhichOneof("strategy_choice") == strategy


def test_stateful_sum_adds_its_state(tmp_path: Path) -> None:
    _load_script().main(["--repository", str(tmp_path), "--models", "accumulator,stateful_sum"])
    assert (tmp_path / "accumulator" / "1" / "model.py").is_file()
    session = _session(tmp_path / "stateful_sum" / "1" / "model.onnx")
    state = np.array([[1.5], [-2.0]], dtype=np.float32)
    value = np.array([[2.0], [4.0]], dtype=np.float32)
    output, state_out = session.run(["OUTPUT", "STATE_OUT"], {"INPUT": value, "STATE_IN": state})
    np.testing.assert_array_equal(output, state + value)
    np.testing.assert_array_equal(state_out, output)
