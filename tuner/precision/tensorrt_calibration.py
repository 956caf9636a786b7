"""An INT8 calibration table for TensorRT, made from the validation data on the CPU.

TensorRT's implicit INT8 needs a dynamic range per tensor. onnxruntime's TensorRT provider reads
them from a table named by `trt_int8_calibration_table_name` in its engine cache folder: a
FlatBuffers `TrtTable` of (ONNX tensor name, range) pairs. The ranges come from running the FP32
model on the calibration inputs with every intermediate tensor made an output (onnxruntime's
MinMax calibrator) and keeping, per tensor, the largest magnitude seen: TensorRT's INT8 is
symmetric, so the range is max(|min|, |max|). Nothing here needs a GPU.

Where the table goes: `table_location()` inside the model's folder, which the config names as
a relative `trt_engine_cache_path` (the server takes it from the model's folder), so a
repository carries its table and a written config works where the repository is copied.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import flatbuffers
import numpy as np
from onnxruntime.quantization import CalibrationMethod, create_calibrator
from onnxruntime.quantization.CalTableFlatBuffers import KeyValue, TrtTable

from tuner.candidate import TRT_TABLE_FOLDER, TRT_TABLE_NAME
from tuner.precision.builders import Feed, FeedReader
from tuner.precision.errors import PrecisionError

TABLE_METHOD = "TensorRT INT8, per-tensor ranges calibrated on the validation inputs (MinMax)"


def tensor_ranges(model: Path, calibration: Sequence[Feed]) -> dict[str, float]:
    """Per tensor of `model` (inputs, intermediates, outputs), the largest magnitude it took
    over `calibration` (onnxruntime feeds)."""
    if not calibration:
        raise PrecisionError("a TensorRT INT8 calibration table needs inputs; none were given")
    with tempfile.TemporaryDirectory(prefix="trt-calibration-") as scratch:
        calibrator = create_calibrator(
            model,
            augmented_model_path=str(Path(scratch) / "augmented.onnx"),
            calibrate_method=CalibrationMethod.MinMax,
            providers=["CPUExecutionProvider"],
        )
        calibrator.collect_data(FeedReader(calibration))
        computed = calibrator.compute_data()
    ranges: dict[str, float] = {}
    for name, data in computed.items():
        low, high = (float(np.max(np.abs(np.asarray(v)))) for v in data.range_value)
        ranges[name] = max(low, high)
    return ranges


def write_table(ranges: Mapping[str, float], target: Path) -> None:
    """`ranges` as the TrtTable onnxruntime's TensorRT provider reads."""
    builder = flatbuffers.Builder(1024)
    entries = []
    for name in sorted(ranges):
        key = builder.CreateString(name)
        value = builder.CreateString(repr(float(ranges[name])))
        KeyValue.KeyValueStart(builder)
        KeyValue.KeyValueAddKey(builder, key)
        KeyValue.KeyValueAddValue(builder, value)
        entries.append(KeyValue.KeyValueEnd(builder))
    TrtTable.TrtTableStartDictVector(builder, len(entries))
    for entry in reversed(entries):  # a FlatBuffers vector is built back to front
        builder.PrependUOffsetTRelative(entry)
    table = builder.EndVector()
    TrtTable.TrtTableStart(builder)
    TrtTable.TrtTableAddDict(builder, table)
    builder.Finish(TrtTable.TrtTableEnd(builder))
    target.write_bytes(builder.Output())


def read_table(path: Path) -> dict[str, float]:
    """The ranges of a table `write_table` wrote (to check one)."""
    table = TrtTable.TrtTable.GetRootAsTrtTable(path.read_bytes(), 0)
    entries = (table.Dict(i) for i in range(table.DictLength()))
    return {e.Key().decode(): float(e.Value()) for e in entries}


def table_location() -> str:
    """Where a served model's table is, relative to its folder."""
    return f"{TRT_TABLE_FOLDER}/{TRT_TABLE_NAME}"


def build_calibration_table(source: Path, target: Path, calibration: Sequence[Feed]) -> None:
    """The table for `source` calibrated on `calibration`, written to `target`."""
    write_table(tensor_ranges(source, calibration), target)
