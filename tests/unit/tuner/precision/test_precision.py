"""tuner.precision: variants build and run, the cache, validation inputs, the accuracy guard."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from tritonclient.grpc import model_config_pb2 as mc

from serve.api import detect_platform
from serve.config.model_config import parse_config_text, read_config_file
from tests.conftest import BUNDLED_REPOSITORY
from tuner.candidate import PRECISION, Candidate, apply, config_precision
from tuner.precision import (
    AccuracyCheck,
    GraphSummary,
    Int8Method,
    Metric,
    OutputSpec,
    PrecisionError,
    PrecisionVariant,
    VariantCache,
    VariantKey,
    choose_int8_method,
    choose_metric,
    load_validation_inputs,
    model_sha256,
    prepare_variants,
    summarize,
    tensorrt_available,
)
from tuner.precision.accuracy import judge
from tuner.precision.metrics import cosine_similarity, max_relative_error, top1_agreement
from tuner.precision.tensorrt_calibration import (
    TABLE_METHOD,
    build_calibration_table,
    read_table,
    tensor_ranges,
)
from tuner.precision.validation import RANDOM_VARIABLE_DIM, ValidationSet

REPOSITORY = BUNDLED_REPOSITORY
DIGITS = REPOSITORY / "digits"
DIGITS_SAMPLES = 360  # every entry of digits/validation.json


def _config(model_dir: Path) -> mc.ModelConfig:
    return read_config_file(model_dir / "config.pbtxt")


def _run(path: Path, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def _by_precision(variants: list[PrecisionVariant]) -> dict[str, PrecisionVariant]:
    return {v.precision: v for v in variants}


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("variants")


@pytest.fixture(scope="module")
def digits(cache_dir: Path) -> dict[str, PrecisionVariant]:
    variants = prepare_variants(
        DIGITS,
        _config(DIGITS),
        DIGITS / "1" / "model.onnx",
        ["fp32", "int8", "fp16"],
        0.03,
        None,
        cache_dir,
        count=DIGITS_SAMPLES,
    )
    assert [v.precision for v in variants] == ["fp32", "int8", "fp16"]
    return _by_precision(variants)


# -- variants of digits (static int8, fp16) ---------------------------------------------------


def test_fp32_is_the_source_file(digits: dict[str, PrecisionVariant]) -> None:
    fp32 = digits["fp32"]
    assert fp32.model_path == DIGITS / "1" / "model.onnx"
    assert fp32.accuracy is None and fp32.error is None and fp32.usable


def test_digits_variants_build_and_run(digits: dict[str, PrecisionVariant]) -> None:
    x = np.random.default_rng(0).random((5, 1, 8, 8), dtype=np.float32)
    for precision in ("int8", "fp16"):
        variant = digits[precision]
        assert variant.error is None, variant.error
        assert variant.model_path is not None and variant.model_path.is_file()
        (logits,) = _run(variant.model_path, {"input": x})
        assert logits.shape == (5, 10) and logits.dtype == np.float32
    int8_ops = {n.op_type for n in onnx.load(str(digits["int8"].model_path)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= int8_ops
    fp16 = onnx.load(str(digits["fp16"].model_path)).graph
    assert any(t.data_type == TensorProto.FLOAT16 for t in fp16.initializer)
    assert fp16.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    assert fp16.output[0].type.tensor_type.elem_type == TensorProto.FLOAT


def test_digits_int8_keeps_top1_on_the_example_data(digits: dict[str, PrecisionVariant]) -> None:
    check = digits["int8"].accuracy
    assert check is not None
    assert check.metric == Metric.TOP1.value and check.output == "logits"
    assert check.value >= 0.97
    assert check.drop == pytest.approx(1.0 - check.value)
    assert check.passed and check.limit == 0.03 and digits["int8"].usable
    assert check.samples == DIGITS_SAMPLES
    assert "validation.json" in check.source and "example data" in check.source
    assert "top-1 agreement" in check.reason and "limit 0.03" in check.reason


def test_fp16_matches_fp32(digits: dict[str, PrecisionVariant]) -> None:
    check = digits["fp16"].accuracy
    assert check is not None and check.passed and check.value >= 0.99


def test_a_variant_beyond_the_limit_fails_and_says_why(cache_dir: Path) -> None:
    variants = prepare_variants(
        DIGITS,
        _config(DIGITS),
        DIGITS / "1" / "model.onnx",
        ["int8"],
        -1.0,
        None,
        cache_dir,
        count=64,
    )
    (int8,) = variants
    assert int8.accuracy is not None and int8.error is None
    assert int8.accuracy.passed is False and not int8.usable
    assert int8.accuracy.passed == (int8.accuracy.drop <= int8.accuracy.limit)
    assert "< 2.0000" in int8.accuracy.reason and "> limit -1.0000" in int8.accuracy.reason
    assert "excluded" in int8.verdict


def test_cache_returns_the_same_file_without_rebuilding(
    digits: dict[str, PrecisionVariant], cache_dir: Path
) -> None:
    first = digits["int8"]
    assert first.model_path is not None
    mtime = first.model_path.stat().st_mtime_ns
    again = _by_precision(
        prepare_variants(
            DIGITS,
            _config(DIGITS),
            DIGITS / "1" / "model.onnx",
            ["int8", "fp16"],
            0.03,
            None,
            cache_dir,
            count=DIGITS_SAMPLES,
        )
    )
    assert again["int8"].model_path == first.model_path
    assert again["int8"].cached and again["int8"].build_seconds == 0.0
    assert again["fp16"].model_path == digits["fp16"].model_path and again["fp16"].cached
    assert first.model_path.stat().st_mtime_ns == mtime
    sidecar = json.loads(first.model_path.with_suffix(".json").read_text())
    assert sidecar["precision"] == "int8" and sidecar["calibration_sha256"]


# -- the cache ---------------------------------------------------------------------------------


def _key(
    source: str = "a" * 64, precision: str = "int8", calibration: str | None = "c"
) -> VariantKey:
    return VariantKey(source, precision, "method", calibration)


def test_cache_builds_once(tmp_path: Path) -> None:
    cache = VariantCache(tmp_path)
    builds: list[Path] = []

    def build(target: Path) -> None:
        builds.append(target)
        target.write_bytes(b"model")

    first = cache.get_or_build(_key(), build)
    second = cache.get_or_build(_key(), build)
    assert len(builds) == 1 and not first.cached and second.cached
    assert first.path == second.path and first.path.read_bytes() == b"model"
    assert first.path.parent.name == "a" * 64 and first.path.name.startswith("int8-")


def test_cache_keys_differ_by_source_precision_and_calibration() -> None:
    cache = VariantCache(Path("/cache"))
    paths = {
        cache.path_for(_key()),
        cache.path_for(_key(source="b" * 64)),
        cache.path_for(_key(precision="fp16")),
        cache.path_for(_key(calibration="other")),
        cache.path_for(_key(calibration=None)),
    }
    assert len(paths) == 5


def test_a_changed_source_model_gets_its_own_variant(tmp_path: Path) -> None:
    original = DIGITS / "1" / "model.onnx"
    changed = tmp_path / "model.onnx"
    model = onnx.load(str(original))
    model.doc_string = "retrained"
    onnx.save(model, str(changed))
    assert model_sha256(changed) != model_sha256(original)
    assert model_sha256(original) == model_sha256(original)


def test_a_failed_build_leaves_nothing_behind(tmp_path: Path) -> None:
    cache = VariantCache(tmp_path)

    def build(target: Path) -> None:
        target.write_bytes(b"half a mod")
        raise RuntimeError("quantizer crashed")

    with pytest.raises(RuntimeError):
        cache.get_or_build(_key(), build)
    folder = cache.path_for(_key()).parent
    assert not cache.path_for(_key()).exists()
    assert not [p for p in folder.iterdir() if p.suffix != ".lock"]


def test_concurrent_builders_build_once_and_never_see_a_partial_file(tmp_path: Path) -> None:
    cache = VariantCache(tmp_path)
    final = cache.path_for(_key())
    builds: list[int] = []
    seen: list[bytes] = []

    def build(target: Path) -> None:
        builds.append(1)
        with target.open("wb") as handle:
            handle.write(b"x" * 1000)
            handle.flush()
            time.sleep(0.2)  # a reader looking now must not find the final file
            seen.append(final.read_bytes() if final.exists() else b"")
            handle.write(b"y" * 1000)

    results = []
    threads = [
        threading.Thread(target=lambda: results.append(cache.get_or_build(_key(), build)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1 and seen == [b""]
    assert {r.path for r in results} == {final}
    assert final.read_bytes() == b"x" * 1000 + b"y" * 1000


# -- dynamic int8 for a MatMul-only model ------------------------------------------------------


def _matmul_model(directory: Path) -> tuple[Path, mc.ModelConfig]:
    rng = np.random.default_rng(3)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32) / 8, "w2")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w2"], ["embedding"]),
        ],
        "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 32])],
        [w1, w2],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (directory / "1").mkdir(parents=True)
    path = directory / "1" / "model.onnx"
    onnx.save(model, str(path))
    config = parse_config_text(
        """
