"""What several contract modules share: inputs for the bundled models, reference outputs computed
with onnxruntime from the model file itself, and the check that the server still serves."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from tests.integration.serve.contract.clients import ContractClient


def simple_inputs(seed: int, batch: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: rng.integers(-1000, 1000, size=(batch, 16), dtype=np.int32)
        for name in ("INPUT0", "INPUT1")
    }


def assert_still_serving(client: ContractClient) -> None:
    """`simple` answers a good request: the server survived what came before."""
    inputs = simple_inputs(99)
    answer = client.infer("simple", inputs, ["OUTPUT0"])
    np.testing.assert_array_equal(
        answer.outputs["OUTPUT0"].array, inputs["INPUT0"] + inputs["INPUT1"]
    )


def onnx_reference(model_dir: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs for `feeds`, by name, from onnxruntime run directly on its file."""
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"))
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def digits_images(digits_dir: Path, count: int) -> tuple[np.ndarray, list[int]]:
    """`count` images of the digits model's validation set ([count, 1, 8, 8] FP32) and labels."""
    records = json.loads((digits_dir / "validation.json").read_text())["data"][:count]
    images = np.stack(
        [
            np.asarray(r["input"]["content"], np.float32).reshape(r["input"]["shape"])
            for r in records
        ]
    )
    labels = json.loads((digits_dir / "validation_labels.json").read_text())
    return images, labels[:count]
