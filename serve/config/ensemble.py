"""Triton's rules for an ensemble (platform "ensemble", ensemble_scheduling).

Two stages: `check_ensemble_config` looks at the ensemble's own config (run with the other
config checks, before anything loads); `check_ensemble_steps` compares each step with its
composing model's config (run when the ensemble loads, after its composing models have).
Every error names the step (index and model) and the tensor at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError

ENSEMBLE_PLATFORM = "ensemble"

Fail = Callable[[str, str], ServeError]  # (field, message) -> the error to raise


def is_ensemble(config: mc.ModelConfig) -> bool:
    """Whether `config` is an ensemble's: its platform is "ensemble"."""
    return config.platform == ENSEMBLE_PLATFORM


def step_name(index: int, step: mc.ModelEnsembling.Step) -> str:
    """How errors name step `index` of an ensemble: its place in `ensemble_scheduling` and its
    model."""
    return f"ensemble_scheduling.step[{index}] (model '{step.model_name}')"


def composing_models(config: mc.ModelConfig) -> list[str]:
    """The distinct models the ensemble's steps call, in step order."""
    return list(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def check_ensemble_config(config: mc.ModelConfig, fail: Fail) -> None:
    """The ensemble's own rules; a non-ensemble must not carry ensemble_scheduling."""
    if not is_ensemble(config):
        if config.HasField("ensemble_scheduling"):
            raise fail("ensemble_scheduling", 'is only allowed with platform "ensemble"')
        return
    if config.backend:
        raise fail("backend", f"must be empty for an ensemble, got '{config.backend}'")
    if config.WhichOneof("scheduling_choice") != "ensemble_scheduling":
        raise fail("ensemble_scheduling", "must be set for an ensemble")
    for field in ("instance_group", "model_warmup"):
        if len(getattr(config, field)):
            raise fail(field, "is not allowed for an ensemble (its composing models have theirs)")
    steps = config.ensemble_scheduling.step
    if not steps:
        raise fail("ensemble_scheduling.step", "must list at least one step")
    for index, step in enumerate(steps):
        _check_step_fields(config, index, step, fail)
    _check_graph(config, fail)


def _check_step_fields(
    config: mc.ModelConfig, index: int, step: mc.ModelEnsembling.Step, fail: Fail
) -> None:
    where = f"ensemble_scheduling.step[{index}]"
    if not step.model_name:
        raise fail(f"{where}.model_name", "must not be empty")
    where = step_name(index, step)
    if step.model_name == config.name:
        raise fail(where, "an ensemble cannot call itself")
    if step.model_version < -1:
        raise fail(
            f"{where}.model_version", f"must be -1 (latest) or >= 0, got {step.model_version}"
        )
    if not step.input_map:
        raise fail(f"{where}.input_map", "must map at least one input")
    if not step.output_map:
        raise fail(f"{where}.output_map", "must map at least one output")


def _check_graph(config: mc.ModelConfig, fail: Fail) -> None:
    """Each tensor produced once, every step input connected, no cycle, every ensemble input
    used and every ensemble output produced."""
    steps = config.ensemble_scheduling.step
    inputs = {tensor.name for tensor in config.input}
    producer: dict[str, int] = {}
    for index, step in enumerate(steps):
        for key, tensor in step.output_map.items():
            where = f"{step_name(index, step)}.output_map['{key}']"
            if tensor in inputs:
                raise fail(where, f"writes ensemble tensor '{tensor}', an input of the ensemble")
            if tensor in producer:
                first = producer[tensor]
                raise fail(
                    where,
                    f"ensemble tensor '{tensor}' is already produced by "
                    f"{step_name(first, steps[first])}",
                )
            producer[tensor] = index
    used: set[str] = set()
    for index, step in enumerate(steps):
        for key, tensor in step.input_map.items():
            used.add(tensor)
            if tensor not in inputs and tensor not in producer:
                raise fail(
                    f"{step_name(index, step)}.input_map['{key}']",
                    f"ensemble tensor '{tensor}' is neither an ensemble input nor produced by a"
                    " step",
                )
    for name in sorted(inputs - used):
        raise fail(f"input '{name}'", "is not used by any step of the ensemble")
    for tensor in config.output:
        if tensor.name not in producer:
            raise fail(f"output '{tensor.name}'", "is not produced by any step of the ensemble")
    _check_acyclic(steps, producer, fail)


def _check_acyclic(
    steps: Sequence[mc.ModelEnsembling.Step], producer: Mapping[str, int], fail: Fail
) -> None:
    """Kahn's algorithm over steps; what is left over lies on (or after) a cycle."""
    needs = [{producer[t] for t in step.input_map.values() if t in producer} for step in steps]
    done: set[int] = set()
    progress = True
    while progress:
        progress = False
        for index, deps in enumerate(needs):
            if index not in done and deps <= done:
                done.add(index)
                progress = True
    if len(done) == len(steps):
        return
    stuck = min(set(range(len(steps))) - done)
    waits = sorted(
        tensor
        for tensor in steps[stuck].input_map.values()
        if tensor in producer and producer[tensor] not in done
    )
    raise fail(
        step_name(stuck, steps[stuck]),
        f"is part of a cycle: its input tensor '{waits[0]}' depends on its own outputs",
    )


# -- cross-model checks ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _End:
    """One end of an ensemble tensor's connection: its type and full shape (batch dim: -1)."""

    data_type: int
    shape: tuple[int, ...]
    where: str


def _full_shape(tensor: mc.ModelInput | mc.ModelOutput, batched: bool) -> tuple[int, ...]:
    dims = tuple(int(d) for d in tensor.dims)
    return (-1, *dims) if batched else dims


def _shapes_agree(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b, strict=True))