name: "encoder"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 32 ] } ]
""",
        "encoder config",
    )
    return path, config


def test_matmul_model_gets_dynamic_int8_checked_by_cosine(tmp_path: Path) -> None:
    model_dir = tmp_path / "encoder"
    path, config = _matmul_model(model_dir)
    assert choose_int8_method(summarize(onnx.load(str(path)))) is Int8Method.DYNAMIC
    _, int8, fp16 = prepare_variants(
        model_dir, config, path, ["fp32", "int8", "fp16"], 0.05, None, tmp_path / "cache", count=32
    )
    assert fp16.error is None and fp16.accuracy is not None and fp16.accuracy.value > 0.999
    assert int8.error is None, int8.error
    assert int8.model_path is not None and "dynamic" in int8.method
    ops = {n.op_type for n in onnx.load(str(int8.model_path)).graph.node}
    assert "DynamicQuantizeLinear" in ops or "MatMulInteger" in ops
    x = np.random.default_rng(0).random((3, 64), dtype=np.float32)
    (out,) = _run(int8.model_path, {"x": x})
    assert out.shape == (3, 32)
    check = int8.accuracy
    assert check is not None and check.metric == Metric.COSINE.value
    assert check.passed and check.value > 0.99
    assert "random inputs" in check.source
    key = json.loads(int8.model_path.with_suffix(".json").read_text())
    assert key["calibration_sha256"] is None  # dynamic: new validation data does not rebuild


# -- op-type rule and models without variants --------------------------------------------------


def _summary_of(*ops: str) -> GraphSummary:
    nodes = [helper.make_node(op, [], []) for op in ops]
    graph = helper.make_graph(nodes, "g", [], [])
    return summarize(helper.make_model(graph))


@pytest.mark.parametrize(
    ("ops", "method"),
    [
        (("Conv", "Relu", "Gemm"), Int8Method.STATIC),
        (("Conv", "MatMul", "Softmax"), Int8Method.STATIC),
        (("MatMul", "Softmax", "LayerNormalization"), Int8Method.DYNAMIC),
        (("Attention",), Int8Method.DYNAMIC),
        (("Gemm", "Relu", "Gemm"), Int8Method.STATIC),
    ],
)
def test_int8_method_follows_the_op_types(ops: tuple[str, ...], method: Int8Method) -> None:
    assert choose_int8_method(_summary_of(*ops)) is method


def test_integer_only_model_has_no_reduced_variants(tmp_path: Path) -> None:
    simple = REPOSITORY / "simple"
    variants = _by_precision(
        prepare_variants(
            simple,
            _config(simple),
            simple / "1" / "model.onnx",
            ["fp32", "int8", "fp16"],
            0.01,
            None,
            tmp_path,
            count=4,
        )
    )
    assert variants["fp32"].usable
    assert variants["int8"].error is not None and "nothing to speed up" in variants["int8"].error
    assert variants["fp16"].error is not None and "floating-point" in variants["fp16"].error
    assert not variants["int8"].usable and not variants["fp16"].usable


def test_python_backend_model_is_fp32_only(tmp_path: Path) -> None:
    model_dir = REPOSITORY / "add_sub_py"
    variants = prepare_variants(
        model_dir,
        _config(model_dir),
        model_dir / "1" / "model.py",
        ["fp32", "int8"],
        0.01,
        None,
        tmp_path,
    )
    fp32, int8 = variants
    assert fp32.usable and fp32.model_path == model_dir / "1" / "model.py"
    assert int8.error is not None and "ONNX" in int8.error and "python" in int8.error


def test_when_fp32_cannot_run_the_inputs_only_fp32_is_offered(tmp_path: Path) -> None:
    config = _config(DIGITS)
    config.input[0].dims[:] = [2, 8, 8]  # the graph takes [1, 8, 8]
    fp32, int8 = prepare_variants(
        tmp_path, config, DIGITS / "1" / "model.onnx", ["fp32", "int8"], 0.01, None, tmp_path,
        count=4,
    )  # fmt: skip
    assert fp32.usable
    assert int8.error is not None and "no accuracy check is possible" in int8.error
    assert "model.onnx does not run" in int8.error


def test_unknown_precision_is_refused(tmp_path: Path) -> None:
    with pytest.raises(PrecisionError, match="unknown precision 'int4'"):
        prepare_variants(
            DIGITS, _config(DIGITS), DIGITS / "1" / "model.onnx", ["int4"], 0.01, None, tmp_path
        )


# -- validation inputs -------------------------------------------------------------------------


def test_example_data_is_used_when_no_file_is_given() -> None:
    validation = load_validation_inputs(DIGITS, _config(DIGITS), None, 10)
    assert validation.kind == "example" and len(validation) == 10 and validation.batched
    assert validation.samples[0]["input"].shape == (1, 8, 8)
    assert [f["input"].shape for f in validation.feeds(4)] == [(4, 1, 8, 8)] * 2 + [(2, 1, 8, 8)]


def test_a_given_file_wins_over_the_example_data(tmp_path: Path) -> None:
    data = {"data": [{"input": {"content": [0.5] * 64, "shape": [1, 8, 8]}}] * 3}
    file = tmp_path / "mine.json"
    file.write_text(json.dumps(data))
    validation = load_validation_inputs(DIGITS, _config(DIGITS), file, 100)
    assert validation.kind == "file" and len(validation) == 3
    assert str(file) in validation.source
    np.testing.assert_array_equal(validation.samples[0]["input"], np.full((1, 8, 8), 0.5))


def test_bad_validation_files_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    with pytest.raises(PrecisionError, match=r"missing\.json"):
        load_validation_inputs(DIGITS, _config(DIGITS), missing, 10)
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"data": [{"input": [1.0, 2.0]}]}))
    with pytest.raises(PrecisionError, match=r"wrong\.json"):
        load_validation_inputs(DIGITS, _config(DIGITS), wrong, 10)


def test_random_fallback_reports_its_source_and_follows_the_datatypes(tmp_path: Path) -> None:
    config = parse_config_text(
        """
