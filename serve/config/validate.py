"""Triton's rules for a model configuration, checked after auto-complete.

Every error names the config source and the field, e.g.
`model_repository/digits/config.pbtxt: dynamic_batching.preferred_batch_size[1]: 128 exceeds
max_batch_size 64`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tritonclient.grpc import model_config_pb2 as mc

from serve.config.ensemble import check_ensemble_config
from serve.config.sequence_batching import check_sequence_batching
from serve.errors import ServeError

# Data types the engine can carry on the wire (BF16 has no KServe v2 wire type here).
SUPPORTED_DATA_TYPES = {
    mc.TYPE_BOOL,
    mc.TYPE_UINT8,
    mc.TYPE_UINT16,
    mc.TYPE_UINT32,
    mc.TYPE_UINT64,
    mc.TYPE_INT8,
    mc.TYPE_INT16,
    mc.TYPE_INT32,
    mc.TYPE_INT64,
    mc.TYPE_FP16,
    mc.TYPE_FP32,
    mc.TYPE_FP64,
    mc.TYPE_STRING,
}

_SUPPORTED_SCHEDULERS = {"ensemble_scheduling", "dynamic_batching", "sequence_batching"}


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, field: str, message: str) -> ServeError:
        return ServeError.invalid(f"{self.source}: {field}: {message}")


def validate_config(config: mc.ModelConfig, source: str, model_dir_name: str) -> None:
    """Raise ServeError(INVALID_ARGUMENT) naming `source` and the field on the first violation."""
    check = _Checker(source)
    if config.name and config.name != model_dir_name:
        raise check.fail(
            "name", f"'{config.name}' does not match the model directory '{model_dir_name}'"
        )
    if config.max_batch_size < 0:
        raise check.fail("max_batch_size", f"must be >= 0, got {config.max_batch_size}")
    _check_version_policy(config, check)
    _check_tensors(config.input, "input", config.max_batch_size, check)
    _check_tensors(config.output, "output", config.max_batch_size, check)
    check_ensemble_config(config, check.fail)
    _check_scheduling(config, check)
    _check_response_cache(config, check)
    _check_instance_groups(config, check)
    _check_warmup(config, check)


def _check_response_cache(config: mc.ModelConfig, check: _Checker) -> None:
    """Triton refuses the response cache where a request's answer depends on more than its
    inputs (a sequence's state) or is not one response (decoupled), in these words."""
    if not config.response_cache.enable:
        return
    name = config.name
    if config.HasField("sequence_batching"):
        raise check.fail(
            "response_cache",
            f"Response Cache does not currently support model {name} with sequence batching "
            "scheduler. Please disable the response cache.",
        )
    if config.model_transaction_policy.decoupled:
        raise check.fail(
            "response_cache",
            f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache.",
        )


def _check_version_policy(config: mc.ModelConfig, check: _Checker) -> None:
    policy = config.version_policy
    if policy.HasField("latest") and policy.latest.num_versions < 1:
        raise check.fail("version_policy.latest.num_versions", "must be >= 1")
    if policy.HasField("specific"):
        if not policy.specific.versions:
            raise check.fail("version_policy.specific.versions", "must list at least one version")
        for i, version in enumerate(policy.specific.versions):
            if version < 0:
                raise check.fail(f"version_policy.specific.versions[{i}]", "must be >= 0")


def _check_tensors(
    tensors: Sequence[mc.ModelInput] | Sequence[mc.ModelOutput],
    kind: str,
    max_batch_size: int,
    check: _Checker,
) -> None:
    seen: set[str] = set()
    for i, tensor in enumerate(tensors):
        where = f"{kind}[{i}]"
        if not tensor.name:
            raise check.fail(f"{where}.name", "must not be empty")
        where = f"{kind} '{tensor.name}'"
        if tensor.name in seen:
            raise check.fail(where, "is declared twice")
        seen.add(tensor.name)
        if tensor.data_type == mc.TYPE_INVALID:
            raise check.fail(f"{where}.data_type", "must be set")
        if tensor.data_type not in SUPPORTED_DATA_TYPES:
            name = mc.DataType.Name(tensor.data_type)
            raise check.fail(f"{where}.data_type", f"{name} is not supported")
        if not tensor.dims and max_batch_size == 0:
            raise check.fail(f"{where}.dims", "must list at least one dimension")
        _check_dims(tensor.dims, f"{where}.dims", check)
        if tensor.HasField("reshape"):
            _check_reshape(tensor.dims, tensor.reshape.shape, f"{where}.reshape", check)


def _check_dims(dims: Iterable[int], where: str, check: _Checker) -> None:
    for j, dim in enumerate(dims):
        if dim == 0 or dim < -1:
            raise check.fail(f"{where}[{j}]", f"must be -1 (variable) or > 0, got {dim}")


def _check_reshape(dims: Sequence[int], shape: Sequence[int], where: str, check: _Checker) -> None:
    _check_dims(shape, f"{where}.shape", check)
    if -1 in dims or -1 in shape:
        if list(dims).count(-1) != list(shape).count(-1):
            raise check.fail(where, "must have as many variable (-1) dims as 'dims'")
        return
    if math.prod(dims) != math.prod(shape):
        raise check.fail(
            where, f"shape {list(shape)} has a different element count than dims {list(dims)}"
        )


def _check_scheduling(config: mc.ModelConfig, check: _Checker) -> None:
    choice = config.WhichOneof("scheduling_choice")
    if choice is not None and choice not in _SUPPORTED_SCHEDULERS:
        raise check.fail(choice, "is not supported by this server yet")
    if choice == "sequence_batching":
        check_sequence_batching(config, check.fail)
    if choice != "dynamic_batching":
        return
    batching = config.dynamic_batching
    if config.max_batch_size == 0:
        raise check.fail("dynamic_batching", "requires max_batch_size > 0")
    for i, size in enumerate(batching.preferred_batch_size):
        where = f"dynamic_batching.preferred_batch_size[{i}]"
        if size <= 0:
            raise check.fail(where, f"must be > 0, got {size}")
        if size > config.max_batch_size:
            raise check.fail(where, f"{size} exceeds max_batch_size {config.max_batch_size}")
    levels = batching.priority_levels
    if levels > 0:
        if not 1 <= batching.default_priority_level <= levels:
            raise check.fail(
                "dynamic_batching.default_priority_level",
                f"must be between 1 and priority_levels ({levels})",
            )
        for level in batching.priority_queue_policy:
            if not 1 <= level <= levels:
                raise check.fail(
                    f"dynamic_batching.priority_queue_policy[{level}]",
                    f"priority level must be between 1 and {levels}",
                )
    elif batching.default_priority_level != 0:
        raise check.fail("dynamic_batching.default_priority_level", "needs priority_levels > 0")


def _check_instance_groups(config: mc.ModelConfig, check: _Checker) -> None:
    for i, group in enumerate(config.instance_group):
        where = f"instance_group[{i}]"
        if group.count < 0:
            raise check.fail(f"{where}.count", f"must be >= 0, got {group.count}")
        if group.kind == mc.ModelInstanceGroup.KIND_MODEL and group.gpus:
            raise check.fail(f"{where}.gpus", "is not allowed with KIND_MODEL")


def _check_warmup(config: mc.ModelConfig, check: _Checker) -> None:
    inputs = {tensor.name: tensor for tensor in config.input}
    for i, warmup in enumerate(config.model_warmup):
        where = f"model_warmup[{i}]"
        if config.max_batch_size > 0:
            if not 1 <= warmup.batch_size <= config.max_batch_size:
                raise check.fail(
                    f"{where}.batch_size",
                    f"must be between 1 and max_batch_size {config.max_batch_size}",
                )
        elif warmup.batch_size > 1:
            raise check.fail(f"{where}.batch_size", "must be 0 or 1 when max_batch_size is 0")
        for name, data in warmup.inputs.items():
            if name not in inputs:
                raise check.fail(f"{where}.inputs['{name}']", "is not an input of the model")
            if data.data_type == mc.TYPE_INVALID:
                raise check.fail(f"{where}.inputs['{name}'].data_type", "must be set")
            _check_dims(data.dims, f"{where}.inputs['{name}'].dims", check)
            if data.WhichOneof("input_data_type") is None:
                raise check.fail(
                    f"{where}.inputs['{name}']", "needs zero_data, random_data or input_data_file"
                )
        for name in inputs:
            if warmup.inputs and name not in warmup.inputs and not inputs[name].optional:
                raise check.fail(f"{where}.inputs", f"misses input '{name}'")
