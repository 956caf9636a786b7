"""Request inputs from the model's description and perf_analyzer's data flags.

`build_input_sets` turns `--input-data` (random | zero | JSON files | a directory), `--shape`,
`-b`, `--string-length` and `--string-data` into the tensors of each distinct request, in the
model's input order. Every tensor is checked against the model here, so a bad flag or data file
fails before any load is sent, with a message naming the tensor.

Random data is generated once from a seeded generator and reused for every request, as
perf_analyzer does. perf_analyzer fills a raw byte buffer with `rand()`; typed values are used
here instead (integers in [0, 100), floats in [0, 1), random booleans) so that floats are never
NaN or infinite and small-range integers stay valid as indices or token ids.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from analyzer.datatypes import numpy_dtype
from analyzer.errors import AnalyzerError
from analyzer.input_files import (
    Sample,
    read_data_directory,
    read_json_data,
    read_json_streams,
)
from analyzer.load.options import LoadOptions, ModelInfo, TensorInfo
from analyzer.shapes import check_shape, item_dims

RANDOM_INT_HIGH = 100  # random integers are drawn from [0, RANDOM_INT_HIGH)
_STRING_ALPHABET = np.frombuffer((string.ascii_letters + string.digits).encode(), dtype=np.uint8)


@dataclass(frozen=True, slots=True)
class InputTensor:
    """One input of one request: `data.shape == shape` (batch dim included when the model
    batches); BYTES data is an object array of `bytes`."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray


InputSet = list[InputTensor]


def build_input_sets(model: ModelInfo, options: LoadOptions) -> list[InputSet]:
    """The inputs of each distinct request; the load cycles through them in order."""
    batch_size = check_batch_size(model, options.batch_size)
    item_shapes = resolve_item_shapes(model, options.shapes)
    samples = _read_samples(model, options, item_shapes)
    if not samples:
        raise AnalyzerError("the input data holds no data entries")
    batching = model.max_batch_size > 0
    if not batching:
        return [_single(model, sample) for sample in samples]
    # Request k stacks entries k*b .. k*b+b-1 (cyclically), as perf_analyzer batches JSON
    # data; after count/gcd(count, b) requests the pattern repeats.
    count = len(samples)
    distinct = count // math.gcd(count, batch_size)
    return [
        _stacked(model, [samples[(k * batch_size + j) % count] for j in range(batch_size)])
        for k in range(distinct)
    ]


def build_input_streams(model: ModelInfo, options: LoadOptions) -> list[list[InputSet]]:
    """A sequence model's data streams: the inputs of each step of each stream. Random or
    zero data is one stream of one step; JSON files give their streams (see
    `read_json_streams`), a directory one stream of one step. With -b above 1 a request
    repeats its step's data in every batch row."""
    batch_size = check_batch_size(model, options.batch_size)
    item_shapes = resolve_item_shapes(model, options.shapes)
    sources = options.input_data or ["random"]
    streams: list[list[Sample]] = []
    if any(Path(source).is_file() for source in sources if source not in ("random", "zero")):
        for source in sources:
            path = Path(source)
            if not path.is_file():
                raise AnalyzerError(
                    f"--input-data '{source}': a sequence model's data files must all be JSON files"
                )
            streams.extend(read_json_streams(path, model, item_shapes))
    else:
        streams = [[sample] for sample in _read_samples(model, options, item_shapes)]
    if not streams or not all(streams):
        raise AnalyzerError("the input data holds no data entries")
    if model.max_batch_size == 0:
        return [[_single(model, sample) for sample in stream] for stream in streams]
    return [[_stacked(model, [sample] * batch_size) for sample in stream] for stream in streams]


def check_batch_size(model: ModelInfo, batch_size: int) -> int:
    """`-b`, checked: at least 1, at most the model's max_batch_size, 1 for a model that does
    not batch; AnalyzerError otherwise."""
    if batch_size < 1:
        raise AnalyzerError(f"-b (batch size) must be at least 1, got {batch_size}")
    if model.max_batch_size == 0 and batch_size > 1:
        raise AnalyzerError(
            f"model '{model.name}' does not support batching (max_batch_size 0),"
            f" so -b must be 1, got {batch_size}"
        )
    if model.max_batch_size > 0 and batch_size > model.max_batch_size:
        raise AnalyzerError(
            f"-b {batch_size} exceeds the max_batch_size {model.max_batch_size}"
            f" of model '{model.name}'"
        )
    return batch_size


def resolve_item_shapes(
    model: ModelInfo, shapes: dict[str, list[int]]
) -> dict[str, tuple[int, ...] | None]:
    """Each input's per-item shape with `--shape` applied; None while a dim stays variable
    (JSON data may still give the shape per entry)."""
    names = {tensor.name for tensor in model.inputs}
    for name in shapes:
        if name not in names:
            raise AnalyzerError(
                f"--shape names '{name}', which is not an input of model '{model.name}'"
                f" (inputs: {', '.join(sorted(names))})"
            )
    resolved: dict[str, tuple[int, ...] | None] = {}
    for tensor in model.inputs:
        dims = item_dims(model, tensor)
        given = shapes.get(tensor.name)
        if given is not None:
            resolved[tensor.name] = check_shape(tensor.name, dims, given, "--shape")
        else:
            resolved[tensor.name] = tuple(dims) if all(d >= 0 for d in dims) else None
    return resolved


