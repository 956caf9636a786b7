"""The config `parameters` of Triton's pytorch backend, as this server honours them.

Honoured: INTRA_OP_THREAD_COUNT, INTER_OP_THREAD_COUNT, DISABLE_OPTIMIZED_EXECUTION,
INFERENCE_MODE, ENABLE_JIT_EXECUTOR, ENABLE_JIT_PROFILING, ENABLE_TENSOR_FUSER, and on GPU
instances DISABLE_CUDNN (cuDNN off around each forward()) and ENABLE_CACHE_CLEANING (torch's
CUDA cache emptied after each execution). Triton's other names are ignored with a warning that
names them (`ignored`); parameters Triton does not know are left alone, as Triton leaves them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError

# Triton's names this server does not honour -> why.
IGNORED = {
    "ENABLE_WEIGHT_SHARING": "each instance loads its own copy of the weights here",
    "ENABLE_NVFUSER": "nvFuser is gone from TorchScript in torch 2",
    "ENABLE_DETERMINISTIC_ALGORITHMS": "torch's setting is process-wide here, not per model",
    "NUM_THREADS": "it is for PyTorch 2 model.py models; TorchScript takes INTRA_OP_THREAD_COUNT",
    "NUM_INTEROP_THREADS": (
        "it is for PyTorch 2 model.py models; TorchScript takes INTER_OP_THREAD_COUNT"
    ),
    "TORCH_COMPILE_OPTIONAL_PARAMETERS": "torch.compile is for PyTorch 2 model.py models",
}


@dataclass(frozen=True, slots=True)
class TorchOptions:
    """The config `parameters` Triton's pytorch backend reads."""

    intra_op_threads: int = 0  # 0: torch's default
    inter_op_threads: int = 0
    optimized_execution: bool = True
    inference_mode: bool = True
    jit_executor: bool | None = None  # None: leave torch's setting alone
    jit_profiling: bool | None = None
    tensor_fuser: bool | None = None
    cudnn: bool = True  # GPU instances only
    cache_cleaning: bool = False  # GPU instances only
    ignored: tuple[str, ...] = ()  # "NAME: why", for the load's warnings

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> TorchOptions:
        params = {key: value.string_value for key, value in config.parameters.items()}
        return cls(
            intra_op_threads=_int_param(params, "INTRA_OP_THREAD_COUNT"),
            inter_op_threads=_int_param(params, "INTER_OP_THREAD_COUNT"),
            optimized_execution=not _bool_param(params, "DISABLE_OPTIMIZED_EXECUTION", False),
            inference_mode=bool(_bool_param(params, "INFERENCE_MODE", True)),
            jit_executor=_bool_param(params, "ENABLE_JIT_EXECUTOR", None),
            jit_profiling=_bool_param(params, "ENABLE_JIT_PROFILING", None),
            tensor_fuser=_bool_param(params, "ENABLE_TENSOR_FUSER", None),
            cudnn=not _bool_param(params, "DISABLE_CUDNN", False),
            cache_cleaning=bool(_bool_param(params, "ENABLE_CACHE_CLEANING", False)),
            ignored=tuple(f"{key}: {why}" for key, why in IGNORED.items() if key in params),
        )

    def warnings(self, on_gpu: bool) -> list[str]:
        """What the config asks that this instance will not do, each naming its parameter."""
        found = [f"parameter {item}; ignored" for item in self.ignored]
        if not on_gpu:
            found += [
                f"parameter {name} has no effect on a CPU instance"
                for name, asked in (
                    ("DISABLE_CUDNN", not self.cudnn),
                    ("ENABLE_CACHE_CLEANING", self.cache_cleaning),
                )
                if asked
            ]
        return found


def _int_param(params: Mapping[str, str], key: str) -> int:
    raw = params.get(key, "").strip()
    if not raw:
        return 0
    try:
        return max(int(raw), 0)
    except ValueError:
        raise ServeError.unavailable(
            f"config parameter '{key}' must be an integer, got '{raw}'"
        ) from None


def _bool_param(params: Mapping[str, str], key: str, default: bool | None) -> bool | None:
    raw = params.get(key, "").strip().lower()
    if not raw:
        return default
    if raw in ("true", "on", "1"):
        return True
    if raw in ("false", "off", "0"):
        return False
    raise ServeError.unavailable(f"config parameter '{key}' must be true or false, got '{raw}'")
