"""Readers for perf_analyzer's `--input-data` files: JSON data files and raw-data directories.

JSON (perf_analyzer's format): `{"data": [entry, ...], "validation_data": [...]?}` where an entry
maps input names to a flat list of values, `{"content": [...], "shape": [...]}` or
`{"b64": "..."}` (raw little-endian bytes; BYTES as 4-byte-length-prefixed elements). An entry
may also be a list of such objects (the steps of a sequence); its steps are taken in order.
Shapes exclude the batch dim. `validation_data` must align with `data` and is not checked here.

Directory: one file per input named after the input; raw little-endian bytes for fixed-size
types, one string per line for BYTES.

Both return samples: one request item each (no batch dim), keyed by input name.
"""

from __future__ import annotations

import base64
import binascii
import math
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from analyzer.datatypes import numpy_dtype
from analyzer.errors import AnalyzerError
from analyzer.load.options import ModelInfo, TensorInfo
from analyzer.shapes import check_shape, item_dims
from protocol.errors import ProtocolError
from protocol.tensors import split_bytes_elements

Sample = dict[str, np.ndarray]

_KIND_NAMES = {"b": "booleans", "i": "integers", "u": "integers", "f": "floating-point numbers"}
_ACCEPTED_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


def read_json_data(
    path: Path, model: ModelInfo, item_shapes: dict[str, tuple[int, ...] | None]
) -> list[Sample]:
    """The samples of one JSON data file, in file order."""
    return [sample for stream in read_json_streams(path, model, item_shapes) for sample in stream]


def read_json_streams(
    path: Path, model: ModelInfo, item_shapes: dict[str, tuple[int, ...] | None]
) -> list[list[Sample]]:
    """The data streams of one JSON data file, as a sequence model's load uses them: each
    entry that is a list is a stream of its own (its steps in order); entries that are
    objects make one stream together, in file order."""
    try:
        document = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise AnalyzerError(f"cannot read the input data file {path}: {exc.strerror}") from None
    except orjson.JSONDecodeError as exc:
        raise AnalyzerError(f"the input data file {path} is not valid JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise AnalyzerError(f"the input data file {path} needs a top-level 'data' list")
    entries: list[Any] = document["data"]
    validation = document.get("validation_data")
    if validation is not None and (
        not isinstance(validation, list) or len(validation) != len(entries)
    ):
        raise AnalyzerError(
            f"in {path}, 'validation_data' must be a list as long as 'data' ({len(entries)})"
        )
    if entries and len({isinstance(e, list) for e in entries}) > 1:
        raise AnalyzerError(
            f"in {path}, 'data' mixes objects and lists (sequences of steps); use one form"
        )
    reader = _EntryReader(path, model, item_shapes)
    streams: list[list[Sample]] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, list):
            if not streams:
                streams.append([])
            streams[0].append(reader.read(entry, f"{path}, data entry {index}"))
            continue
        if not entry:
            raise AnalyzerError(f"in {path}, data entry {index} is an empty list of steps")
        steps = [
            reader.read(
                value, f"{path}, data entry {index}" + (f" step {step}" if len(entry) > 1 else "")
            )
            for step, value in enumerate(entry)
        ]
        streams.append(steps)
    return streams


def read_data_directory(path: Path, model: ModelInfo, shapes: dict[str, tuple[int, ...]]) -> Sample:
    """The one sample a raw-data directory holds."""
    known = {t.name for t in model.inputs} | {t.name for t in model.outputs}
    for child in path.iterdir():
        if child.name not in known:
            raise AnalyzerError(
                f"the input data directory {path} holds '{child.name}', which is not an input"
                f" or output of model '{model.name}'"
            )
    sample: Sample = {}
    for tensor in model.inputs:
        file = path / tensor.name
        if not file.is_file():
            if _is_optional(model, tensor.name):
                continue
            raise AnalyzerError(
                f"the input data directory {path} has no file for input '{tensor.name}'"
            )
        shape = shapes[tensor.name]
        count = math.prod(shape)
        if tensor.datatype == "BYTES":
            lines = file.read_bytes().splitlines()
            if len(lines) != count:
                raise AnalyzerError(
                    f"input '{tensor.name}' expects {count} strings per batch item, {file} has"
                    f" {len(lines)} lines"
                )
            sample[tensor.name] = _object_array(lines, shape)
        else:
            dtype = numpy_dtype(tensor.datatype, tensor.name)
            raw = file.read_bytes()
            if len(raw) != count * dtype.itemsize:
                raise AnalyzerError(
                    f"input '{tensor.name}' expects {count * dtype.itemsize} bytes per batch item"
                    f" ({count} x {tensor.datatype}), {file} has {len(raw)}"
                )
            sample[tensor.name] = np.frombuffer(raw, dtype=dtype).reshape(shape)
    return sample