def _read_samples(
    model: ModelInfo, options: LoadOptions, item_shapes: dict[str, tuple[int, ...] | None]
) -> list[Sample]:
    sources = options.input_data or ["random"]
    if sources in (["random"], ["zero"]):
        shapes = {name: _require_shape(model, name, shape) for name, shape in item_shapes.items()}
        return [_generated_sample(model, options, shapes, zero=sources == ["zero"])]
    samples: list[Sample] = []
    for source in sources:
        if source in ("random", "zero"):
            raise AnalyzerError(
                f"--input-data {source} cannot be combined with data files ({', '.join(sources)})"
            )
        path = Path(source)
        if path.is_dir():
            shapes = {n: _require_shape(model, n, s) for n, s in item_shapes.items()}
            samples.append(read_data_directory(path, model, shapes))
        elif path.is_file():
            samples.extend(read_json_data(path, model, item_shapes))
        else:
            raise AnalyzerError(
                f"--input-data '{source}' is neither random, zero, a JSON file nor a directory"
            )
    return samples


def _require_shape(model: ModelInfo, name: str, shape: tuple[int, ...] | None) -> tuple[int, ...]:
    if shape is None:
        tensor = next(t for t in model.inputs if t.name == name)
        raise AnalyzerError(
            f"input '{name}' has a variable shape {item_dims(model, tensor)}: give its shape"
            f" with --shape {name}:<dims> (batch dim excluded)"
        )
    return shape


def _generated_sample(
    model: ModelInfo, options: LoadOptions, shapes: dict[str, tuple[int, ...]], zero: bool
) -> Sample:
    rng = np.random.default_rng(options.seed)
    sample: Sample = {}
    for tensor in model.inputs:
        if _is_shape_tensor(model, tensor.name):
            raise AnalyzerError(
                f"input '{tensor.name}' is a shape tensor: its values cannot be generated,"
                " give them with --input-data <file.json>"
            )
        shape = shapes[tensor.name]
        if tensor.datatype == "BYTES":
            sample[tensor.name] = _string_tensor(rng, shape, options, zero)
        else:
            sample[tensor.name] = _fixed_tensor(rng, tensor, shape, zero)
    return sample


def _fixed_tensor(
    rng: np.random.Generator, tensor: TensorInfo, shape: tuple[int, ...], zero: bool
) -> np.ndarray:
    dtype = numpy_dtype(tensor.datatype, tensor.name)
    if zero:
        return np.zeros(shape, dtype=dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, size=shape).astype(dtype)
    if dtype.kind == "f":
        return rng.random(size=shape, dtype=np.float64).astype(dtype)
    return rng.integers(0, RANDOM_INT_HIGH, size=shape).astype(dtype)


def _string_tensor(
    rng: np.random.Generator, shape: tuple[int, ...], options: LoadOptions, zero: bool
) -> np.ndarray:
    count = math.prod(shape)
    if options.string_data is not None:
        values = [options.string_data.encode()] * count
    elif zero:
        values = [b""] * count
    else:
        if options.string_length < 0:
            raise AnalyzerError(f"--string-length must be >= 0, got {options.string_length}")
        letters = rng.choice(_STRING_ALPHABET, size=(count, options.string_length))
        values = [row.tobytes() for row in letters]
    array = np.empty(count, dtype=object)
    array[:] = values
    return array.reshape(shape)


def _is_shape_tensor(model: ModelInfo, name: str) -> bool:
    for entry in model.config.get("input", []):
        if entry.get("name") == name:
            return bool(entry.get("is_shape_tensor", False))
    return False


def _single(model: ModelInfo, sample: Sample) -> InputSet:
    return [
        InputTensor(t.name, t.datatype, sample[t.name].shape, sample[t.name])
        for t in model.inputs
        if t.name in sample
    ]


def _stacked(model: ModelInfo, samples: list[Sample]) -> InputSet:
    tensors: InputSet = []
    for tensor in model.inputs:
        present = [s[tensor.name] for s in samples if tensor.name in s]
        if not present:
            continue  # an optional input no entry gives
        if len(present) != len(samples):
            raise AnalyzerError(
                f"optional input '{tensor.name}' is given by some data entries and not others,"
                " so they cannot be batched together"
            )
        shapes = {p.shape for p in present}
        if len(shapes) > 1:
            raise AnalyzerError(
                f"cannot batch data entries with different shapes for input '{tensor.name}'"
                f" ({', '.join(str(list(s)) for s in sorted(shapes))})"
            )
        data = np.stack(present)
        tensors.append(InputTensor(tensor.name, tensor.datatype, data.shape, data))
    return tensors