name: "m"
max_batch_size: 4
input [ { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] },
        { name: "mask" data_type: TYPE_BOOL dims: [ 3 ] },
        { name: "x" data_type: TYPE_FP16 dims: [ 2, 2 ] } ]
""",
        "m",
    )
    first = load_validation_inputs(tmp_path, config, None, 5, seed=7)
    again = load_validation_inputs(tmp_path, config, None, 3, seed=7)
    assert first.kind == "random" and "random inputs" in first.source
    assert "validation.json does not exist" in first.source
    sample = first.samples[0]
    assert sample["ids"].dtype == np.int64 and sample["ids"].shape == (RANDOM_VARIABLE_DIM,)
    assert sample["ids"].min() >= 0 and sample["ids"].max() < 100
    assert sample["mask"].dtype == np.bool_ and sample["x"].dtype == np.float16
    for a, b in zip(first.samples[:3], again.samples, strict=True):
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    assert first.head(3).digest() == again.digest()


def test_random_inputs_cannot_stand_in_for_strings(tmp_path: Path) -> None:
    config = parse_config_text(
        'name: "t" input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]', "t"
    )
    with pytest.raises(PrecisionError, match=r"'text'.*--validation-data"):
        load_validation_inputs(tmp_path, config, None, 2)


# -- metric choice and the verdict -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "batched", "metric"),
    [
        (OutputSpec("logits", True, (10,)), True, Metric.TOP1),
        (OutputSpec("probabilities", True, (1, 1000)), True, Metric.TOP1),
        (OutputSpec("output", True, (4, 10)), False, Metric.TOP1),
        (OutputSpec("sentence_embedding", True, (384,)), True, Metric.COSINE),
        (OutputSpec("last_hidden_state", True, (128, 384)), True, Metric.COSINE),
        (OutputSpec("out", True, (64, 7, 7)), True, Metric.COSINE),
        (OutputSpec("price", True, (1,)), True, Metric.MAX_RELATIVE_ERROR),
        (OutputSpec("label", False, (10,)), True, Metric.MAX_RELATIVE_ERROR),
        (OutputSpec("OUTPUT0", False, (16,)), True, Metric.MAX_RELATIVE_ERROR),
    ],
)
def test_metric_follows_the_output(spec: OutputSpec, batched: bool, metric: Metric) -> None:
    assert choose_metric(spec, batched) is metric


def test_a_classifier_that_always_predicts_one_class_is_checked_by_cosine() -> None:
    spec = OutputSpec("logits", True, (3,))
    constant = np.array([[0.0, 5.0, 1.0], [0.2, 4.0, 1.0]], np.float32)
    varied = np.array([[0.0, 5.0, 1.0], [6.0, 4.0, 1.0]], np.float32)
    assert choose_metric(spec, True, constant) is Metric.COSINE
    assert choose_metric(spec, True, varied) is Metric.TOP1


def test_metric_values() -> None:
    ref = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    assert top1_agreement(ref, ref[[0, 1, 2, 2]], 2).value == 0.75
    assert top1_agreement(ref, ref[[0, 1, 2, 2]], 2).drop == 0.25
    cos = cosine_similarity(ref, np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [0.0, 1.0]]))
    assert cos.value == pytest.approx((3 + math.sqrt(0.5)) / 4)
    assert cos.drop == pytest.approx(1 - cos.value)
    rel = max_relative_error(np.array([10.0, -20.0, 0.0]), np.array([11.0, -20.0, 0.1]))
    assert rel.value == pytest.approx(0.5)  # 0.1 against the floor 1% of 20
    assert rel.drop == rel.value


def _verdict(reference: np.ndarray, candidate: np.ndarray, limit: float) -> AccuracyCheck:
    validation = ValidationSet([{}] * len(reference), True, "random", "random inputs")
    spec = OutputSpec("scores", True, (reference.shape[1],))
    return judge("int8", [spec], {"scores": reference}, {"scores": candidate}, validation, limit)


def test_verdict_passes_when_the_drop_is_within_the_limit() -> None:
    reference = np.eye(4, dtype=np.float32)
    candidate = reference.copy()
    candidate[3] = [0, 0, 1, 0]  # one of four rows disagrees
    fail = _verdict(reference, candidate, 0.1)
    ok = _verdict(reference, candidate, 0.25)
    for check in (fail, ok):
        assert check.passed == (check.drop <= check.limit)
    assert not fail.passed and ok.passed
    assert fail.reason == (
        "output 'scores': top-1 agreement 0.7500 < 0.9000 (drop 0.2500 > limit 0.1000); 4 samples"
    )


def test_non_finite_values_fail_the_guard() -> None:
    reference = np.eye(3, dtype=np.float32)
    candidate = reference.copy()
    candidate[1, 1] = np.nan
    check = _verdict(reference, candidate, 0.5)
    assert not check.passed and math.isinf(check.drop)
    assert "non-finite" in check.reason


# -- TensorRT through the config ---------------------------------------------------------------


def test_tensorrt_precision_is_a_config_change_keeping_the_entry_s_other_parameters() -> None:
    config = parse_config_text(
        """
