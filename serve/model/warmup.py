"""model_warmup: sample requests run on every instance before the model reports ready."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from protocol.datatypes import WIRE_TO_NUMPY, config_to_wire
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.model.tensors import TensorChecker
from serve.scheduler.instance_worker import InstanceWorker


def _input_array(
    data: mc.ModelWarmup.Input, name: str, model_dir: Path, rng: np.random.Generator
) -> np.ndarray:
    wire = config_to_wire(mc.DataType.Name(data.data_type))
    dtype = WIRE_TO_NUMPY[wire]
    shape = tuple(data.dims)
    count = int(np.prod(shape)) if shape else 1
    source = data.WhichOneof("input_data_type")
    if source == "zero_data":
        if wire == "BYTES":
            return np.full(shape, b"", dtype=object)
        return np.zeros(shape, dtype=dtype)
    if source == "random_data":
        if wire == "BYTES":
            return np.full(shape, b"warmup", dtype=object)
        if wire == "BOOL":
            return rng.integers(0, 2, size=shape).astype(np.bool_)
        if dtype.kind in "iu":
            return rng.integers(0, 100, size=shape).astype(dtype)
        return rng.random(size=shape).astype(dtype)
    path = model_dir / "warmup" / data.input_data_file
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ServeError.unavailable(f"warmup input '{name}': cannot read {path}: {exc}") from None
    if wire == "BYTES":
        return np.full(shape, raw, dtype=object)
    needed = count * dtype.itemsize
    if len(raw) < needed:
        raise ServeError.unavailable(
            f"warmup input '{name}': {path} holds {len(raw)} bytes, {needed} needed"
        )
    return np.frombuffer(raw[:needed], dtype=dtype).reshape(shape)


def warmup_requests(config: mc.ModelConfig, model_dir: Path) -> list[tuple[str, InferRequest, int]]:
    """(warmup name, request, repeat count) for each model_warmup entry."""
    rng = np.random.default_rng(0)
    requests = []
    for warmup in config.model_warmup:
        inputs = {}
        datatypes = {}
        for name, data in warmup.inputs.items():
            array = _input_array(data, name, model_dir, rng)
            if config.max_batch_size > 0:
                array = np.stack([array] * max(warmup.batch_size, 1))
            inputs[name] = array
            datatypes[name] = config_to_wire(mc.DataType.Name(data.data_type))
        request = InferRequest(config.name, "", inputs, datatypes, id=f"warmup:{warmup.name}")
        requests.append((warmup.name, request, max(warmup.count, 1)))
    return requests


def run_warmup(config: mc.ModelConfig, model_dir: Path, workers: list[InstanceWorker]) -> None:
    """Run every warmup sample `count` times on every instance; raise on the first failure."""
    checker = TensorChecker(config, "warmup")
    for name, request, count in warmup_requests(config, model_dir):
        try:
            checker.check_request(request)  # applies reshapes as for a client's request
        except ServeError as exc:
            raise ServeError.unavailable(f"warmup '{name}' is invalid: {exc.message}") from None
        for worker in workers:
            for _ in range(count):
                result = worker.run_blocking([request])[0]
                if isinstance(result, ServeError):
                    raise ServeError.unavailable(
                        f"warmup '{name}' failed on {worker.name}: {result.message}"
                    )
