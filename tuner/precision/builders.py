"""Building one reduced-precision model file from an FP32 ONNX model.

Each builder writes `target` (a scratch path: the cache publishes it) and may leave other files
next to it. Settings, as measured on ResNet-18 and a MiniLM encoder: quant_pre_process first;
static is QDQ, per-channel, activations QUInt8, weights QInt8; dynamic is per-channel without
reduce_range (per-tensor and reduce_range lose accuracy on transformer encoders); fp16 keeps FP32
inputs and outputs so the served config does not change.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.transformers.float16 import convert_float_to_float16

from tuner.precision.errors import PrecisionError
from tuner.precision.preprocess import preprocess_for_quantization

Feed = dict[str, np.ndarray]

STATIC_METHOD = "int8 static QDQ, per-channel, U8 activations / S8 weights, MinMax calibration"
DYNAMIC_METHOD = "int8 dynamic, per-channel S8 weights"
FP16_METHOD = "float16 weights and compute, FP32 inputs/outputs"


class FeedReader(CalibrationDataReader):
    """Calibration inputs as onnxruntime's calibrators read them."""

    def __init__(self, feeds: Sequence[Feed]) -> None:
        self._feeds = iter(feeds)

    def get_next(self) -> Feed | None:
        return next(self._feeds, None)


def _preprocess(source: Path, target: Path) -> Path:
    prepared = target.with_name(f"{target.stem}.pre.onnx")
    preprocess_for_quantization(source, prepared)
    return prepared


def build_int8_static(source: Path, target: Path, calibration: Sequence[Feed]) -> None:
    """Static QDQ quantization calibrated on `calibration` (onnxruntime feeds)."""
    if not calibration:
        raise PrecisionError("static int8 quantization needs calibration inputs; none were given")
    quantize_static(
        str(_preprocess(source, target)),
        str(target),
        FeedReader(calibration),
        quant_format=QuantFormat.QDQ,
        per_channel=True,
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
    )


def build_int8_dynamic(source: Path, target: Path) -> None:
    """Dynamic quantization: int8 weights per channel, activation ranges computed per run."""
    quantize_dynamic(
        str(_preprocess(source, target)),
        str(target),
        per_channel=True,
        reduce_range=False,
        weight_type=QuantType.QInt8,
    )


def build_fp16(source: Path, target: Path) -> None:
    """float16 conversion with FP32 inputs and outputs kept.

    onnxconverter_common's converter can leave a Cast typed float16 feeding a float input
    (seen on a MiniLM export); onnxruntime's own converter is used, and the result is loaded
    once here so that such a model fails at build time, not when served.
    """
    converted = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    onnx.save(converted, str(target))
    try:
        ort.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises several unrelated exception types
        raise PrecisionError(f"the float16 model does not load in onnxruntime: {exc}") from None