name: "m"
optimization { execution_accelerators { gpu_execution_accelerator [
  { name: "tensorrt" parameters { key: "max_workspace_size_bytes" value: "1073741824" } } ] } }
""",
        "m",
    )
    int8 = apply(Candidate({PRECISION: "trt_int8"}), config)
    (entry,) = int8.optimization.execution_accelerators.gpu_execution_accelerator
    assert dict(entry.parameters) == {
        "max_workspace_size_bytes": "1073741824",
        "precision_mode": "INT8",
        "int8_calibration_table_name": "calibration.flatbuffers",
        "trt_engine_cache_path": "tensorrt",
    }
    assert "precision_mode" not in (
        config.optimization.execution_accelerators.gpu_execution_accelerator[0].parameters
    )
    fp16 = apply(Candidate({PRECISION: "trt_fp16"}), int8)
    (entry,) = fp16.optimization.execution_accelerators.gpu_execution_accelerator
    assert entry.parameters["precision_mode"] == "FP16"
    assert "int8_calibration_table_name" not in entry.parameters
    fresh = apply(Candidate({PRECISION: "trt_fp16"}), mc.ModelConfig(name="n"))
    (added,) = fresh.optimization.execution_accelerators.gpu_execution_accelerator
    assert added.name == "tensorrt" and dict(added.parameters) == {"precision_mode": "FP16"}
    back = apply(Candidate({PRECISION: "fp32"}), int8)
    assert not back.optimization.execution_accelerators.gpu_execution_accelerator
    assert config_precision(int8) == "trt_int8" and config_precision(back) == "fp32"


def test_a_tensorrt_int8_table_holds_each_tensor_s_largest_magnitude(tmp_path: Path) -> None:
    # y = x - 10: its output only takes negative values; TensorRT's INT8 is symmetric.
    graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "ten"], ["y"])],
        "shift",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor("ten", TensorProto.FLOAT, [], [10.0])],
    )
    model = tmp_path / "shift.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    feeds = [{"x": np.array([[0.0, 1.0, 2.0]], np.float32)}, {"x": np.full((1, 3), 3, np.float32)}]
    ranges = tensor_ranges(model, feeds)
    assert ranges["x"] == pytest.approx(3.0) and ranges["y"] == pytest.approx(10.0)
    table = tmp_path / "calibration.flatbuffers"
    build_calibration_table(model, table, feeds)
    assert read_table(table) == ranges
    with pytest.raises(PrecisionError, match="needs inputs"):
        tensor_ranges(model, [])


def test_the_digits_table_is_cached_by_model_and_calibration_inputs(tmp_path: Path) -> None:
    source = DIGITS / "1" / "model.onnx"
    feeds = [{"input": np.random.default_rng(i).random((1, 1, 8, 8), np.float32)} for i in range(4)]
    cache = VariantCache(tmp_path)
    key = VariantKey(model_sha256(source), "trt_int8", TABLE_METHOD, "calibration-digest")
    built = cache.get_or_build(
        key, lambda target: build_calibration_table(source, target, feeds), ".flatbuffers"
    )
    assert built.path.suffix == ".flatbuffers" and not built.cached
    ranges = read_table(built.path)
    assert "input" in ranges and all(v >= 0 for v in ranges.values()) and len(ranges) > 3
    again = cache.get_or_build(key, lambda _t: pytest.fail("built twice"), ".flatbuffers")
    assert again.cached and again.path == built.path
    variant = PrecisionVariant("trt_int8", source, None, 0.0, calibration_table=built.path)
    assert variant.model_folder_files() == {"tensorrt/calibration.flatbuffers": built.path}


def test_tensorrt_is_offered_only_when_onnxruntime_has_it(
    digits: dict[str, PrecisionVariant], cache_dir: Path
) -> None:
    here = detect_platform()
    assert tensorrt_available() == (
        bool(here.gpus) and "TensorrtExecutionProvider" in ort.get_available_providers()
    )
    (trt,) = prepare_variants(
        DIGITS, _config(DIGITS), DIGITS / "1" / "model.onnx", ["trt_int8"], 0.03, None, cache_dir
    )
    if tensorrt_available():
        assert trt.model_path == DIGITS / "1" / "model.onnx" and trt.accuracy is not None
    else:
        assert trt.error is not None and "TensorRT is not available" in trt.error


# -- resnet18 (generated by the session fixture that builds the bundled repository) ----------


def test_resnet18_int8_static_builds_and_passes(tmp_path: Path, bundled_repository: Path) -> None:
    model_dir = bundled_repository / "resnet18"
    source = model_dir / "1" / "model.onnx"
    (int8,) = prepare_variants(
        model_dir, _config(model_dir), source, ["int8"], 0.01, None, tmp_path, count=16
    )
    assert int8.error is None and int8.accuracy is not None, int8.error
    assert int8.accuracy.passed, int8.accuracy.reason
    assert "static" in int8.method
