"""Triton python-backend model: `digits` logits -> the top-k classes with their labels.

LOGITS is FP32 [10] per batch row. The outputs hold the k most probable classes, most probable
first: CLASS_IDS INT32 [k], SCORES FP32 [k] (softmax probabilities) and LABELS BYTES [k] (the
lines of labels.txt beside config.pbtxt, the same file as digits' labels.txt). k is the config
parameter TOP_K (default 3, at most the number of labels).
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def read_top_k(parameters: dict, classes: int) -> int:
    raw = parameters.get("TOP_K", {}).get("string_value", "3")
    try:
        k = int(raw)
    except ValueError:
        raise ValueError(f"parameter TOP_K must be an integer, got {raw!r}") from None
    if not 1 <= k <= classes:
        raise ValueError(f"parameter TOP_K must be between 1 and {classes}, got {raw!r}")
    return k


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        labels_path = Path(args["model_repository"]) / "labels.txt"
        lines = labels_path.read_text(encoding="utf-8").splitlines()
        self.labels = np.array([line.encode("utf-8") for line in lines], dtype=np.object_)
        self.k = read_top_k(config.get("parameters") or {}, len(self.labels))

    def execute(self, requests: list) -> list:
        return [self._top_k(request) for request in requests]

    def _top_k(self, request: "pb_utils.InferenceRequest") -> "pb_utils.InferenceResponse":
        logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
        if logits.shape[1] != len(self.labels):
            return pb_utils.InferenceResponse(
                error=pb_utils.TritonError(
                    f"input 'LOGITS' has {logits.shape[1]} classes, labels.txt {len(self.labels)}",
                    pb_utils.TritonError.INVALID_ARG,
                )
            )
        shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
        probabilities = shifted / shifted.sum(axis=1, keepdims=True)
        order = np.argsort(-probabilities, axis=1, kind="stable")[:, : self.k]
        scores = np.take_along_axis(probabilities, order, axis=1).astype(np.float32)
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("CLASS_IDS", order.astype(np.int32)),
                pb_utils.Tensor("SCORES", scores),
                pb_utils.Tensor("LABELS", self.labels[order]),
            ]
        )
