"""The bundled models as python-backend models, as Triton 2.51 from the PyPI wheel serves them
(its onnxruntime backend is not in that wheel, so CPU users of it run onnxruntime inside a
python model), and the outputs a server must give before it is measured.

- `simple`: numpy add/sub (peer.SIMPLE_MODEL).
- an onnxruntime model (`digits`, `resnet18`, ...): ORT_MODEL, the bundled model.onnx run on
  onnxruntime inside model.py, the requests of a batch joined into one session run (as our
  onnxruntime backend does), `intra_op_thread_count` from the config's parameters; the bundled
  config.pbtxt otherwise unchanged (max_batch_size, inputs, dynamic batching, instances).

The same folders serve Triton and our python backend. Used by benchmarks/vs_triton.py and
benchmarks/model_analyzer_side.py; not a script.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
from google.protobuf import text_format
from in_process import InProcess
from peer import ROOT, SIMPLE_MODEL, python_model
from tritonclient.grpc import model_config_pb2 as mc

REPOSITORY = ROOT / "model_repository"

# onnxruntime inside Triton's python backend. The stub puts its working directory first on
# sys.path (numpy 1.26 there: this backend build sends numpy 2 outputs as 0 bytes) and ignores
# PYTHONPATH, so onnxruntime's site-packages is appended here.
ORT_MODEL = '''"""onnxruntime on the CPU inside Triton's python backend."""

import sys

sys.path.append({site_packages!r})

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        options = ort.SessionOptions()
        threads = config.get("parameters", {{}}).get("intra_op_thread_count", {{}})
        if threads.get("string_value"):
            options.intra_op_num_threads = int(threads["string_value"])
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.input = config["input"][0]["name"]
        self.outputs = [output["name"] for output in config["output"]]

    def execute(self, requests):
        arrays = [
            pb_utils.get_input_tensor_by_name(request, self.input).as_numpy()
            for request in requests
        ]
        results = self.session.run(self.outputs, {{self.input: np.concatenate(arrays)}})
        responses, start = [], 0
        for array in arrays:
            end = start + len(array)
            tensors = [
                pb_utils.Tensor(name, np.ascontiguousarray(result[start:end]))
                for name, result in zip(self.outputs, results)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            start = end
        return responses
'''
# Absolute and relative tolerance of a floating-point model's outputs against in-process
# onnxruntime (batching and thread counts change the order of additions).
ORT_TOLERANCE = 1e-4


def bundled_config(model: str) -> mc.ModelConfig:
    path = REPOSITORY / model / "config.pbtxt"
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def write_python_repository(models: list[str], destination: Path) -> None:
    """Each model as a python model in `destination`: `simple` as numpy add/sub, the others on
    onnxruntime, their config otherwise as bundled (the files beside it, e.g. labels.txt,
    copied too)."""
    ort_source = ORT_MODEL.format(site_packages=str(Path(ort.__file__).resolve().parents[1]))
    for model in models:
        bundled, folder = REPOSITORY / model, destination / model
        if model == "simple":
            python_model(bundled_config(model), SIMPLE_MODEL, folder)
            continue
        python_model(bundled_config(model), ort_source, folder)
        shutil.copy(bundled / "1" / "model.onnx", folder / "1")
        for path in bundled.iterdir():
            if path.is_file() and path.name != "config.pbtxt":
                shutil.copy(path, folder)


def reference(model: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Two random rows for an onnxruntime `model` and the outputs in-process onnxruntime gives
    them."""
    rng = np.random.default_rng(0)
    runtime = InProcess(model, REPOSITORY)
    batch = rng.standard_normal((2, *runtime.shape)).astype(np.float32)
    names = [output.name for output in runtime.config.output]
    outputs = runtime.session.run(names, {runtime.input: batch})
    return {runtime.input: batch}, dict(zip(names, outputs, strict=True))


def simple_reference() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Random INT32 rows for `simple` and the outputs numpy computes for them."""
    rng = np.random.default_rng(0)
    in0, in1 = (rng.integers(-1000, 1000, (1, 16), dtype=np.int32) for _ in range(2))
    return {"INPUT0": in0, "INPUT1": in1}, {"OUTPUT0": in0 + in1, "OUTPUT1": in0 - in1}


def check_data(model: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], float]:
    """Inputs, the outputs every server must give for them, and the tolerance."""
    if model == "simple":
        return (*simple_reference(), 0.0)
    return (*reference(model), ORT_TOLERANCE)


def build_bundled() -> None:
    """Write the bundled repository's generated files that are missing (resnet18's weights, the
    text pipeline's files): scripts/build_model_repository.py, which leaves present files be."""
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "build_model_repository.py")], check=True
    )
