"""Shape rules shared by the input builders: per-item dims and checking a given shape."""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.errors import AnalyzerError
from analyzer.load.options import ModelInfo, TensorInfo


def item_dims(model: ModelInfo, tensor: TensorInfo) -> list[int]:
    """The tensor's shape without the batch dim (the shape `--shape` and JSON data use)."""
    return list(tensor.shape[1:]) if model.max_batch_size > 0 else list(tensor.shape)


def check_shape(
    name: str, model_dims: Sequence[int], given: Sequence[int], source: str
) -> tuple[int, ...]:
    """`given` if it fits the model's dims (-1 matches any size), else an AnalyzerError."""
    fits = len(given) == len(model_dims) and all(
        m in (-1, g) for m, g in zip(model_dims, given, strict=True)
    )
    if not fits or any(g < 0 for g in given):
        raise AnalyzerError(
            f"{source} gives input '{name}' the shape {list(given)}, which does not fit the"
            f" model's shape {list(model_dims)} (batch dim excluded)"
        )
    return tuple(given)
