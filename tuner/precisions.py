"""The precisions the tuner knows, by name (no imports: the CLI checks its option with them).

- fp32: the model file as it is.
- fp16, int8: a model file of their own beside the original (`model.int8.onnx`).
- trt_fp16, trt_int8: onnxruntime's TensorRT execution provider at that precision_mode, a
  config change on GPU instances (trt_int8 with a calibration table in the model's folder).
- plan_fp16, plan_int8: TensorRT engines built by the tuner (`model.fp16.plan`), served by the
  tensorrt backend on GPU instances.
"""

FILE_PRECISIONS = ("fp16", "int8")
TRT_PRECISIONS = {"trt_fp16": "FP16", "trt_int8": "INT8"}  # name -> precision_mode
PLAN_PRECISIONS = {"plan_fp16": "fp16", "plan_int8": "int8"}  # name -> the engine file's tag
PRECISIONS = ("fp32", *FILE_PRECISIONS, *TRT_PRECISIONS, *PLAN_PRECISIONS)
