"""The text_embedding pipeline's generated files, from all-MiniLM-L6-v2 (see minilm_source):

- minilm_tokenizer/1/tokenizer.json: the model's tokenizer, truncating at sentence-transformers'
  max_seq_length (sentence_bert_config.json) and padding nothing (the model pads per request);
- minilm_encoder/1/model.onnx: the BERT encoder (bert_onnx), weights from model.safetensors;
- minilm_encoder/validation.json: sample sentences tokenized, in perf_analyzer's input-data
  format: the tuner's accuracy guard and int8 calibration run the encoder on real token ids and
  masks (random integers make no attention mask);
- minilm_pooling/1/model.onnx: masked mean pooling over the tokens, then L2 normalization, as
  1_Pooling/config.json and sentence-transformers' Normalize module do.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builders.bert_onnx import bert_encoder_onnx
from builders.minilm_source import DEFAULT_CACHE, model_folder
from builders.onnx_model import make_model

Writer = Callable[[Path, bytes], None]


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def tokenizer_json(source: Path) -> bytes:
    """tokenizer.json truncating at the sentence-transformers max_seq_length, without padding."""
    tokenizer = _read_json(source / "tokenizer.json")
    max_length = int(_read_json(source / "sentence_bert_config.json")["max_seq_length"])
    tokenizer["truncation"] = {
        "direction": "Right",
        "max_length": max_length,
        "strategy": "LongestFirst",
        "stride": 0,
    }
    tokenizer["padding"] = None
    return json.dumps(tokenizer, ensure_ascii=False).encode("utf-8")


def encoder_onnx(source: Path) -> onnx.ModelProto:
    from safetensors.numpy import load_file

    weights = load_file(str(source / "model.safetensors"))
    # A checkpoint saved from BertForX prefixes its names with "bert."; this one does not.
    weights = {k.removeprefix("bert."): v for k, v in weights.items()}
    return bert_encoder_onnx(weights, _read_json(source / "config.json"))


def pooling_onnx(hidden_size: int) -> onnx.ModelProto:
    """last_hidden_state [B, S, H] and attention_mask [B, S] -> EMBEDDING [B, H]:
    sum(h * m) / max(sum(m), 1e-9), then divided by max(L2 norm, 1e-12)."""
    one = numpy_helper.from_array(np.array([1], np.int64), "axis1")
    last = numpy_helper.from_array(np.array([-1], np.int64), "axis_last")
    min_count = numpy_helper.from_array(np.array(1e-9, np.float32), "min_count")
    min_norm = numpy_helper.from_array(np.array(1e-12, np.float32), "min_norm")
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "axis_last"], ["mask3"]),
        helper.make_node("Mul", ["last_hidden_state", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "axis1"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "axis1"], ["count"], keepdims=0),
        helper.make_node("Max", ["count", "min_count"], ["count_clamped"]),
        helper.make_node("Div", ["summed", "count_clamped"], ["mean"]),
        # ReduceL2 takes its axes as an attribute until opset 18 (ReduceSum as an input).
        helper.make_node("ReduceL2", ["mean"], ["norm"], axes=[-1], keepdims=1),
        helper.make_node("Max", ["norm", "min_norm"], ["norm_clamped"]),
        helper.make_node("Div", ["mean", "norm_clamped"], ["EMBEDDING"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mean_pooling_l2",
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden_size]
            ),
            helper.make_tensor_value_info(
                "attention_mask", TensorProto.INT64, ["batch", "sequence"]
            ),
        ],
        [helper.make_tensor_value_info("EMBEDDING", TensorProto.FLOAT, ["batch", hidden_size])],
        initializer=[one, last, min_count, min_norm],
    )
    return make_model(graph)


def _save_onnx(model: onnx.ModelProto, path: Path, write: Writer) -> None:
    onnx.checker.check_model(model)
    write(path, model.SerializeToString())


def build_tokenizer(
    model_dir: Path, force: bool, write: Writer, cache: Path = DEFAULT_CACHE
) -> list[Path]:
    path = model_dir / "1" / "tokenizer.json"
    if path.exists() and not force:
        return []
    write(path, tokenizer_json(model_folder(cache)))
    return [path]


# Short and long, plain and odd: the encoder's example data (validation.json).
SAMPLE_SENTENCES = (
    "A man is playing a guitar.",
    "The new movie is awesome!",
    "The cat sits outside on the warm stone wall.",
    "How do I reset my password?",
    "Quarterly revenue grew by 12 percent, beating the analysts' forecasts.",
    "Ein Hund rennt durch den Park.",
    "Le chat dort sur le canapé.",
    "Batch sizes, queue delays and instance counts trade latency for throughput.",
    "ok",
    "Please deliver the parcel to the back door between 9am and 5pm.",
    "She sells sea shells by the sea shore.",
    "Error 503: the service is temporarily unavailable, try again later.",
    "What is the capital of Australia?",
    "Two dogs are fighting over a tennis ball in the garden.",
    "The quick brown fox jumps over the lazy dog.",
    "Transformers encode every token with attention over the whole sentence.",
)
SAMPLE_LENGTH = 32  # the tokenizer model's shortest padded length


def encoder_validation_json(source: Path) -> bytes:
    """SAMPLE_SENTENCES through the model's tokenizer, each padded to SAMPLE_LENGTH."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(tokenizer_json(source).decode("utf-8"))
    tokenizer.enable_truncation(SAMPLE_LENGTH)
    tokenizer.enable_padding(length=SAMPLE_LENGTH)
    data = []
    for encoding in tokenizer.encode_batch(list(SAMPLE_SENTENCES)):
        data.append(
            {
                "input_ids": {"content": list(encoding.ids), "shape": [SAMPLE_LENGTH]},
                "attention_mask": {
                    "content": list(encoding.attention_mask),
                    "shape": [SAMPLE_LENGTH],
                },
            }
        )
    return (json.dumps({"data": data}, separators=(",", ":")) + "\n").encode()


def build_encoder(
    model_dir: Path, force: bool, write: Writer, cache: Path = DEFAULT_CACHE
) -> list[Path]:
    path = model_dir / "1" / "model.onnx"
    examples = model_dir / "validation.json"
    if path.exists() and examples.exists() and not force:
        return []
    source = model_folder(cache)
    _save_onnx(encoder_onnx(source), path, write)
    write(examples, encoder_validation_json(source))
    return [path, examples]


def build_pooling(model_dir: Path, force: bool, write: Writer) -> list[Path]:
    path = model_dir / "1" / "model.onnx"
    if path.exists() and not force:
        return []
    # The hidden size is the encoder's (config.json); fixed here so the pooling model, which is
    # committed, builds without the download.
    _save_onnx(pooling_onnx(384), path, write)
    return [path]
