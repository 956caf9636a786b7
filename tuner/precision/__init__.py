"""Precision variants for the tuner: int8 / fp16 model files (cached) and the accuracy guard.

`prepare_variants` is what the tuner calls; the rest is exposed for reports and tests.
"""

from tuner.precision.accuracy import AccuracyCheck, check_accuracy, output_specs, run_outputs
from tuner.precision.cache import DEFAULT_CACHE_DIR, VariantCache, VariantKey, model_sha256
from tuner.precision.errors import PrecisionError
from tuner.precision.graph import GraphSummary, Int8Method, choose_int8_method, summarize
from tuner.precision.metrics import Metric, OutputSpec, choose_metric
from tuner.precision.tensorrt import tensorrt_available
from tuner.precision.validation import ValidationSet, load_validation_inputs
from tuner.precision.variants import (
    DEFAULT_VALIDATION_COUNT,
    PRECISIONS,
    PrecisionVariant,
    is_onnx_model,
    prepare_variants,
)

__all__ = [
    "DEFAULT_CACHE_DIR",
    "DEFAULT_VALIDATION_COUNT",
    "PRECISIONS",
    "AccuracyCheck",
    "GraphSummary",
    "Int8Method",
    "Metric",
    "OutputSpec",
    "PrecisionError",
    "PrecisionVariant",
    "ValidationSet",
    "VariantCache",
    "VariantKey",
    "check_accuracy",
    "choose_int8_method",
    "choose_metric",
    "is_onnx_model",
    "load_validation_inputs",
    "model_sha256",
    "output_specs",
    "prepare_variants",
    "run_outputs",
    "summarize",
    "tensorrt_available",
]
