"""Triton's classification extension: an output returned as its top classes.

A requested output whose parameters hold `"classification": k` comes back, instead of the
tensor, as a BYTES tensor of the k highest-valued classes of each batch item: shape
[batch, min(k, classes)] for a batching model, [min(k, classes)] otherwise. An item's classes
are its output's non-batch elements, flattened; ties go to the lower index. Each element is
`<value>:<index>`, or `<value>:<index>:<label>` when the output's `label_filename` gives a
non-empty label for that index (the labels file lies in the model folder, one label per line,
the line number being the index). Values are written as Triton writes them (C++
`std::to_string`): floats with six decimals, integers in full.

A transport only copies the parameter into `RequestedOutput.parameters` (HTTP: the JSON
number; gRPC: the int64_param). `TensorChecker` checks the count and the output's datatype
before the request is queued and builds the tensor with the response, so the HTTP codec sees
an ordinary BYTES output. `topk_classification` itself is pure (array, count, labels -> array).

Where Triton leaves the outcome to an unstable sort, ties here go to the lower index and NaN
ranks last.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from protocol.datatypes import WIRE_TO_NUMPY
from serve.errors import ServeError

CLASSIFICATION = "classification"

# Triton refuses to classify more elements than this per batch item.
MAX_CLASSES = 1_000_000

# Wire datatypes that can be classified: the numeric ones. Triton refuses FP16 as it refuses
# BOOL; here FP16 is ranked like the other floats.
CLASSIFIABLE = frozenset(WIRE_TO_NUMPY) - {"BOOL", "BYTES"}

Labels = Sequence[bytes]


def check_classification(value: object, datatype: str, output: str, model: str) -> int:
    """The class count a requested output asks for; ServeError (invalid) naming the output
    when it is not an integer > 0 or the output's datatype is not numeric."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ServeError.invalid(
            f"output '{output}' of model '{model}': parameter '{CLASSIFICATION}' must be an "
            f"integer > 0, got {value!r}"
        )
    if datatype not in CLASSIFIABLE:
        raise ServeError.invalid(
            f"output '{output}' of model '{model}' cannot be returned as a classification: "
            f"its datatype {datatype} is not numeric"
        )
    return int(value)


def topk_classification(
    values: np.ndarray,
    class_count: int,
    batched: bool,
    labels: Labels | None = None,
    output: str = "output",
) -> np.ndarray:
    """The top `class_count` classes of each item of `values` as an object array of bytes.

    `batched`: the first dimension is the batch (result [batch, n]); otherwise the whole
    tensor is one item (result [n]); n = min(class_count, elements per item). `labels[i]` is
    the label of class i; missing or empty labels are left out. `output` names the tensor in
    errors.
    """
    if isinstance(class_count, bool) or class_count <= 0:
        raise ServeError.invalid(
            f"output '{output}': the class count must be an integer > 0, got {class_count!r}"
        )
    if values.dtype.kind not in "iuf":
        raise ServeError.invalid(
            f"output '{output}' cannot be returned as a classification: dtype {values.dtype}"
            " is not numeric"
        )
    if batched and values.ndim > 0:
        rows = values.reshape(values.shape[0], math.prod(values.shape[1:]))
    else:
        rows = values.reshape(1, values.size)
    classes = rows.shape[1]
    if classes > MAX_CLASSES:
        raise ServeError.invalid(
            f"output '{output}' has {classes:,} elements per item, more than the "
            f"{MAX_CLASSES:,} a classification may rank"
        )
    count = min(class_count, classes)
    order = _descending(rows)[:, :count]
    top = np.take_along_axis(rows, order, axis=1).tolist()
    as_text = _float_text if values.dtype.kind == "f" else str
    known = labels or ()
    result = np.empty((rows.shape[0], count), dtype=np.object_)
    for r, (row_values, row_indexes) in enumerate(zip(top, order.tolist(), strict=True)):
        for c, (value, index) in enumerate(zip(row_values, row_indexes, strict=True)):
            text = f"{as_text(value)}:{index}".encode()
            label = known[index] if index < len(known) else b""
            result[r, c] = text + b":" + label if label else text
    return result if batched and values.ndim > 0 else result.reshape(count)


def _float_text(value: float) -> str:
    return f"{value:f}"


def _descending(rows: np.ndarray) -> np.ndarray:
    """Per row, the column indexes by value, highest first; ties lower index first."""
    if rows.dtype.kind == "f":
        # A stable ascending sort of the negated values; NaN sorts last either way.
        return np.argsort(-rows, axis=1, kind="stable")
    # Integers may not negate (unsigned, the minimum): sort the mirrored row ascending, stably,
    # and read the result backwards, which puts equal values in ascending index order.
    mirrored = np.argsort(rows[:, ::-1], axis=1, kind="stable")[:, ::-1]
    return rows.shape[1] - 1 - mirrored


def read_labels(config: mc.ModelConfig, model_dir: Path) -> dict[str, tuple[bytes, ...]]:
    """Each output's labels from its `label_filename` (relative to the model folder).

    ServeError when a file name leaves the folder or a file cannot be read: the model does not
    load, as in Triton.
    """
    labels: dict[str, tuple[bytes, ...]] = {}
    for tensor in config.output:
        filename = tensor.label_filename
        if not filename:
            continue
        where = f"label_filename '{filename}' of output '{tensor.name}' in model '{config.name}'"
        relative = Path(filename)
        # Checked by name, not by resolving links: the tuner serves a folder of symlinks.
        if relative.is_absolute() or ".." in relative.parts:
            raise ServeError.invalid(f"{where} must name a file inside the model folder")
        try:
            data = (model_dir / relative).read_bytes()
        except OSError as exc:
            raise ServeError.unavailable(f"{where} cannot be read: {exc.strerror}") from None
        labels[tensor.name] = parse_labels(data)
    return labels


def parse_labels(data: bytes) -> tuple[bytes, ...]:
    """One label per line; a final newline ends the last label, a CR before LF is dropped."""
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return tuple(line.removesuffix(b"\r") for line in lines)
