"""digits_pipeline (digits_preprocess -> digits -> digits_postprocess) over HTTP and gRPC: the
held-out split of scikit-learn's digits, as raw 8x8 and upscaled 28x28 uint8 images, comes back
as the right digits, the same ones `digits` alone predicts, with top-k labels and scores."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import onnxruntime as ort
import pytest
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.model_repository.conftest import PipelineClient

ROOT = Path(__file__).resolve().parents[3]
OUTPUTS = ("CLASS_IDS", "SCORES", "LABELS")
LABELS = (BUNDLED_REPOSITORY / "digits" / "labels.txt").read_text().splitlines()


def _build_script() -> ModuleType:
    path = ROOT / "scripts" / "build_model_repository.py"
    spec = importlib.util.spec_from_file_location("build_model_repository", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def held_out(bundled_repository: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(uint8 8x8 images 0..255, labels, what `digits` alone predicts for them)."""
    _, x_test, _, y_test = _build_script().digits_split()  # the split digits was trained on
    images = np.rint(x_test[:, 0] * 255).astype(np.uint8)
    session = ort.InferenceSession(
        str(bundled_repository / "digits" / "1" / "model.onnx"),
        providers=["CPUExecutionProvider"],
    )
    (logits,) = session.run(["logits"], {"input": x_test})
    return images, y_test, logits.argmax(axis=1)


def _upscale_28(images: np.ndarray) -> np.ndarray:
    """Each 8x8 pixel repeated over the 28x28 pixels nearest to it (3 or 4 per side)."""
    source = np.arange(28) * 8 // 28
    return images[:, source][:, :, source]


def _classify(client: PipelineClient, images: np.ndarray, batch: int = 60) -> dict[str, np.ndarray]:
    answers = [
        client.infer("digits_pipeline", {"IMAGE": (images[i : i + batch], "UINT8")}, OUTPUTS)
        for i in range(0, len(images), batch)
    ]
    return {name: np.concatenate([a[name] for a in answers]) for name in OUTPUTS}


def _check_top_k(answer: dict[str, np.ndarray], count: int) -> None:
    ids, scores, labels = (answer[name] for name in OUTPUTS)
    assert ids.shape == scores.shape == labels.shape == (count, 3)  # TOP_K 3
    assert ids.dtype == np.int32 and scores.dtype == np.float32
    assert (np.diff(scores, axis=1) <= 0).all()  # most probable first
    assert ((scores > 0) & (scores.sum(axis=1, keepdims=True) <= 1 + 1e-5)).all()
    assert [[v.decode() for v in row] for row in labels] == [
        [LABELS[i] for i in row] for row in ids
    ]


@pytest.mark.parametrize("size", [8, 28])
def test_held_out_digits_come_back_right(
    pipeline_client: PipelineClient, held_out: tuple[np.ndarray, np.ndarray, np.ndarray], size: int
) -> None:
    images, labels, alone = held_out
    if size == 28:
        images = _upscale_28(images)
    answer = _classify(pipeline_client, images)
    _check_top_k(answer, len(labels))
    top1 = answer["CLASS_IDS"][:, 0]
    assert (top1 == labels).mean() >= 0.95
    if size == 8:
        np.testing.assert_array_equal(top1, alone)
    else:  # the reduction back to 8x8 mixes neighbouring pixels at the cells' edges
        assert (top1 == alone).mean() >= 0.98


def test_single_image_requests_in_flight_together(
    pipeline_client: PipelineClient, held_out: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    images, _, alone = held_out
    requests = [{"IMAGE": (images[i : i + 1], "UINT8")} for i in range(24)]
    answers = pipeline_client.infer_concurrently("digits_pipeline", requests, OUTPUTS)
    assert [int(a["CLASS_IDS"][0, 0]) for a in answers] == [int(v) for v in alone[:24]]


def test_too_small_image_is_refused_naming_the_input(
    pipeline_client: PipelineClient, held_out: tuple[np.ndarray, np.ndarray, np.ndarray]
) -> None:
    with pytest.raises(InferenceServerException, match=r"'IMAGE'.*8x8.*4x4") as refused:
        pipeline_client.infer(
            "digits_pipeline", {"IMAGE": (np.zeros((1, 4, 4), np.uint8), "UINT8")}, OUTPUTS
        )
    assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    images, _, alone = held_out  # and the pipeline keeps serving
    answer = pipeline_client.infer("digits_pipeline", {"IMAGE": (images[:2], "UINT8")}, OUTPUTS)
    assert list(answer["CLASS_IDS"][:, 0]) == list(alone[:2])
