"""What an ONNX graph holds, and the int8 method that suits it.

The int8 rule (`choose_int8_method`), from the graph's op types, subgraphs included:

1. Any `Conv` / `ConvTranspose`: static quantization (QDQ, calibrated). Convolutional
   activations have ranges that a calibration set captures well, and static QDQ is what makes
   onnxruntime run the convolutions in int8 (ResNet-18: 3x here).
2. Otherwise any MatMul-family op (`MatMul`, `Attention`, `MultiHeadAttention`, `LSTM`, `GRU`,
   `EmbedLayerNormalization`): dynamic quantization. Transformer-like activations vary with the
   input (sequence length, tokens), so ranges are computed per run; weights are per-channel.
3. Otherwise any `Gemm` (a plain MLP): static, because onnxruntime's dynamic quantizer does not
   quantize Gemm.
4. Otherwise there is nothing int8 would speed up (e.g. `simple`'s Add/Sub): no int8 variant.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

import onnx

from tuner.precision.errors import PrecisionError

CONV_OPS = frozenset({"Conv", "ConvTranspose"})
MATMUL_OPS = frozenset(
    {"MatMul", "Attention", "MultiHeadAttention", "LSTM", "GRU", "EmbedLayerNormalization"}
)
GEMM_OPS = frozenset({"Gemm"})
_FLOAT_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.BFLOAT16,
    }
)


class Int8Method(StrEnum):
    """How an int8 variant is quantized: static (QDQ, calibrated) or dynamic (ranges per run)."""

    STATIC = "static"
    DYNAMIC = "dynamic"


@dataclass(frozen=True, slots=True)
class GraphSummary:
    """Op-type counts (subgraphs included) and whether the graph computes in floating point."""

    op_counts: Counter[str]
    has_float: bool

    def count(self, ops: frozenset[str]) -> int:
        return sum(self.op_counts[op] for op in ops)


def summarize(model: onnx.ModelProto) -> GraphSummary:
    """The summary of a loaded graph, subgraphs included."""
    counts: Counter[str] = Counter()
    has_float = False
    for graph in _graphs(model.graph):
        counts.update(node.op_type for node in graph.node)
        has_float = has_float or any(t.data_type in _FLOAT_TYPES for t in graph.initializer)
        has_float = has_float or any(
            v.type.tensor_type.elem_type in _FLOAT_TYPES for v in graph.input
        )
    return GraphSummary(counts, has_float)


def load_summary(path: str) -> GraphSummary:
    """The summary of a model file (external weights are not read)."""
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # onnx raises DecodeError, OSError, ...
        raise PrecisionError(f"{path}: not a readable ONNX model: {exc}") from None
    return summarize(model)


def choose_int8_method(summary: GraphSummary) -> Int8Method:
    """The int8 method for a graph (module docstring); PrecisionError when none applies."""
    if summary.count(CONV_OPS):
        return Int8Method.STATIC
    if summary.count(MATMUL_OPS):
        return Int8Method.DYNAMIC
    if summary.count(GEMM_OPS):
        return Int8Method.STATIC
    ops = ", ".join(sorted(summary.op_counts)) or "none"
    raise PrecisionError(
        f"the graph has no Conv, MatMul or Gemm (its ops: {ops}): int8 has nothing to speed up"
    )


def require_float(summary: GraphSummary, precision: str) -> None:
    """PrecisionError when the graph computes nothing in floating point: a `precision`
    variant would be the same model."""
    if not summary.has_float:
        raise PrecisionError(
            f"the graph computes no floating-point tensors: a {precision} variant would change"
            " nothing"
        )


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _graphs(sub)
