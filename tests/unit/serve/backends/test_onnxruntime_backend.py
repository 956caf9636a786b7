"""onnxruntime session options and execution providers from the model config."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.onnxruntime import execution_providers, require_gpu_session, session_options
from serve.errors import ServeError
from tests.conftest import BUNDLED_REPOSITORY


def _config(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def test_session_options_from_parameters() -> None:
    config = _config("""
parameters { key: "intra_op_thread_count" value { string_value: "3" } }
parameters { key: "inter_op_thread_count" value { string_value: "2" } }
parameters { key: "execution_mode" value { string_value: "1" } }
parameters { key: "enable_mem_arena" value { string_value: "0" } }
optimization { graph { level: 1 } }
""")
    options = session_options(config, "m/config.pbtxt")
    assert options.intra_op_num_threads == 3
    assert options.inter_op_num_threads == 2
    assert options.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert options.enable_cpu_mem_arena is False
    assert options.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        (-1, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
        (0, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        (1, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED),
    ],
)
def test_graph_level(level: int, expected: ort.GraphOptimizationLevel) -> None:
    config = _config(f"optimization {{ graph {{ level: {level} }} }}")
    assert session_options(config, "c").graph_optimization_level == expected


def test_bad_thread_count_names_the_parameter() -> None:
    config = _config('parameters { key: "intra_op_thread_count" value { string_value: "two" } }')
    with pytest.raises(ServeError, match=r"c: parameters\['intra_op_thread_count'\]"):
        session_options(config, "c")


TENSORRT_FP16 = """
optimization { execution_accelerators { gpu_execution_accelerator [
  { name: "tensorrt" parameters [
    { key: "precision_mode" value: "FP16" },
    { key: "max_workspace_size_bytes" value: "1073741824" },
    { key: "trt_engine_cache_path" value: "engines" }
  ] }
] } }
"""
GPU_PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


def test_a_gpu_instance_runs_tensorrt_then_cuda_on_its_device(tmp_path: Path) -> None:
    providers, warnings = execution_providers(
        _config(TENSORRT_FP16), "KIND_GPU", 1, GPU_PROVIDERS, model_dir=tmp_path
    )
    assert warnings == []
    (trt_name, trt), (cuda_name, cuda), cpu = providers
    assert (trt_name, cuda_name, cpu) == GPU_PROVIDERS
    assert trt["device_id"] == 1 and cuda == {"device_id": 1}
    assert trt["trt_fp16_enable"] is True and trt["trt_int8_enable"] is False
    assert trt["trt_max_workspace_size"] == 2**30
    # Engines are cached; a relative cache folder is the model's.
    assert trt["trt_engine_cache_enable"] is True
    assert trt["trt_engine_cache_path"] == str(tmp_path / "engines")


def test_a_gpu_instance_is_never_moved_to_the_cpu() -> None:
    cpu_only = ("CPUExecutionProvider",)
    with pytest.raises(ServeError, match=r"CUDAExecutionProvider.*onnxruntime-gpu"):
        execution_providers(_config(""), "KIND_GPU", 0, cpu_only)
    cuda_only = GPU_PROVIDERS[1:]
    with pytest.raises(
        ServeError, match="'tensorrt' needs onnxruntime's TensorrtExecutionProvider"
    ):
        execution_providers(_config(TENSORRT_FP16), "KIND_GPU", 0, cuda_only)


def test_tensorrt_parameters_are_checked_by_name() -> None:
    bad_mode = TENSORRT_FP16.replace('"FP16"', '"INT4"')
    with pytest.raises(ServeError, match="precision_mode 'INT4'"):
        execution_providers(_config(bad_mode), "KIND_GPU", 0, GPU_PROVIDERS)
    bad_size = TENSORRT_FP16.replace('"1073741824"', '"1 GiB"')
    with pytest.raises(ServeError, match="max_workspace_size_bytes"):
        execution_providers(_config(bad_size), "KIND_GPU", 0, GPU_PROVIDERS)


def test_gpu_accelerators_on_a_cpu_instance_are_ignored_with_a_warning() -> None:
    _, cpu_warnings = execution_providers(_config(TENSORRT_FP16), "KIND_CPU")
    assert cpu_warnings == [
        "gpu_execution_accelerator 'tensorrt' ignored: the instance runs on the CPU"
    ]


@pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(),
    reason="shows onnxruntime's silent CPU session, which needs an onnxruntime without CUDA",
)
def test_a_gpu_session_onnxruntime_made_on_the_cpu_is_refused() -> None:
    # Asked for CUDA it does not have, onnxruntime only logs a warning and makes a CPU session:
    # a KIND_GPU instance must not take it.
    asked = [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    session = ort.InferenceSession(
        str(BUNDLED_REPOSITORY / "simple" / "1" / "model.onnx"), providers=asked
    )
    assert session.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(ServeError, match="CUDAExecutionProvider") as error:
        require_gpu_session(session, asked, "simple_0")
    assert "simple_0: KIND_GPU" in error.value.message
    assert "not run on the CPU instead" in error.value.message


def test_a_gpu_session_keeps_its_providers() -> None:
    class Session:
        def __init__(self, providers: list[str]) -> None:
            self.providers = providers
            self.fallback = True

        def get_providers(self) -> list[str]:
            return self.providers

        def disable_fallback(self) -> None:
            self.fallback = False

    asked: list[tuple[str, dict[str, str]] | str] = [
        ("TensorrtExecutionProvider", {}),
        ("CUDAExecutionProvider", {}),
        "CPUExecutionProvider",
    ]
    on_gpu = Session(["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    require_gpu_session(on_gpu, asked, "m_0")
    assert on_gpu.fallback is False  # a failing GPU run is an error, not a CPU run
    without_tensorrt = Session(["CUDAExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ServeError, match="without TensorrtExecutionProvider"):
        require_gpu_session(without_tensorrt, asked, "m_0")
    assert without_tensorrt.fallback is True
