"""The search on a machine with a GPU (a stand-in platform): instance kind, GPU instances per
GPU and the TorchScript precisions are dimensions for the backends the server would place on
a GPU, with batching as on the CPU."""

from __future__ import annotations

import optuna
import pytest
from tritonclient.grpc import model_config_pb2 as mc

from serve.config.model_config import parse_config_text
from serve.config.validate import validate_config
from tuner.candidate import Candidate, apply, config_precision
from tuner.run import default_precisions
from tuner.space import Platform, SpaceOptions, build_space, grid

H200 = ("NVIDIA H200",)
TORCH_GPU = Platform(cpu_count=16, gpu_backends=frozenset({"pytorch", "python"}), gpu_names=H200)
CPU_ONLY = Platform(cpu_count=2)
TORCH_PRECISIONS = ("fp32", "fp16", "bf16")


def _config(backend: str = "pytorch", group: str = "{ count: 1 kind: KIND_CPU }") -> mc.ModelConfig:
    return parse_config_text(
        f"""
        name: "m" backend: "{backend}" max_batch_size: 8
        input [{{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }}]
        output [{{ name: "y" data_type: TYPE_FP32 dims: [ 4 ] }}]
        instance_group [{group}]
        dynamic_batching {{ }}
        """,
        "m",
    )


def test_a_torchscript_model_on_a_gpu_machine_searches_both_kinds() -> None:
    base = _config()
    space = build_space(base, TORCH_GPU, SpaceOptions(precisions=TORCH_PRECISIONS))
    assert list(space.kinds) == ["KIND_CPU", "KIND_GPU"]
    assert space.kinds["KIND_GPU"].counts == (1, 2, 3, 4)  # instances per GPU
    assert space.kinds["KIND_GPU"].precisions == TORCH_PRECISIONS
    points = grid(space)
    on_gpu = [c for c in points if c["instance_kind"] == "KIND_GPU"]
    assert on_gpu and len(on_gpu) < len(points)
    assert {c.get("max_batch_size") for c in on_gpu} >= {2, 4, 8}
    assert {c.get("precision") for c in on_gpu} == set(TORCH_PRECISIONS)
    for candidate in on_gpu:
        config = apply(candidate, base)
        validate_config(config, "m", "m")
        group = config.instance_group[0]
        assert group.kind == mc.ModelInstanceGroup.KIND_GPU
        assert group.count == candidate["instance_count"]
        assert config_precision(config) == candidate.get("precision", "fp32")
    assert "instance_count (KIND_GPU per GPU): 1, 2, 3, 4" in space.describe()


def test_without_a_gpu_for_the_backend_nothing_about_kinds_is_asked() -> None:
    base = _config()
    space = build_space(base, CPU_ONLY, SpaceOptions(precisions=TORCH_PRECISIONS))
    assert list(space.kinds) == ["KIND_CPU"]
    assert space.precisions is None  # fp32 alone: no precision parameter
    assert all(c["instance_kind"] == "KIND_CPU" for c in grid(space))
    # A GPU the model's backend cannot use (onnxruntime without CUDA) changes nothing either.
    ort_gpu_only = Platform(16, frozenset({"onnxruntime"}), gpu_names=H200)
    assert list(build_space(base, ort_gpu_only).kinds) == ["KIND_CPU"]


def test_optuna_names_the_gpu_choices_apart_and_proposes_only_grid_points() -> None:
    space = build_space(_config(), TORCH_GPU, SpaceOptions(precisions=TORCH_PRECISIONS))
    points = set(grid(space))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    names: set[str] = set()
    for _ in range(200):
        trial = study.ask()
        candidate = space.suggest(trial)
        assert candidate in points
        assert space.params_for(candidate) == trial.params
        names |= set(trial.params)
        study.tell(trial, 1.0)
    assert {"instance_kind", "instance_count", "instance_count[kind=gpu]"} <= names
    assert "precision[kind=gpu]" in names


def test_python_models_get_a_gpu_only_when_their_config_asks_for_one() -> None:
    on_cpu = build_space(_config("python"), TORCH_GPU)
    assert list(on_cpu.kinds) == ["KIND_CPU"]
    for group in ("{ count: 2 kind: KIND_GPU }", "{ kind: KIND_AUTO }"):
        space = build_space(_config("python", group), TORCH_GPU)
        assert list(space.kinds) == ["KIND_CPU", "KIND_GPU"]
        assert space.kinds["KIND_GPU"].precisions is None
        # The config as written is a point of the space, on the GPU.
        assert space.default_candidate()["instance_kind"] == "KIND_GPU"
    written = build_space(_config("python", "{ count: 2 kind: KIND_GPU }"), TORCH_GPU)
    assert apply(written.as_written(), written.base) == written.base


def test_the_search_starts_on_the_gpu_soon_after_the_config_as_written() -> None:
    space = build_space(_config(), TORCH_GPU, SpaceOptions(precisions=TORCH_PRECISIONS))
    priors = space.prior_candidates()
    assert priors[0]["instance_kind"] == "KIND_CPU"  # the config as written, snapped
    assert priors[1]["instance_kind"] == "KIND_GPU"
    assert {p.get("precision") for p in priors[1:4]} == set(TORCH_PRECISIONS)


@pytest.mark.parametrize(
    ("platform", "cpu_fp16", "expected"),
    [
        (CPU_ONLY, False, None),
        (Platform(cpu_count=2, cpu_bf16=True), False, ("fp32", "bf16")),
        (Platform(cpu_count=2, cpu_bf16=True), True, ("fp32", "fp16", "bf16")),
        (Platform(cpu_count=2), True, ("fp32", "fp16")),
    ],
)
def test_torchscript_precisions_on_cpu_instances(
    platform: Platform, cpu_fp16: bool, expected: tuple[str, ...] | None
) -> None:
    options = SpaceOptions(precisions=TORCH_PRECISIONS, cpu_fp16=cpu_fp16)
    assert build_space(_config(), platform, options).kinds["KIND_CPU"].precisions == expected


def test_a_torchscript_precision_is_a_module_file_of_its_own() -> None:
    base = _config()
    config = apply(Candidate({"precision": "bf16"}), base)
    assert config.default_model_filename == "model.bf16.pt"
    assert config_precision(config) == "bf16"
    back = apply(Candidate({"precision": "fp32"}), config)
    assert back.default_model_filename == "model.pt" and config_precision(back) == "fp32"


def test_the_default_precisions_are_those_that_can_pay_off_here() -> None:
    asked = ("fp32", "fp16", "bf16", "int8")
    assert default_precisions(asked, "onnxruntime", CPU_ONLY) == ("fp32", "fp16", "int8")
    assert default_precisions(asked, "pytorch", TORCH_GPU) == ("fp32", "fp16", "bf16")
    assert default_precisions(asked, "pytorch", CPU_ONLY) == ("fp32",)
    bf16_cpu = Platform(cpu_count=2, cpu_bf16=True)
    assert default_precisions(asked, "pytorch", bf16_cpu) == ("fp32", "bf16")
    assert default_precisions(asked, "python", TORCH_GPU) == ("fp32",)
