"""The config `parameters` of Triton's pytorch backend, as this server honours them.

Honoured: INTRA_OP_THREAD_COUNT, INTER_OP_THREAD_COUNT, DISABLE_OPTIMIZED_EXECUTION,
INFERENCE_MODE, ENABLE_JIT_EXECUTOR, ENABLE_JIT_PROFILING, ENABLE_TENSOR_FUSER, and on GPU
instances DISABLE_CUDNN (cuDNN off around each forward()) and ENABLE_CACHE_CLEANING (torch's
CUDA cache emptied after each execution). Triton's other names are ignored with a warning that
names them (`ignored`); parameters Triton does not know are left alone, as Triton leaves them.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.parameters import ConfigParameters

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
    def from_config(cls, config: mc.ModelConfig, source: str) -> TorchOptions:
        """The options `config` asks for; ServeError (INVALID) naming `source` (its
        config.pbtxt) and the parameter when a value does not parse."""
        params = ConfigParameters(config, source)
        return cls(
            intra_op_threads=params.integer("INTRA_OP_THREAD_COUNT", minimum=0) or 0,
            inter_op_threads=params.integer("INTER_OP_THREAD_COUNT", minimum=0) or 0,
            optimized_execution=not params.flag("DISABLE_OPTIMIZED_EXECUTION"),
            inference_mode=params.flag("INFERENCE_MODE") is not False,
            jit_executor=params.flag("ENABLE_JIT_EXECUTOR"),
            jit_profiling=params.flag("ENABLE_JIT_PROFILING"),
            tensor_fuser=params.flag("ENABLE_TENSOR_FUSER"),
            cudnn=not params.flag("DISABLE_CUDNN"),
            cache_cleaning=bool(params.flag("ENABLE_CACHE_CLEANING")),
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
