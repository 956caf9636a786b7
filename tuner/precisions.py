"""The precisions the tuner knows, by name (no imports: the CLI checks its option with them).

- fp32: the model file as it is.
- fp16, int8: a model file of their own beside the original (`model.int8.onnx`).
- fp16, bf16 of a TorchScript model: a module of their own (`model.bf16.pt`) that casts its
  weights and floating inputs and gives its outputs back in the config's types.
- trt_fp16, trt_int8: onnxruntime's TensorRT execution provider at that precision_mode, a
  config change on GPU instances (trt_int8 with a calibration table in the model's folder).
- plan_fp16, plan_int8: TensorRT engines built by the tuner (`model.fp16.plan`), served by the
  tensorrt backend on GPU instances.
"""

FILE_PRECISIONS = ("fp16", "bf16", "int8")
TORCH_PRECISIONS = ("fp16", "bf16")  # the reduced precisions of TorchScript models
ONNX_FILE_PRECISIONS = ("fp16", "int8")
TRT_PRECISIONS = {"trt_fp16": "FP16", "trt_int8": "INT8"}  # name -> precision_mode
PLAN_PRECISIONS = {"plan_fp16": "fp16", "plan_int8": "int8"}  # name -> the engine file's tag
PRECISIONS = ("fp32", *FILE_PRECISIONS, *TRT_PRECISIONS, *PLAN_PRECISIONS)
# What a run tries when not told: each model gets those of them its backend has.
DEFAULT_PRECISIONS = ("fp32", "fp16", "bf16", "int8")


def backend_precisions(backend: str) -> tuple[str, ...]:
    """The precisions the tuner can make for models of `backend`."""
    if backend == "onnxruntime":
        return tuple(p for p in PRECISIONS if p != "bf16")
    if backend == "pytorch":
        return ("fp32", *TORCH_PRECISIONS)
    return ("fp32",)
