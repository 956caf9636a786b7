"""In-process onnxruntime: the ceiling a server of the same model can approach.

One session per model, built from the bundled model.onnx with the session options our
onnxruntime backend derives from the bundled config.pbtxt (intra_op_thread_count,
inter_op_thread_count, execution_mode, graph level), fed one random FP32 batch over and over:
warm-up runs first, then back-to-back runs for a fixed time; the rate is rows per second.
Used by benchmarks/vs_triton.py and benchmarks/serving_efficiency.py; not a script.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.onnxruntime import session_options

ROOT = Path(__file__).resolve().parents[1]
WARMUP_RUNS = 3


class InProcess:
    """A model's onnxruntime session in this process, configured as the server configures it."""

    def __init__(self, model: str, repository: Path = ROOT / "model_repository") -> None:
        config_path = repository / model / "config.pbtxt"
        self.config = text_format.Parse(config_path.read_text(), mc.ModelConfig())
        (tensor,) = self.config.input
        self.input = tensor.name
        self.shape = tuple(tensor.dims)
        self.threads = self.config.parameters["intra_op_thread_count"].string_value or "default"
        self.session = ort.InferenceSession(
            str(repository / model / "1" / "model.onnx"),
            session_options(self.config, str(config_path)),
            providers=["CPUExecutionProvider"],
        )
        self._rng = np.random.default_rng(0)

    def rate(self, batch: int, seconds: float, warmup_s: float = 0.0) -> float:
        """Rows per second at `batch` rows a run, over `seconds` after at least WARMUP_RUNS
        runs and `warmup_s` seconds of warm-up."""
        feed = {self.input: self._rng.random((batch, *self.shape), dtype=np.float32)}
        started, runs = time.perf_counter(), 0
        while runs < WARMUP_RUNS or time.perf_counter() - started < warmup_s:
            self.session.run(None, feed)
            runs += 1
        count, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < seconds:
            self.session.run(None, feed)
            count += batch
        return count / elapsed