class _EntryReader:
    def __init__(
        self, path: Path, model: ModelInfo, item_shapes: dict[str, tuple[int, ...] | None]
    ) -> None:
        self._path = path
        self._model = model
        self._item_shapes = item_shapes
        self._names = {t.name for t in model.inputs}

    def read(self, entry: Any, where: str) -> Sample:
        if not isinstance(entry, dict):
            raise AnalyzerError(f"{where}: an entry must map input names to values")
        for key in entry:
            if key not in self._names and key != "model":
                raise AnalyzerError(
                    f"{where}: '{key}' is not an input of model '{self._model.name}'"
                    f" (inputs: {', '.join(sorted(self._names))})"
                )
        sample: Sample = {}
        for tensor in self._model.inputs:
            if tensor.name in entry:
                sample[tensor.name] = self._tensor(tensor, entry[tensor.name], where)
            elif not _is_optional(self._model, tensor.name):
                raise AnalyzerError(f"{where}: no value for input '{tensor.name}'")
        return sample

    def _tensor(self, tensor: TensorInfo, value: Any, where: str) -> np.ndarray:
        shape = self._item_shapes[tensor.name]
        content: Any = value
        if isinstance(value, dict):
            if "shape" in value:
                given = value["shape"]
                if not isinstance(given, list) or not all(type(d) is int for d in given):
                    raise AnalyzerError(f"{where}: the shape of '{tensor.name}' must be integers")
                dims = item_dims(self._model, tensor)
                shape = check_shape(tensor.name, dims, given, where)
            if "b64" in value:
                content = value
            elif "content" in value:
                content = value["content"]
            else:
                raise AnalyzerError(
                    f"{where}: the value of '{tensor.name}' needs 'content' or 'b64'"
                )
        if shape is None:
            raise AnalyzerError(
                f"{where}: input '{tensor.name}' has a variable shape"
                f" {item_dims(self._model, tensor)}: give it with --shape or a 'shape' field"
            )
        if isinstance(content, dict) and "b64" in content:
            return _from_b64(tensor, content["b64"], shape, where)
        if isinstance(content, list):
            return _from_list(tensor, content, shape, where)
        raise AnalyzerError(
            f"{where}: the value of '{tensor.name}' must be a list, a 'content' list or 'b64'"
        )


def _from_list(
    tensor: TensorInfo, values: list[Any], shape: tuple[int, ...], where: str
) -> np.ndarray:
    flat = _flatten(values)
    count = math.prod(shape)
    if len(flat) != count:
        raise AnalyzerError(
            f"input '{tensor.name}' expects {count} elements per batch item, the JSON data has"
            f" {len(flat)} ({where})"
        )
    if tensor.datatype == "BYTES":
        if not all(isinstance(v, str) for v in flat):
            raise AnalyzerError(
                f"input '{tensor.name}' is BYTES: its JSON values must be strings ({where})"
            )
        return _object_array([v.encode() for v in flat], shape)
    dtype = numpy_dtype(tensor.datatype, tensor.name)
    inferred = np.asarray(flat) if flat else np.zeros(0, dtype=dtype)
    if inferred.dtype.kind not in _ACCEPTED_KINDS[dtype.kind]:
        held = _KIND_NAMES.get(inferred.dtype.kind, "non-numeric values")
        raise AnalyzerError(
            f"input '{tensor.name}' is {tensor.datatype} but the JSON data holds {held} ({where})"
        )
    if dtype.kind in "iu" and inferred.size:
        info = np.iinfo(dtype)
        low, high = int(inferred.min()), int(inferred.max())
        if low < info.min or high > info.max:
            raise AnalyzerError(
                f"input '{tensor.name}' is {tensor.datatype}: the JSON value"
                f" {low if low < info.min else high} is out of range ({where})"
            )
    return inferred.astype(dtype).reshape(shape)


def _from_b64(tensor: TensorInfo, encoded: Any, shape: tuple[int, ...], where: str) -> np.ndarray:
    if not isinstance(encoded, str):
        raise AnalyzerError(f"{where}: the 'b64' value of '{tensor.name}' must be a string")
    try:
        raw = base64.b64decode(encoded, validate=True)
    except binascii.Error as exc:
        raise AnalyzerError(
            f"{where}: the 'b64' value of '{tensor.name}' is not base64: {exc}"
        ) from None
    count = math.prod(shape)
    if tensor.datatype == "BYTES":
        try:
            elements = split_bytes_elements(raw, f"{where}: the b64 BYTES data of '{tensor.name}'")
        except ProtocolError as exc:
            raise AnalyzerError(str(exc)) from None
        if len(elements) != count:
            raise AnalyzerError(
                f"input '{tensor.name}' expects {count} elements per batch item, the b64 data has"
                f" {len(elements)} ({where})"
            )
        return _object_array(elements, shape)
    dtype = numpy_dtype(tensor.datatype, tensor.name)
    if len(raw) != count * dtype.itemsize:
        raise AnalyzerError(
            f"input '{tensor.name}' expects {count * dtype.itemsize} bytes per batch item"
            f" ({count} x {tensor.datatype}), the b64 data has {len(raw)} ({where})"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def _flatten(values: list[Any]) -> list[Any]:
    if not any(isinstance(v, list) for v in values):
        return values
    flat: list[Any] = []
    for value in values:
        if isinstance(value, list):
            flat.extend(_flatten(value))
        else:
            flat.append(value)
    return flat


def _object_array(values: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array.reshape(shape)


def _is_optional(model: ModelInfo, name: str) -> bool:
    for entry in model.config.get("input", []):
        if entry.get("name") == name:
            return bool(entry.get("optional", False))
    return False
