"""Completing a config's inputs or outputs from what a model says of itself (an ONNX graph, a
TensorRT engine, a python model's auto_complete_config), as Triton's backends do.

A tensor the config leaves blank gets the model's data type and dims; one it declares keeps
them, and, where the backend checks, a declaration the model contradicts is refused naming the
tensor. An empty list takes every tensor of the model; a declared list is only filled in (a
config may list a subset of the outputs on purpose).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError


@dataclass(frozen=True, slots=True)
class FoundTensor:
    """A tensor as the model gives it: dims without the batch dimension, -1 where variable."""

    name: str
    data_type: int  # mc.DataType; TYPE_INVALID when the model does not say
    dims: tuple[int, ...]


def complete_tensors(
    declared: Any,
    found: Sequence[FoundTensor],
    *,
    kind: str,
    where: str,
    origin: str,
    refuse_conflicts: bool,
) -> None:
    """Fill `declared` (a config's repeated input or output) from `found`.

    `kind` ("input" / "output"), `where` (the model or config file) and `origin` ("in the
    engine", "from auto_complete_config") name the conflict in a refusal."""
    add_all = len(declared) == 0
    by_name = {t.name: t for t in declared}
    for tensor in found:
        entry = by_name.get(tensor.name)
        if entry is None:
            if not add_all:
                continue
            entry = declared.add(name=tensor.name)
            by_name[tensor.name] = entry
        if entry.data_type == mc.TYPE_INVALID:
            entry.data_type = tensor.data_type
        elif refuse_conflicts and tensor.data_type not in (mc.TYPE_INVALID, entry.data_type):
            raise ServeError.invalid(
                f"{where}: {kind} '{tensor.name}' has data_type "
                f"{mc.DataType.Name(entry.data_type)} in the config but "
                f"{mc.DataType.Name(tensor.data_type)} {origin}"
            )
        if entry.HasField("reshape"):
            continue
        if not entry.dims:
            entry.dims.extend(tensor.dims)
        elif refuse_conflicts and not _dims_fit(list(entry.dims), list(tensor.dims)):
            raise ServeError.invalid(
                f"{where}: {kind} '{tensor.name}' has dims {list(entry.dims)} in the config "
                f"but {list(tensor.dims)} {origin}"
            )


def _dims_fit(declared: list[int], model: list[int]) -> bool:
    """Whether the config's dims are ones the model takes (-1 on either side is any size)."""
    return len(declared) == len(model) and all(
        d == m or -1 in (d, m) for d, m in zip(declared, model, strict=True)
    )
