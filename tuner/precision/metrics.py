"""Accuracy metrics for comparing a variant's outputs with the FP32 model's.

`choose_metric` picks one per output, in this order:

- not floating point (integer labels, counts, masks): max relative error;
- a name that suggests an embedding (`EMBEDDING_HINTS`): cosine similarity;
- one class axis of 2 or more (logits / probabilities, e.g. `[10]` or `[1, 1000]`):
  top-1 agreement, unless the FP32 model predicts the same class for every validation row
  (random weights or random inputs often do): agreement would then be 1 whatever the variant
  does, so cosine similarity is used instead;
- a single value per item (regression): max relative error;
- anything wider (sequence states, feature maps), where top-1 makes no sense: cosine.

Each score has a `drop` in the same direction for all metrics (0 is identical, larger is
worse): 1 - agreement, 1 - mean cosine, or the max relative error itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

EMBEDDING_HINTS = ("embed", "sentence", "pool", "hidden", "feature", "vector", "encod", "repr")
# Relative errors are taken against max(|reference|, this share of the output's peak magnitude),
# so that near-zero reference values do not turn rounding noise into huge ratios.
RELATIVE_ERROR_FLOOR = 0.01


class Metric(StrEnum):
    """The accuracy metric of an output; the values are the names the reports show."""

    TOP1 = "top1_agreement"
    COSINE = "cosine_similarity"
    MAX_RELATIVE_ERROR = "max_relative_error"


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """An output as the graph produces it: `dims` per item (no batch dim when batched)."""

    name: str
    is_float: bool
    dims: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Score:
    """One output's accuracy: the metric's value and its `drop` (0 identical, larger worse),
    compared with the accuracy limit."""

    metric: Metric
    value: float
    drop: float
    detail: str = ""  # extra words for the reason, e.g. the minimum cosine
    note: str = ""  # why this metric, when the usual one was set aside


def choose_metric(spec: OutputSpec, batched: bool, reference: np.ndarray | None = None) -> Metric:
    """The metric for an output (module docstring); `reference` enables the constant-class
    check."""
    if not spec.is_float:
        return Metric.MAX_RELATIVE_ERROR
    if any(hint in spec.name.lower() for hint in EMBEDDING_HINTS):
        return Metric.COSINE
    wide = _wide_dims(spec, batched)
    if len(wide) == 1 and wide[0] >= 2:
        if reference is not None and _single_class(reference, wide[0]):
            return Metric.COSINE
        return Metric.TOP1
    if not wide:
        return Metric.MAX_RELATIVE_ERROR
    return Metric.COSINE


def score(
    metric: Metric, spec: OutputSpec, batched: bool, reference: np.ndarray, candidate: np.ndarray
) -> Score:
    """Compare `candidate` with `reference`; both hold every validation row, rows first."""
    if reference.shape != candidate.shape:
        return Score(metric, math.nan, math.inf, f"shape {candidate.shape} != {reference.shape}")
    if _new_non_finite(reference, candidate):
        return Score(metric, math.nan, math.inf, "non-finite values where FP32 has none")
    if metric is Metric.TOP1:
        return top1_agreement(reference, candidate, _wide_dims(spec, batched)[0])
    if metric is Metric.COSINE:
        return cosine_similarity(reference, candidate)
    return max_relative_error(reference, candidate)


def top1_agreement(reference: np.ndarray, candidate: np.ndarray, classes: int) -> Score:
    """Share of predictions (the argmax of each run of `classes` values: the class axis last)
    that match FP32's."""
    ref = reference.reshape(-1, classes).argmax(axis=1)
    cand = candidate.reshape(-1, classes).argmax(axis=1)
    value = float(np.mean(ref == cand))
    return Score(Metric.TOP1, value, 1.0 - value)


def cosine_similarity(reference: np.ndarray, candidate: np.ndarray) -> Score:
    """Mean cosine similarity per row (two all-zero rows count as 1, one as 0); the detail
    gives the minimum."""
    rows = reference.shape[0] if reference.ndim else 1
    ref = reference.reshape(rows, -1).astype(np.float64)
    cand = candidate.reshape(rows, -1).astype(np.float64)
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1)
    dots = np.sum(ref * cand, axis=1)
    both_zero = ~ref.any(axis=1) & ~cand.any(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cosines = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 0.0)
    cosines = np.where(both_zero, 1.0, cosines)
    mean = float(np.mean(cosines))
    return Score(Metric.COSINE, mean, 1.0 - mean, f"min {format_number(float(np.min(cosines)))}")


def max_relative_error(reference: np.ndarray, candidate: np.ndarray) -> Score:
    """The largest |candidate - reference| relative to |reference|, floored at
    `RELATIVE_ERROR_FLOOR` of the output's peak; where FP32 is not finite, ignored."""
    ref = reference.astype(np.float64)
    cand = candidate.astype(np.float64)
    finite = np.isfinite(ref)
    peak = float(np.max(np.abs(ref[finite]))) if finite.any() else 0.0
    floor = max(RELATIVE_ERROR_FLOOR * peak, np.finfo(np.float64).tiny)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        errors = np.abs(cand - ref) / np.maximum(np.abs(ref), floor)
    errors = np.where(finite, errors, 0.0)
    value = float(np.max(errors)) if errors.size else 0.0
    return Score(Metric.MAX_RELATIVE_ERROR, value, value)


def _wide_dims(spec: OutputSpec, batched: bool) -> list[int]:
    # Without batching a leading dim of a 2-D-or-more output is usually the model's own batch.
    dims = spec.dims if batched or len(spec.dims) < 2 else spec.dims[1:]
    return [d for d in dims if d != 1]


def _single_class(reference: np.ndarray, classes: int) -> bool:
    if reference.size % classes:
        return False
    top = reference.reshape(-1, classes).argmax(axis=1)
    return top.size > 1 and bool(np.all(top == top[0]))


def _new_non_finite(reference: np.ndarray, candidate: np.ndarray) -> bool:
    if reference.dtype.kind != "f" and candidate.dtype.kind != "f":
        return False
    ref_finite = np.isfinite(reference.astype(np.float64))
    cand_finite = np.isfinite(candidate.astype(np.float64))
    return bool(np.any(ref_finite & ~cand_finite))


def format_number(value: float) -> str:
    """Four decimals, or two significant digits in exponent form for tiny values."""
    if value == 0 or not math.isfinite(value) or abs(value) >= 1e-3:
        return f"{value:.4f}"
    return f"{value:.2e}"
