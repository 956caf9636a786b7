"""A BERT encoder as an ONNX graph, written node by node from its weights (no torch).

The graph is the Hugging Face `BertModel` forward pass without the pooler, for one segment
(token_type_ids all 0):

    embeddings = LayerNorm(word[input_ids] + position[0..S) + token_type[0])
    per layer:  a = LayerNorm(x + Dense(SelfAttention(x, mask)))
                x = LayerNorm(a + Dense(GELU(Dense(a))))

Inputs `input_ids` and `attention_mask` (INT64 [batch, sequence]); output `last_hidden_state`
(FP32 [batch, sequence, hidden]). Masked keys get MASKED_SCORE added to their attention scores,
so a padded position contributes nothing to the unpadded ones: padding a text to any length
leaves its tokens' states unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from builders.onnx_model import make_model

# exp(-10000) is 0 in float32 and float16 alike. transformers adds the float32 minimum instead,
# which a float16 variant of the graph turns into -inf, and 0 * -inf (unmasked keys) into NaN.
MASKED_SCORE = -10000.0


@dataclass(frozen=True)
class BertShape:
    """The parts of a transformers BertConfig (config.json) the graph depends on."""

    hidden_size: int
    num_attention_heads: int
    num_hidden_layers: int
    intermediate_size: int
    layer_norm_eps: float
    max_position_embeddings: int

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> BertShape:
        if config.get("model_type") != "bert":
            raise ValueError(f"config.json: model_type {config.get('model_type')!r} is not 'bert'")
        if config.get("hidden_act") != "gelu":
            raise ValueError(f"config.json: hidden_act {config.get('hidden_act')!r} is not 'gelu'")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("config.json: only absolute position embeddings are supported")
        shape = cls(
            hidden_size=int(config["hidden_size"]),
            num_attention_heads=int(config["num_attention_heads"]),
            num_hidden_layers=int(config["num_hidden_layers"]),
            intermediate_size=int(config["intermediate_size"]),
            layer_norm_eps=float(config["layer_norm_eps"]),
            max_position_embeddings=int(config["max_position_embeddings"]),
        )
        if shape.hidden_size % shape.num_attention_heads:
            raise ValueError("config.json: hidden_size is not a multiple of num_attention_heads")
        return shape

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads


class _Graph:
    """Collects nodes and initializers; every node's output is named after the node."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        self.weights = weights
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def weight(self, key: str, transpose: bool = False) -> str:
        try:
            array = self.weights[key]
        except KeyError:
            raise ValueError(f"model.safetensors has no tensor {key!r}") from None
        array = np.ascontiguousarray(array.T if transpose else array, dtype=np.float32)
        return self.const(key + (".T" if transpose else ""), array)

    def op(self, op_type: str, inputs: list[str], name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def dense(self, x: str, prefix: str) -> str:
        product = self.op("MatMul", [x, self.weight(f"{prefix}.weight", transpose=True)], prefix)
        return self.op("Add", [product, self.weight(f"{prefix}.bias")], f"{prefix}.add_bias")

    def layer_norm(self, x: str, prefix: str, eps: float) -> str:
        scale, bias = self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")
        return self.op("LayerNormalization", [x, scale, bias], prefix, axis=-1, epsilon=eps)


def _gelu(g: _Graph, x: str, name: str) -> str:
    """GELU in its exact (erf) form: 0.5 * x * (1 + erf(x / sqrt(2)))."""
    scaled = g.op("Div", [x, "sqrt2"], f"{name}.div")
    erf = g.op("Erf", [scaled], f"{name}.erf")
    one_plus = g.op("Add", [erf, "one"], f"{name}.add")
    half_x = g.op("Mul", [x, "half"], f"{name}.half")
    return g.op("Mul", [half_x, one_plus], name)


def _self_attention(g: _Graph, x: str, mask: str, prefix: str, shape: BertShape) -> str:
    heads, size = shape.num_attention_heads, shape.head_size
    split = g.const(f"{prefix}.split_heads", np.array([0, 0, heads, size], np.int64))

    def project(which: str, perm: list[int]) -> str:
        y = g.dense(x, f"{prefix}.{which}")
        y = g.op("Reshape", [y, split], f"{prefix}.{which}.reshape")
        return g.op("Transpose", [y], f"{prefix}.{which}.transpose", perm=perm)

    query = project("query", [0, 2, 1, 3])  # [B, H, S, D]
    key = project("key", [0, 2, 3, 1])  # [B, H, D, S]
    value = project("value", [0, 2, 1, 3])  # [B, H, S, D]
    scores = g.op("MatMul", [query, key], f"{prefix}.scores")
    scores = g.op("Div", [scores, "sqrt_head_size"], f"{prefix}.scaled")
    scores = g.op("Add", [scores, mask], f"{prefix}.masked")
    probs = g.op("Softmax", [scores], f"{prefix}.softmax", axis=-1)
    context = g.op("MatMul", [probs, value], f"{prefix}.context")
    context = g.op("Transpose", [context], f"{prefix}.context.transpose", perm=[0, 2, 1, 3])
    merge = g.const(f"{prefix}.merge_heads", np.array([0, 0, shape.hidden_size], np.int64))
    return g.op("Reshape", [context, merge], f"{prefix}.context.reshape")


def _layer(g: _Graph, x: str, mask: str, index: int, shape: BertShape) -> str:
    p = f"encoder.layer.{index}"
    eps = shape.layer_norm_eps
    context = _self_attention(g, x, mask, f"{p}.attention.self", shape)
    attended = g.dense(context, f"{p}.attention.output.dense")
    attended = g.op("Add", [attended, x], f"{p}.attention.output.residual")
    attended = g.layer_norm(attended, f"{p}.attention.output.LayerNorm", eps)
    hidden = _gelu(g, g.dense(attended, f"{p}.intermediate.dense"), f"{p}.intermediate.gelu")
    out = g.op("Add", [g.dense(hidden, f"{p}.output.dense"), attended], f"{p}.output.residual")
    return g.layer_norm(out, f"{p}.output.LayerNorm", eps)


def _additive_mask(g: _Graph) -> str:
    """attention_mask [B, S] (1 = token, 0 = padding) -> [B, 1, 1, S]: 0 or MASKED_SCORE."""
    mask = g.op("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    mask = g.op("Unsqueeze", [mask, g.const("mask.axes", np.array([1, 2], np.int64))], "mask.4d")
    inverted = g.op("Sub", ["one", mask], "mask.inverted")
    masked = g.const("mask.score", np.array(MASKED_SCORE, np.float32))
    return g.op("Mul", [inverted, masked], "mask.additive")


def _embeddings(g: _Graph, shape: BertShape) -> str:
    words = g.op("Gather", [g.weight("embeddings.word_embeddings.weight"), "input_ids"], "words")
    # Positions 0..S-1: the first S rows of the position table, with token type 0's row added.
    positions = g.weights["embeddings.position_embeddings.weight"].astype(np.float32)
    token_type = g.weights["embeddings.token_type_embeddings.weight"][0].astype(np.float32)
    table = g.const("embeddings.position_and_type", positions + token_type)
    ids_shape = g.op("Shape", ["input_ids"], "ids.shape")
    length = g.op(
        "Slice",
        [
            ids_shape,
            g.const("one_i", np.array([1], np.int64)),
            g.const("two_i", np.array([2], np.int64)),
        ],
        "sequence_length",
    )
    zero = g.const("zero_i", np.array([0], np.int64))
    rows = g.op("Slice", [table, zero, length, zero], "positions")
    summed = g.op("Add", [words, rows], "embeddings.sum")
    return g.layer_norm(summed, "embeddings.LayerNorm", shape.layer_norm_eps)


def bert_encoder_onnx(weights: dict[str, np.ndarray], config: dict[str, Any]) -> onnx.ModelProto:
    """The encoder graph for `weights` (a BertModel's state dict as numpy arrays, the names
    without a `bert.` prefix) and `config` (its config.json)."""
    shape = BertShape.from_config(config)
    g = _Graph(weights)
    g.const("one", np.array(1.0, np.float32))
    g.const("half", np.array(0.5, np.float32))
    g.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    g.const("sqrt_head_size", np.array(np.sqrt(shape.head_size), np.float32))
    mask = _additive_mask(g)
    x = _embeddings(g, shape)
    for index in range(shape.num_hidden_layers):
        x = _layer(g, x, mask, index, shape)
    g.nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))
    token_shape: list[int | str] = ["batch", "sequence"]
    graph = helper.make_graph(
        g.nodes,
        "bert_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, token_shape),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, token_shape),
        ],
        [
            helper.make_tensor_value_info(
                "last_hidden_state", TensorProto.FLOAT, [*token_shape, shape.hidden_size]
            )
        ],
        initializer=g.initializers,
    )
    return make_model(graph)
