"""Validation inputs for the accuracy guard and for int8 calibration.

Sources, first found wins: the perf_analyzer-format JSON file the user gives
(`--validation-data`), the model's example data (`<model_dir>/validation.json`), or random
inputs generated from the config's input specs (seeded; floats in [0, 1), integers in
[0, 100) as the analyzer generates them, booleans; a variable dim is given
`RANDOM_VARIABLE_DIM`). `ValidationSet.source` says which one was used, for the report.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from analyzer.api import RANDOM_INT_HIGH, AnalyzerError, ModelInfo, TensorInfo, read_json_data
from protocol.datatypes import config_to_wire, numpy_dtype
from serve.api import config_to_json
from tuner.precision.errors import PrecisionError

Feed = dict[str, np.ndarray]
SourceKind = Literal["file", "example", "random"]

EXAMPLE_DATA_FILENAME = "validation.json"
RANDOM_VARIABLE_DIM = 8
DEFAULT_SEED = 0


@dataclass(frozen=True, slots=True)
class ValidationSet:
    """Validation samples, one request item each, in the shape the model's graph takes.

    For a batching model (`batched`, max_batch_size > 0) a sample has no batch dim and
    `feeds()` stacks samples into batches; otherwise each sample is a complete feed.
    """

    samples: list[Feed]
    batched: bool
    kind: SourceKind
    source: str  # plain words for the report: which data, how many samples

    def __len__(self) -> int:
        return len(self.samples)

    def head(self, count: int) -> ValidationSet:
        """The first `count` samples (int8 calibration uses a subset)."""
        if count >= len(self.samples):
            return self
        return ValidationSet(self.samples[:count], self.batched, self.kind, self.source)

    def feeds(self, batch_size: int = 16) -> list[Feed]:
        """onnxruntime feeds covering every sample once, in order."""
        if not self.batched:
            return list(self.samples)
        feeds = []
        for start in range(0, len(self.samples), batch_size):
            chunk = self.samples[start : start + batch_size]
            feeds.append({name: np.stack([s[name] for s in chunk]) for name in chunk[0]})
        return feeds

    def digest(self) -> str:
        """SHA-256 of the samples (names, dtypes, shapes and bytes), the calibration key."""
        digest = hashlib.sha256()
        for sample in self.samples:
            for name in sorted(sample):
                array = np.ascontiguousarray(sample[name])
                digest.update(f"{name}|{array.dtype.str}|{array.shape}|".encode())
                digest.update(array.tobytes() if array.dtype != object else repr(array).encode())
        return digest.hexdigest()


def load_validation_inputs(
    model_dir: Path,
    config: mc.ModelConfig,
    validation_file: Path | None,
    count: int,
    seed: int = DEFAULT_SEED,
) -> ValidationSet:
    """Up to `count` validation samples (the first ones of a file; `count` random ones)."""
    if count < 1:
        raise PrecisionError(f"the validation sample count must be at least 1, got {count}")
    batched = config.max_batch_size > 0
    example = Path(model_dir) / EXAMPLE_DATA_FILENAME
    if validation_file is not None:
        samples = _read_file(Path(validation_file), config)[:count]
        kind: SourceKind = "file"
        source = f"validation data {validation_file} ({len(samples)} samples)"
    elif example.is_file():
        samples = _read_file(example, config)[:count]
        kind = "example"
        source = f"the model's example data {example} ({len(samples)} samples)"
    else:
        samples = [_random_sample(config, rng) for rng in _generators(seed, count)]
        kind = "random"
        source = (
            f"random inputs ({count} samples, seed {seed}): no --validation-data was given and"
            f" {example} does not exist"
        )
    reshaped = [_apply_reshape(sample, config) for sample in samples]
    return ValidationSet(reshaped, batched, kind, source)


def _read_file(path: Path, config: mc.ModelConfig) -> list[Feed]:
    if not path.is_file():
        raise PrecisionError(f"the validation data file {path} does not exist")
    model = _model_info(config)
    item_shapes = {
        t.name: tuple(t.dims) if all(d >= 0 for d in t.dims) else None for t in config.input
    }
    try:
        samples = read_json_data(path, model, item_shapes)
    except AnalyzerError as exc:
        raise PrecisionError(str(exc)) from None
    if not samples:
        raise PrecisionError(f"the validation data file {path} holds no data entries")
    return samples


def _model_info(config: mc.ModelConfig) -> ModelInfo:
    """The analyzer's view of the model, so its perf_analyzer JSON reader can be reused."""
    batch = [-1] if config.max_batch_size > 0 else []

    def tensors(specs: list[mc.ModelInput] | list[mc.ModelOutput]) -> list[TensorInfo]:
        return [
            TensorInfo(t.name, config_to_wire(mc.DataType.Name(t.data_type)), batch + list(t.dims))
            for t in specs
        ]

    return ModelInfo(
        name=config.name,
        version="",
        max_batch_size=config.max_batch_size,
        inputs=tensors(list(config.input)),
        outputs=tensors(list(config.output)),
        config=config_to_json(config),
    )


def _generators(seed: int, count: int) -> list[np.random.Generator]:
    # One stream per sample, so sample k is the same whatever `count` is.
    return [np.random.default_rng([seed, index]) for index in range(count)]


def _random_sample(config: mc.ModelConfig, rng: np.random.Generator) -> Feed:
    sample: Feed = {}
    for tensor in config.input:
        wire = config_to_wire(mc.DataType.Name(tensor.data_type))
        if wire == "BYTES":
            raise PrecisionError(
                f"input '{tensor.name}' is a string tensor: random values cannot stand in for"
                " it; give real inputs with --validation-data"
            )
        shape = tuple(RANDOM_VARIABLE_DIM if d < 0 else d for d in tensor.dims)
        dtype = numpy_dtype(wire)
        if dtype.kind == "b":
            sample[tensor.name] = rng.integers(0, 2, size=shape).astype(dtype)
        elif dtype.kind == "f":
            sample[tensor.name] = rng.random(size=shape).astype(dtype)
        else:
            sample[tensor.name] = rng.integers(0, RANDOM_INT_HIGH, size=shape).astype(dtype)
    return sample


def _apply_reshape(sample: Feed, config: mc.ModelConfig) -> Feed:
    """Config `reshape` entries: the graph takes the reshaped tensor, as the server feeds it."""
    out = dict(sample)
    for tensor in config.input:
        if tensor.HasField("reshape") and tensor.name in out:
            out[tensor.name] = out[tensor.name].reshape(tuple(tensor.reshape.shape))
    return out
