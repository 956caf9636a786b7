"""The large-tensor no-op model: a 600 KB FP32 input [3, 224, 224] whose model costs nothing
(ONNX ReduceMean over the two image axes, output [3]), built from onnx's helpers, as an
onnxruntime model for our server and as a python model doing np.mean for Triton's peer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

NAME = "large_mean"
SHAPE = (3, 224, 224)
MAX_BATCH = 8

PYTHON_MODEL = '''"""large_mean: OUTPUT0 = the mean of INPUT0 over its two image axes."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            image = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            mean = image.mean(axis=(2, 3), dtype=np.float32).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", mean)]))
        return responses
'''


def onnx_model() -> onnx.ModelProto:
    node = helper.make_node("ReduceMean", ["INPUT0"], ["OUTPUT0"], axes=[2, 3], keepdims=0)
    graph = helper.make_graph(
        [node],
        NAME,
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", *SHAPE])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", SHAPE[0]])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def config(backend: str) -> mc.ModelConfig:
    """Dynamic batching, one CPU instance (onnxruntime: one intra-op thread); `backend`
    "onnxruntime" or "python"."""
    cfg = mc.ModelConfig(name=NAME, max_batch_size=MAX_BATCH)
    if backend == "python":
        cfg.backend = "python"
    else:
        cfg.platform = "onnxruntime_onnx"
    cfg.input.add(name="INPUT0", data_type=mc.TYPE_FP32, dims=list(SHAPE))
    cfg.output.add(name="OUTPUT0", data_type=mc.TYPE_FP32, dims=[SHAPE[0]])
    cfg.dynamic_batching.SetInParent()
    cfg.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    if backend != "python":
        # One thread: a batch costs ~0.1 ms, and onnxruntime's intra-op pool spin-waits
        # between runs, which on 2 cores takes a core from the front end being measured.
        cfg.parameters["intra_op_thread_count"].string_value = "1"
    return cfg


def write_model(repository: Path, backend: str = "onnxruntime") -> Path:
    """The model folder under `repository` (made when missing); returns it."""
    folder = repository / NAME
    (folder / "1").mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config(backend)))
    if backend == "python":
        (folder / "1" / "model.py").write_text(PYTHON_MODEL)
    else:
        onnx.save(onnx_model(), str(folder / "1" / "model.onnx"))
    return folder


def reference() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One request's inputs and the outputs it must give."""
    image = np.random.default_rng(0).random((1, *SHAPE), dtype=np.float32)
    return {"INPUT0": image}, {"OUTPUT0": image.mean(axis=(2, 3), dtype=np.float32)}