def _type_name(data_type: int) -> str:
    return mc.DataType.Name(data_type)


def check_ensemble_steps(
    config: mc.ModelConfig, composing: Sequence[mc.ModelConfig], fail: Fail
) -> None:
    """Each step against its composing model's config (`composing[i]` serves step i): map keys
    are that model's inputs and outputs, its required inputs are all mapped, it is not
    decoupled, batch sizes fit, and the data types and shapes on both ends of every ensemble
    tensor agree."""
    steps = config.ensemble_scheduling.step
    batched = config.max_batch_size > 0
    producers: dict[str, _End] = {
        t.name: _End(t.data_type, _full_shape(t, batched), f"ensemble input '{t.name}'")
        for t in config.input
    }
    consumers: list[tuple[str, _End]] = [
        (t.name, _End(t.data_type, _full_shape(t, batched), f"ensemble output '{t.name}'"))
        for t in config.output
    ]
    for index, (step, model) in enumerate(zip(steps, composing, strict=True)):
        where = step_name(index, step)
        if model.model_transaction_policy.decoupled:
            raise fail(where, "decoupled models cannot be ensemble steps on this server")
        if batched and model.max_batch_size < config.max_batch_size:
            raise fail(
                where,
                f"the ensemble's max_batch_size {config.max_batch_size} exceeds the model's "
                f"max_batch_size {model.max_batch_size}",
            )
        step_batched = model.max_batch_size > 0
        model_inputs = {t.name: t for t in model.input}
        model_outputs = {t.name: t for t in model.output}
        for key, tensor in step.input_map.items():
            if key not in model_inputs:
                known = ", ".join(sorted(model_inputs)) or "none"
                raise fail(
                    f"{where}.input_map['{key}']",
                    f"'{key}' is not an input of model '{step.model_name}' (inputs: {known})",
                )
            spec = model_inputs[key]
            end = _End(
                spec.data_type,
                _full_shape(spec, step_batched),
                f"input '{key}' of {where}",
            )
            consumers.append((tensor, end))
        for name, spec in model_inputs.items():
            if name not in step.input_map and not spec.optional:
                raise fail(
                    f"{where}.input_map",
                    f"does not map input '{name}' of model '{step.model_name}'",
                )
        for key, tensor in step.output_map.items():
            if key not in model_outputs:
                known = ", ".join(sorted(model_outputs)) or "none"
                raise fail(
                    f"{where}.output_map['{key}']",
                    f"'{key}' is not an output of model '{step.model_name}' (outputs: {known})",
                )
            spec = model_outputs[key]
            producers[tensor] = _End(
                spec.data_type, _full_shape(spec, step_batched), f"output '{key}' of {where}"
            )
    for tensor, consumer in consumers:
        producer = producers[tensor]
        if producer.data_type != consumer.data_type:
            raise fail(
                f"ensemble tensor '{tensor}'",
                f"{producer.where} is {_type_name(producer.data_type)} but {consumer.where} "
                f"expects {_type_name(consumer.data_type)}",
            )
        if not _shapes_agree(producer.shape, consumer.shape):
            raise fail(
                f"ensemble tensor '{tensor}'",
                f"{producer.where} has shape {list(producer.shape)} but {consumer.where} "
                f"expects {list(consumer.shape)}",
            )
