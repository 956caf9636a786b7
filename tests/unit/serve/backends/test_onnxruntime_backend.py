"""onnxruntime session options and execution providers from the model config."""

from __future__ import annotations

import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.onnxruntime import execution_providers, session_options
from serve.errors import ServeError


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


def test_gpu_accelerators_fall_back_to_cpu_with_warnings() -> None:
    config = _config("""
optimization { execution_accelerators { gpu_execution_accelerator [
  { name: "tensorrt" parameters { key: "precision_mode" value: "FP16" } }
] } }
""")
    available = ort.get_available_providers()
    providers, warnings = execution_providers(config, "KIND_GPU")
    assert providers[-1] == "CPUExecutionProvider"
    if "TensorrtExecutionProvider" not in available:
        assert any("tensorrt" in w for w in warnings)
    if "CUDAExecutionProvider" not in available:
        assert any("CUDA" in w for w in warnings)
    _, cpu_warnings = execution_providers(config, "KIND_CPU")
    assert cpu_warnings == [
        "gpu_execution_accelerator 'tensorrt' ignored: the instance runs on the CPU"
    ]
