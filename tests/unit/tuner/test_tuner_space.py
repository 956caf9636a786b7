"""Tuner search space: budget parsing, candidates applied to configs, valid spaces only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import onnx
import optuna
import pytest
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from common.gpu import GpuDevice
from serve.api import ServingPlatform, gpu_unavailable_reason, tensorrt_engines_missing
from serve.config.model_config import parse_config_text, read_config_file
from serve.config.validate import validate_config
from tests.conftest import BUNDLED_REPOSITORY
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate, apply, config_precision, diff, variant_filename
from tuner.duration import Duration
from tuner.model_batch import accepted_batch_size
from tuner.run import TuneOptions, model_space
from tuner.space import Platform, SpaceOptions, build_space, grid

REPOSITORY = BUNDLED_REPOSITORY
ALL_PRECISIONS = ("fp32", "fp16", "int8", "trt_fp16", "trt_int8", "plan_fp16", "plan_int8")
ORT_GPU = frozenset({"onnxruntime"})


def _config(model: str) -> mc.ModelConfig:
    return read_config_file(REPOSITORY / model / "config.pbtxt")


# -- budget -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("500us", 500.0),
        ("500µs", 500.0),
        ("10ms", 10_000.0),
        ("10 ms", 10_000.0),
        ("1.5s", 1_500_000.0),
        ("0.25ms", 250.0),
        (" 2MS ", 2_000.0),
    ],
)
def test_durations_parse_in_microseconds(text: str, micros: float) -> None:
    assert Duration.parse(text).us == pytest.approx(micros)


@pytest.mark.parametrize("text", ["10 parsecs", "ms", "-3ms", "0ms", "10", "", "1e3us", "nanms"])
def test_bad_durations_name_the_value_and_the_units(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        Duration.parse(text)
    assert f"'{text}'" in str(caught.value)
    assert "us" in str(caught.value) and "ms" in str(caught.value)


def test_budget_describes_itself_and_checks_the_percentile() -> None:
    assert LatencyBudget.parse(95, "10ms").describe() == "p95 <= 10 ms"
    assert LatencyBudget(99, Duration(1500)).describe() == "p99 <= 1.5 ms"
    assert LatencyBudget(90, Duration(250)).describe() == "p90 <= 250 us"
    with pytest.raises(ValueError, match="percentile"):
        LatencyBudget(50, Duration(1000))


# -- candidates ---------------------------------------------------------------------------------


def test_candidate_is_a_hashable_mapping_with_a_stable_key() -> None:
    values = {
        "precision": "int8",
        "max_batch_size": 16,
        "dynamic_batching": True,
        "max_queue_delay_microseconds": 500,
        "instance_count": 2,
        "intra_op_thread_count": 1,
        "preferred_batch_size": None,
    }
    candidate = Candidate(values)
    assert candidate.key == "mbs=16,db=on,pbs=none,delay=500,inst=2,thr=1,prec=int8"
    assert candidate == Candidate(reversed(list(values.items())))
    assert len({candidate, Candidate.from_json(candidate.to_json())}) == 1
    assert dict(candidate) == values
    with pytest.raises(ValueError, match="colour"):
        Candidate({"colour": "red"})


def test_apply_and_diff_read_as_a_report_would() -> None:
    base = _config("digits")
    candidate = Candidate(
        {
            "dynamic_batching": True,
            "max_batch_size": 16,
            "max_queue_delay_microseconds": 500,
            "preferred_batch_size": 8,
            "instance_count": 2,
            "instance_kind": "KIND_CPU",
            "intra_op_thread_count": 1,
            "precision": "int8",
        }
    )
    tuned = apply(candidate, base)
    assert base.max_batch_size == 64  # the base is not touched
    validate_config(tuned, "tuned", "digits")
    assert tuned.default_model_filename == "model.int8.onnx"
    assert diff(base, tuned) == [
        ("max_batch_size", "64", "16"),
        ("instance_group[0].count", "1", "2"),
        ("default_model_filename", "(unset)", "model.int8.onnx"),
        ("dynamic_batching.preferred_batch_size", "[]", "[8]"),
        ("dynamic_batching.max_queue_delay_microseconds", "0", "500"),
        ("precision", "fp32", "int8"),
    ]
    assert diff(base, apply(Candidate(), base)) == []


def test_unset_thread_count_and_batching_off_in_the_diff() -> None:
    base = _config("simple")
    tuned = apply(Candidate({"dynamic_batching": False, "intra_op_thread_count": 1}), base)
    assert not tuned.HasField("dynamic_batching")
    assert tuned.max_batch_size == base.max_batch_size
    assert diff(base, tuned) == [
        ("dynamic_batching", "on", "off"),
        ("parameters.intra_op_thread_count", "(unset)", "1"),
    ]


def test_tensorrt_precision_is_an_accelerator_block() -> None:
    base = _config("simple")
    candidate = Candidate(
        {"instance_count": 1, "instance_kind": "KIND_GPU", "precision": "trt_int8"}
    )
    assert candidate.key == "inst=1,kind=gpu,prec=trt_int8"
    tuned = apply(candidate, base)
    accelerator = tuned.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert (accelerator.name, dict(accelerator.parameters)) == (
        "tensorrt",
        {
            "precision_mode": "INT8",
            "int8_calibration_table_name": "calibration.flatbuffers",
            "trt_engine_cache_path": "tensorrt",
        },
    )
    assert tuned.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
    assert config_precision(tuned) == "trt_int8"
    back = apply(Candidate({"precision": "fp32"}), tuned)
    assert not back.optimization.execution_accelerators.gpu_execution_accelerator
    assert config_precision(back) == "fp32"


def test_variant_file_names() -> None:
    assert variant_filename("model.onnx", "int8") == "model.int8.onnx"
    assert variant_filename("model.int8.onnx", "fp16") == "model.fp16.onnx"
    assert variant_filename("model.int8.onnx", "fp32") == "model.onnx"
    assert variant_filename("model.onnx", "trt_fp16") == "model.onnx"
    assert variant_filename("model.onnx", "plan_fp16") == "model.fp16.plan"
    assert variant_filename("model.int8.onnx", "plan_int8") == "model.int8.plan"


def test_an_engine_precision_moves_the_model_to_the_tensorrt_backend() -> None:
    base = _config("resnet18")
    base.parameters["intra_op_thread_count"].string_value = "2"
    onnxruntime_trt = apply(Candidate({"precision": "trt_fp16"}), base)
    candidate = Candidate(
        {"instance_count": 2, "instance_kind": "KIND_GPU", "precision": "plan_int8"}
    )
    for start in (base, onnxruntime_trt):
        tuned = apply(candidate, start)
        assert (tuned.backend, tuned.platform) == ("tensorrt", "tensorrt_plan")
        assert tuned.default_model_filename == "model.int8.plan"
        # onnxruntime's own settings mean nothing to the tensorrt backend
        assert "intra_op_thread_count" not in tuned.parameters
        assert not tuned.optimization.HasField("execution_accelerators")
        assert tuned.instance_group[0].kind == mc.ModelInstanceGroup.KIND_GPU
        assert list(tuned.input) == list(base.input)
        assert config_precision(tuned) == "plan_int8"
        validate_config(tuned, "tuned", "resnet18")
    assert config_precision(apply(Candidate({"precision": "plan_fp16"}), base)) == "plan_fp16"
    diff_rows = {field: (old, new) for field, old, new in diff(base, tuned)}
    assert diff_rows["backend"][1] == "tensorrt"
    assert diff_rows["platform"] == (base.platform, "tensorrt_plan")


def test_warmup_batch_sizes_follow_a_smaller_max_batch_size() -> None:
    base = _config("digits")
    warmup = base.model_warmup.add(name="w", batch_size=64, count=1)
    warmup.inputs["input"].data_type = mc.TYPE_FP32
    warmup.inputs["input"].dims.extend([1, 8, 8])
    warmup.inputs["input"].zero_data = True
    candidate = Candidate({"dynamic_batching": True, "max_batch_size": 8})
    tuned = apply(candidate, base)
    assert tuned.model_warmup[0].batch_size == 8
    validate_config(tuned, "tuned", "digits")


# -- spaces -------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", ["digits", "resnet18", "simple", "add_sub_py"])
@pytest.mark.parametrize("cores", [1, 2, 6])
def test_every_grid_candidate_is_a_valid_config(model: str, cores: int) -> None:
    base = _config(model)
    space = build_space(base, Platform(cpu_count=cores), SpaceOptions(precisions=ALL_PRECISIONS))
    candidates = grid(space)
    assert len(candidates) == len(set(candidates)) == space.size
    assert candidates[0] == space.default_candidate()
    for candidate in candidates:
        config = apply(candidate, base)
        validate_config(config, f"{model}: {candidate.key}", model)
        assert config.max_batch_size > 0  # never crosses to 0
        group = config.instance_group[0]
        assert group.kind == mc.ModelInstanceGroup.KIND_CPU
        if "intra_op_thread_count" in candidate:
            threads = int(config.parameters["intra_op_thread_count"].string_value)
            assert threads * group.count <= cores
        if candidate["dynamic_batching"]:
            preferred = list(config.dynamic_batching.preferred_batch_size)
            assert all(size <= config.max_batch_size for size in preferred)
            if config.dynamic_batching.max_queue_delay_microseconds == 0:
                assert preferred == []
        else:
            assert set(candidate) == {"dynamic_batching", "instance_count", "instance_kind"} | (
                {"intra_op_thread_count", "precision"} & set(candidate)
            )
            assert config.max_batch_size == base.max_batch_size
        assert candidate.get("precision") in (None, "fp32", "fp16", "int8")  # no TensorRT here
        assert space.params_for(candidate)  # every grid point can be enqueued


def test_digits_space_on_two_cores() -> None:
    options = SpaceOptions(precisions=("fp32", "fp16", "int8"), latency_limit=Duration.from_ms(10))
    space = build_space(_config("digits"), Platform(cpu_count=2), options)
    assert space.instance_counts == (1, 2)
    assert space.thread_choices == {1: (1, 2), 2: (1,)}
    assert space.precisions == ("fp32", "fp16", "int8")
    assert space.batching is not None
    assert space.batching.max_batch_sizes == (2, 4, 8, 16, 32, 64)
    assert space.batching.delays_us == (0, 100, 500, 1000, 2000, 5000)
    assert space.batching.preferred(64) == (None, 16, 32)
    # per (instances, threads, precision): batching off + mbs 2: 6, 4: 11, 8..64: 4 x 16
    assert space.size == 3 * 3 * (1 + 6 + 11 + 4 * 16) == 738
    assert space.default_candidate().key == "mbs=64,db=on,pbs=none,delay=0,inst=1,thr=1,prec=fp32"


def _fixed_batch_model(path: Path, batch: int) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "fixed", [x], [y])
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_the_batch_a_model_accepts_comes_from_its_graph(tmp_path: Path) -> None:
    digits = REPOSITORY / "digits"
    assert accepted_batch_size(_config("digits"), digits / "1" / "model.onnx") is None  # dynamic
    fixed = _fixed_batch_model(tmp_path / "fixed.onnx", 24)
    assert accepted_batch_size(_config("digits"), fixed) == 24
    python = _config("add_sub_py")  # a python model says it in its config only
    assert accepted_batch_size(python, tmp_path / "none.py") == python.max_batch_size == 8


def test_max_batch_size_is_searched_up_to_what_the_model_accepts(tmp_path: Path) -> None:
    # A run wrote a smaller max_batch_size: the next run can still go back up.
    written = _config("digits")
    written.max_batch_size = 4
    model = REPOSITORY / "digits" / "1" / "model.onnx"
    options = TuneOptions(repository=REPOSITORY, budget=LatencyBudget(95, Duration.from_ms(10)))

    def sizes(options: TuneOptions, path: Path = model) -> tuple[int, ...]:
        space = model_space(options, written, path, Platform(cpu_count=2), ("fp32",))
        assert space.batching is not None
        return space.batching.max_batch_sizes

    assert sizes(options) == (2, 4, 8, 16, 32, 64, 128)
    assert sizes(replace(options, max_batch_size_cap=48)) == (2, 4, 8, 16, 32, 48)
    assert sizes(options, _fixed_batch_model(tmp_path / "fixed.onnx", 24)) == (2, 4, 8, 16, 24)
    narrowed = replace(options, space=SpaceOptions(max_batch_cap=8))
    assert sizes(narrowed) == (2, 4, 8)


def test_space_options_shrink_the_grid() -> None:
    options = SpaceOptions(precisions=("fp32",), latency_limit=Duration(800), tune_preferred=False)
    space = build_space(_config("digits"), Platform(cpu_count=2), options)
    assert space.batching is not None and space.batching.delays_us == (0, 100, 500)
    assert space.size == 3 * (1 + 6 * 3)


def test_priors_start_from_the_model_config_and_plain_batching() -> None:
    options = SpaceOptions(precisions=("fp32", "int8"))
    space = build_space(_config("resnet18"), Platform(cpu_count=2), options)
    assert [c.key for c in space.prior_candidates()] == [
        "mbs=16,db=on,pbs=none,delay=2000,inst=1,thr=2,prec=fp32",
        "mbs=16,db=on,pbs=none,delay=0,inst=1,thr=2,prec=fp32",
        "mbs=16,db=on,pbs=none,delay=0,inst=1,thr=2,prec=int8",
        # every split of the 2 cores, batching on at the largest size, each precision
        "mbs=16,db=on,pbs=none,delay=0,inst=2,thr=1,prec=fp32",
        "mbs=16,db=on,pbs=none,delay=0,inst=2,thr=1,prec=int8",
    ]
    assert all(c in space for c in space.prior_candidates())


def test_priors_split_every_core_at_the_largest_batch_in_each_precision() -> None:
    options = SpaceOptions(precisions=("fp32", "int8"), max_batch_cap=128)
    space = build_space(_config("digits"), Platform(cpu_count=4), options)
    informed = [c.key for c in space.prior_candidates() if c["max_batch_size"] == 128]
    assert informed == [
        f"mbs=128,db=on,pbs=none,delay=0,inst={inst},thr={thr},prec={prec}"
        for prec in ("fp32", "int8")
        for inst, thr in ((1, 4), (2, 2), (3, 1), (4, 1))
    ]


def test_model_values_outside_the_space_are_snapped() -> None:
    base = parse_config_text(
        """
        name: "m" platform: "onnxruntime_onnx" max_batch_size: 48
        input [{ name: "x" data_type: TYPE_FP32 dims: [4] }]
        output [{ name: "y" data_type: TYPE_FP32 dims: [4] }]
        dynamic_batching { preferred_batch_size: [8, 24] max_queue_delay_microseconds: 50000 }
        instance_group [{ count: 8 kind: KIND_CPU }]
        parameters { key: "intra_op_thread_count" value { string_value: "4" } }
        """,
        "m",
    )
    space = build_space(
        base, Platform(cpu_count=4), SpaceOptions(latency_limit=Duration.from_ms(10))
    )
    assert space.batching is not None and 48 in space.batching.max_batch_sizes
    assert 24 in space.batching.preferred(48)
    default = space.default_candidate()
    assert default.key == "mbs=48,db=on,pbs=24,delay=5000,inst=4,thr=1,prec=fp32"
    validate_config(apply(default, base), "m", "m")
    # ...for the search's start only: the config as written is no point of this space
    assert space.as_written() == Candidate() and apply(Candidate(), base) == base


@pytest.mark.parametrize(
    "written",
    [
        "dynamic_batching { max_queue_delay_microseconds: 40000 }",  # beyond the delays tried
        "dynamic_batching { preferred_batch_size: [4, 8] }",  # two preferred sizes
        "dynamic_batching { }",  # no thread count: onnxruntime takes every core
        "instance_group [{ count: 3 kind: KIND_CPU }]",  # more instances than cores
    ],
)
def test_a_config_outside_the_space_is_written_as_the_empty_candidate(written: str) -> None:
    base = parse_config_text(
        f"""
        name: "m" platform: "onnxruntime_onnx" max_batch_size: 8
        input [{{ name: "x" data_type: TYPE_FP32 dims: [4] }}]
        output [{{ name: "y" data_type: TYPE_FP32 dims: [4] }}]
        {written}
        """,
        "m",
    )
    if "intra_op" not in written and "dynamic_batching { }" not in written:
        base.parameters["intra_op_thread_count"].string_value = "1"
    space = build_space(
        base, Platform(cpu_count=2), SpaceOptions(latency_limit=Duration.from_ms(20))
    )
    assert space.as_written() == Candidate()
    assert space.default_candidate() in space  # the search still starts near it


def test_a_config_inside_the_space_is_written_as_its_point() -> None:
    for model in ("digits", "resnet18"):
        base = _config(model)
        space = build_space(base, Platform(cpu_count=2), SpaceOptions(precisions=("fp32",)))
        written = space.as_written()
        assert written in space and written == space.default_candidate()
        assert apply(written, base) == base
    simple = build_space(_config("simple"), Platform(cpu_count=2))
    assert simple.as_written() == Candidate()  # its thread count is unset: it stays unset


@pytest.mark.parametrize("model", ["digits", "resnet18"])
def test_every_point_is_found_again_from_its_config(model: str) -> None:
    # How benchmarks/tuner_quality.py looks another tool's pick up in the grid.
    base = _config(model)
    space = build_space(base, Platform(cpu_count=2), SpaceOptions(precisions=ALL_PRECISIONS))
    for candidate in grid(space):
        assert space.point_of(apply(candidate, base)) == candidate
    oversubscribed = apply(grid(space)[0], base)
    oversubscribed.instance_group[0].count = 2
    oversubscribed.parameters["intra_op_thread_count"].string_value = "2"
    assert space.point_of(oversubscribed) is None  # 4 threads on 2 cores: not in the space
    too_long = apply(grid(space)[0], base)
    too_long.dynamic_batching.max_queue_delay_microseconds = 40_000
    assert space.point_of(too_long) is None


def test_model_without_batching_gets_no_batching_parameters() -> None:
    base = parse_config_text(
        """
        name: "m" backend: "onnxruntime" max_batch_size: 0
        input [{ name: "x" data_type: TYPE_FP32 dims: [-1, 4] }]
        output [{ name: "y" data_type: TYPE_FP32 dims: [-1, 4] }]
        """,
        "m",
    )
    space = build_space(base, Platform(cpu_count=2))
    assert space.batching is None
    for candidate in grid(space):
        assert "dynamic_batching" not in candidate and "max_batch_size" not in candidate
        config = apply(candidate, base)
        assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
        validate_config(config, "m", "m")
    # no instance_group and no thread count in the config: Triton's defaults (2 ORT instances,
    # every core) are what the model runs with
    assert space.default_candidate().key == "inst=2,thr=1,prec=fp32"


def test_non_onnx_models_have_no_thread_or_precision_parameters() -> None:
    space = build_space(_config("add_sub_py"), Platform(cpu_count=4), SpaceOptions(ALL_PRECISIONS))
    assert space.thread_choices is None and space.precisions is None
    assert all("intra_op_thread_count" not in c and "precision" not in c for c in grid(space))


def test_tensorrt_precisions_only_where_tensorrt_runs() -> None:
    base = _config("simple")
    cpu = build_space(base, Platform(cpu_count=2), SpaceOptions(ALL_PRECISIONS))
    assert cpu.precisions == ("fp32", "fp16", "int8")
    onnxruntime_trt = Platform(cpu_count=2, gpu_backends=ORT_GPU, tensorrt=True)
    trt = build_space(base, onnxruntime_trt, SpaceOptions(ALL_PRECISIONS))
    # TensorRT runs on GPU instances only: the CPU instances keep the file precisions.
    assert trt.kinds["KIND_CPU"].precisions == ("fp32", "fp16", "int8")
    assert trt.kinds["KIND_GPU"].precisions == ("fp32", "fp16", "int8", "trt_fp16", "trt_int8")
    everything = replace(onnxruntime_trt, tensorrt_engines=True)
    gpu = build_space(base, everything, SpaceOptions(ALL_PRECISIONS))
    assert gpu.kinds["KIND_GPU"].precisions == ALL_PRECISIONS
    assert gpu.kinds["KIND_GPU"].threads is None and gpu.kinds["KIND_CPU"].threads is not None
    for candidate in grid(gpu):
        validate_config(apply(candidate, base), "simple", "simple")
        if str(candidate.get("precision")).startswith(("trt_", "plan_")):
            assert candidate["instance_kind"] == "KIND_GPU"
    with pytest.raises(ValueError, match="bf12"):
        build_space(base, Platform(cpu_count=2), SpaceOptions(("bf12",)))
    with pytest.raises(ValueError, match="runs on this platform"):
        build_space(base, Platform(cpu_count=2), SpaceOptions(("trt_fp16",)))


def test_ensembles_are_refused() -> None:
    base = mc.ModelConfig(name="e", platform="ensemble", max_batch_size=4)
    with pytest.raises(ValueError, match="ensembles are not tuned"):
        build_space(base, Platform(cpu_count=2))


def test_optuna_only_ever_proposes_grid_points() -> None:
    space = build_space(_config("digits"), Platform(cpu_count=4), SpaceOptions(("fp32", "int8")))
    points = set(grid(space))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(300):
        trial = study.ask()
        candidate = space.suggest(trial)
        assert candidate in points
        assert space.params_for(candidate) == trial.params
        seen.add(candidate)
        study.tell(trial, 1.0)
    assert len(seen) > 150  # the conditional branches are all reached


def _serving(gpus: int, providers: tuple[str, ...]) -> ServingPlatform:
    devices = tuple(GpuDevice(i, "NVIDIA H200", f"GPU-{i}", 2**37) for i in range(gpus))
    return ServingPlatform(3, devices, providers, ("onnxruntime-gpu",), None)


def test_platform_is_what_the_server_can_run_on() -> None:
    assert Platform.detect().cpu_count >= 1
    both = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")
    h200 = ("NVIDIA H200",)

    def detect(serving: ServingPlatform) -> Platform:
        # onnxruntime's own rule, as the server has it; the other backends said no here
        def reason(backend: str, here: ServingPlatform) -> str | None:
            return gpu_unavailable_reason(backend, here) if backend == "onnxruntime" else "no"

        return Platform.detect(serving, reason)

    assert detect(_serving(1, both)) == Platform(3, ORT_GPU, True, h200)
    # onnxruntime-gpu without a GPU, and a GPU without onnxruntime-gpu: CPU instances only.
    assert detect(_serving(0, both)) == Platform(3)
    cpu_only = ("CPUExecutionProvider",)
    assert detect(_serving(2, cpu_only)) == Platform(3, frozenset(), False, h200 * 2)
    assert detect(_serving(1, both[1:])) == Platform(3, ORT_GPU, False, h200)


def test_the_backends_offered_a_gpu_are_those_the_server_would_place_on_one() -> None:
    gpu_machine = _serving(1, ("CPUExecutionProvider",))
    asked: list[str] = []

    def reason(backend: str, here: ServingPlatform) -> str | None:
        assert here is gpu_machine
        asked.append(backend)
        return None if backend in ("pytorch", "python") else f"{backend} cannot"

    found = Platform.detect(gpu_machine, reason)
    assert found.gpu_backends == {"pytorch", "python"} and set(asked) >= {"pytorch", "onnxruntime"}
    # Without a GPU nothing is asked: no backend is offered one.
    assert Platform.detect(_serving(0, ()), reason).gpu_backends == frozenset()
    # The server's own answers on this machine: a python model may use the GPU it is given;
    # onnxruntime without its CUDA provider cannot, and says why.
    assert gpu_unavailable_reason("python", gpu_machine) is None
    assert "CUDAExecutionProvider" in str(gpu_unavailable_reason("onnxruntime", gpu_machine))
    assert gpu_unavailable_reason("pytorch", _serving(0, ())) == "no GPU is visible"


def test_engine_precisions_need_tensorrt_and_a_cuda_torch() -> None:
    with_tensorrt = replace(
        _serving(1, ("CUDAExecutionProvider", "CPUExecutionProvider")), tensorrt_version="10.9"
    )
    # This machine has neither the tensorrt module nor a CUDA build of torch, whatever the
    # platform says: the tensorrt backend could not run an engine.
    assert Platform.detect(with_tensorrt).tensorrt_engines is False
    assert tensorrt_engines_missing(with_tensorrt) is not None
    assert "tensorrt package" in (tensorrt_engines_missing(_serving(1, ())) or "")
    assert tensorrt_engines_missing(_serving(0, ())) == "no GPU is visible"


def test_a_python_model_may_have_more_instances_than_cores() -> None:
    # Its instances are processes that idle while each batch is handed over: up to two a core.
    space = build_space(_config("add_sub_py"), Platform(cpu_count=2))
    assert space.instance_counts == (1, 2, 3, 4)
    capped = build_space(
        _config("add_sub_py"), Platform(cpu_count=2), SpaceOptions(max_instances=3)
    )
    assert capped.instance_counts == (1, 2, 3)
    assert build_space(_config("digits"), Platform(cpu_count=2)).instance_counts == (1, 2)
