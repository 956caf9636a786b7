"""Concatenating requests into one batch along the first dimension and splitting results."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from serve.inference import InferRequest


def batch_rows(request: InferRequest) -> int:
    """Rows a request contributes to a batch: the first dim of its inputs (all agree)."""
    for array in request.inputs.values():
        return int(array.shape[0]) if array.ndim else 1
    return 1


def concat_inputs(requests: Sequence[InferRequest]) -> dict[str, np.ndarray]:
    """One array per input, the requests' rows stacked in order."""
    if len(requests) == 1:
        return dict(requests[0].inputs)
    names = requests[0].inputs.keys()
    return {name: np.concatenate([r.inputs[name] for r in requests], axis=0) for name in names}


def split_outputs(
    outputs: dict[str, np.ndarray], rows: Sequence[int]
) -> list[dict[str, np.ndarray]]:
    """Cut each output back into per-request pieces of `rows` rows."""
    if len(rows) == 1:
        return [outputs]
    bounds = np.cumsum(rows)[:-1]
    pieces = {name: np.split(array, bounds, axis=0) for name, array in outputs.items()}
    return [{name: pieces[name][i] for name in outputs} for i in range(len(rows))]
