"""A candidate configuration: a few tuned values applied on top of the model's own config.

A `Candidate` holds only the tuned parameters (names below); everything else comes from the
base config. Precision variants are separate model files named `<stem>.<precision><ext>`
beside the original (`model.int8.onnx`), selected through `default_model_filename`; the
TensorRT precisions of onnxruntime (trt_fp16, trt_int8) are an execution-accelerator block
instead (no new file); the TensorRT engine precisions (plan_fp16, plan_int8) are an engine file
(`model.fp16.plan`) served by the tensorrt backend, so they switch the config's backend.

A pipeline's candidate (an ensemble's composing models tuned jointly) holds the same
parameters qualified by the model they belong to, "<model>.<parameter>"
(`"minilm_encoder.instance_count"`); `step_candidate` takes one model's part back out as a
plain candidate, `join_steps` makes a joint one from plain ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from google.protobuf import descriptor
from google.protobuf.message import Message
from tritonclient.grpc import model_config_pb2 as mc

from serve.api import default_model_filename
from tuner.precisions import (
    FILE_PRECISIONS,
    PLAN_PRECISIONS,
    PRECISIONS,
    TRT_PRECISIONS,
)

ParamValue = int | bool | str | None

MAX_BATCH_SIZE = "max_batch_size"
DYNAMIC_BATCHING = "dynamic_batching"
PREFERRED_BATCH_SIZE = "preferred_batch_size"
MAX_QUEUE_DELAY = "max_queue_delay_microseconds"
INSTANCE_COUNT = "instance_count"
INSTANCE_KIND = "instance_kind"
THREAD_COUNT = "intra_op_thread_count"
PRECISION = "precision"

# Parameter name -> short name in `Candidate.key`, in key order.
_SHORT = {
    MAX_BATCH_SIZE: "mbs",
    DYNAMIC_BATCHING: "db",
    PREFERRED_BATCH_SIZE: "pbs",
    MAX_QUEUE_DELAY: "delay",
    INSTANCE_COUNT: "inst",
    INSTANCE_KIND: "kind",
    THREAD_COUNT: "thr",
    PRECISION: "prec",
}
_ORDER = {name: i for i, name in enumerate(_SHORT)}

# trt_int8's calibration table, inside the model's folder (a relative engine cache path is the
# model folder's: the tuner places the table there, in its scratch copy and at write-back).
TRT_TABLE_FOLDER = "tensorrt"
TRT_TABLE_NAME = "calibration.flatbuffers"
PLAN_BACKEND, PLAN_PLATFORM, PLAN_EXTENSION = "tensorrt", "tensorrt_plan", "plan"
KINDS = {"KIND_CPU": mc.ModelInstanceGroup.KIND_CPU, "KIND_GPU": mc.ModelInstanceGroup.KIND_GPU}


class Candidate(Mapping[str, ParamValue]):
    """An immutable, hashable mapping of tuned parameter name -> value.

    Equal candidates have equal `key`s, e.g. "mbs=16,db=on,pbs=none,delay=500,inst=2,thr=1,
    prec=int8"; the key identifies a configuration within a study.
    """

    __slots__ = ("_items", "_key")

    def __init__(self, values: Mapping[str, ParamValue] | Iterable[tuple[str, ParamValue]] = ()):
        items = dict(values)
        unknown = sorted(name for name in items if split_name(name)[1] not in _SHORT)
        if unknown:
            raise ValueError(f"unknown tuning parameter(s): {', '.join(unknown)}")
        self._items = tuple(sorted(items.items(), key=lambda item: _sort_key(item[0])))
        self._key = _key_of(self._items)

    def __getitem__(self, name: str) -> ParamValue:
        for key, value in self._items:
            if key == name:
                return value
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return (key for key, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Candidate):
            return self._items == other._items
        return NotImplemented

    def __repr__(self) -> str:
        return f"Candidate({self.key})"

    @property
    def key(self) -> str:
        return self._key

    def replace(self, **changes: ParamValue) -> Candidate:
        return Candidate({**dict(self._items), **changes})

    def to_json(self) -> dict[str, Any]:
        return dict(self._items)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(data)


def split_name(name: str) -> tuple[str, str]:
    """ "minilm_encoder.instance_count" -> ("minilm_encoder", "instance_count"); a plain
    parameter name has the model "" (parameter names hold no dot; model names may)."""
    model, _, parameter = name.rpartition(".")
    return model, parameter


def qualified(model: str, parameter: str) -> str:
    """A pipeline candidate's parameter name: "<model>.<parameter>" (`split_name` undoes it)."""
    return f"{model}.{parameter}"


def step_candidate(candidate: Candidate, model: str) -> Candidate:
    """`model`'s part of a pipeline candidate, as a plain candidate (empty when it has none)."""
    return Candidate(
        (parameter, value)
        for name, value in candidate.items()
        for owner, parameter in [split_name(name)]
        if owner == model
    )


def join_steps(steps: Mapping[str, Candidate]) -> Candidate:
    """One pipeline candidate from each model's plain candidate."""
    return Candidate(
        (qualified(model, name), value)
        for model, candidate in steps.items()
        for name, value in candidate.items()
    )


def _sort_key(name: str) -> tuple[str, int]:
    model, parameter = split_name(name)
    return model, _ORDER[parameter]


def _key_of(items: tuple[tuple[str, ParamValue], ...]) -> str:
    """'mbs=16,db=on,...' for a plain candidate; 'a[inst=1,...] b[inst=2,...]' for a
    pipeline's, one group per model."""
    groups: dict[str, list[str]] = {}
    for name, value in items:
        model, parameter = split_name(name)
        if parameter == INSTANCE_KIND and value == "KIND_CPU":
            continue  # the usual case: kept short
        groups.setdefault(model, []).append(f"{_SHORT[parameter]}={_short_value(parameter, value)}")
    return " ".join(
        ",".join(parts) if not model else f"{model}[{','.join(parts)}]"
        for model, parts in groups.items()
    )


def _short_value(name: str, value: ParamValue) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None:
        return "none"
    if name == INSTANCE_KIND and isinstance(value, str):
        return value.removeprefix("KIND_").lower()
    return str(value)


def variant_filename(filename: str, precision: str) -> str:
    """The model file a precision uses: 'model.onnx' + 'int8' -> 'model.int8.onnx',
    + 'plan_fp16' -> 'model.fp16.plan'.

    An existing precision tag is replaced, so a config already pointing at a variant maps
    back to the original name for fp32 and the TensorRT precisions of onnxruntime."""
    stem, dot, ext = filename.rpartition(".")
    if not dot:
        stem, ext = filename, ""
    for tag in FILE_PRECISIONS:
        stem = stem.removesuffix(f".{tag}")
    if precision in FILE_PRECISIONS:
        stem = f"{stem}.{precision}"
    if precision in PLAN_PRECISIONS:
        return f"{stem}.{PLAN_PRECISIONS[precision]}.{PLAN_EXTENSION}"
    return f"{stem}.{ext}" if ext else stem


def apply(candidate: Candidate, base: mc.ModelConfig) -> mc.ModelConfig:
    """A new config: `base` with the candidate's values; parameters it lacks stay as in base.

    Batching off removes `dynamic_batching` and keeps base's max_batch_size; batching on sets
    max_batch_size, one preferred size (or none) and the queue delay, keeping base's other
    batcher fields. Instances become one group of `count` x `kind`. Warmup batch sizes are
    clamped to the new max_batch_size so the result stays valid.
    """
    config = mc.ModelConfig()
    config.CopyFrom(base)
    if DYNAMIC_BATCHING in candidate:
        _apply_batching(config, candidate)
    if INSTANCE_COUNT in candidate:
        kind = candidate.get(INSTANCE_KIND, "KIND_CPU")
        _apply_instances(config, _int(candidate[INSTANCE_COUNT]), str(kind))
    if THREAD_COUNT in candidate:
        config.parameters[THREAD_COUNT].string_value = str(_int(candidate[THREAD_COUNT]))
    if PRECISION in candidate:
        _apply_precision(config, str(candidate[PRECISION]))
    return config


def _int(value: ParamValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _apply_batching(config: mc.ModelConfig, candidate: Candidate) -> None:
    if not candidate[DYNAMIC_BATCHING]:
        config.ClearField("dynamic_batching")
        return
    max_batch = _int(candidate[MAX_BATCH_SIZE])
    config.max_batch_size = max_batch
    batching = config.dynamic_batching
    batching.SetInParent()
    del batching.preferred_batch_size[:]
    preferred = candidate.get(PREFERRED_BATCH_SIZE)
    if preferred is not None:
        batching.preferred_batch_size.append(_int(preferred))
    batching.max_queue_delay_microseconds = _int(candidate.get(MAX_QUEUE_DELAY, 0))
    for warmup in config.model_warmup:
        warmup.batch_size = min(warmup.batch_size, max_batch)


def _apply_instances(config: mc.ModelConfig, count: int, kind: str) -> None:
    group = mc.ModelInstanceGroup()
    if config.instance_group:
        group.CopyFrom(config.instance_group[0])
    group.count = count
    group.kind = KINDS[kind]
    if kind == "KIND_CPU":
        del group.gpus[:]
    del config.instance_group[:]
    config.instance_group.append(group)


def _apply_precision(config: mc.ModelConfig, precision: str) -> None:
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision '{precision}' (known: {', '.join(PRECISIONS)})")
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    existing = next((a for a in accelerators if a.name == "tensorrt"), None)
    if precision in PLAN_PRECISIONS:
        _apply_plan(config, precision)
        return
    if precision in TRT_PRECISIONS:
        # The config's own tensorrt entry keeps its other parameters (workspace size...).
        accel = existing if existing is not None else accelerators.add(name="tensorrt")
        accel.parameters["precision_mode"] = TRT_PRECISIONS[precision]
        if precision == "trt_int8":
            accel.parameters["int8_calibration_table_name"] = TRT_TABLE_NAME
            accel.parameters["trt_engine_cache_path"] = TRT_TABLE_FOLDER
        elif accel.parameters.get("int8_calibration_table_name") == TRT_TABLE_NAME:
            del accel.parameters["int8_calibration_table_name"]
    elif existing is not None:
        kept = [a for a in accelerators if a.name != "tensorrt"]
        copies = [mc.ModelOptimizationPolicy.ExecutionAccelerators.Accelerator() for _ in kept]
        for copy, accel in zip(copies, kept, strict=True):
            copy.CopyFrom(accel)
        del accelerators[:]
        accelerators.extend(copies)
    current = default_model_filename(config) or "model.onnx"
    filename = variant_filename(current, precision)
    if filename != current:
        config.default_model_filename = filename


def _apply_plan(config: mc.ModelConfig, precision: str) -> None:
    """The engine file on the tensorrt backend: onnxruntime's own settings (its thread count,
    its TensorRT provider) go, they mean nothing there."""
    current = config.default_model_filename or "model.onnx"
    config.default_model_filename = variant_filename(current, precision)
    config.platform = PLAN_PLATFORM
    config.backend = PLAN_BACKEND
    config.optimization.ClearField("execution_accelerators")
    if THREAD_COUNT in config.parameters:
        del config.parameters[THREAD_COUNT]


def config_precision(config: mc.ModelConfig) -> str:
    """The precision a config serves: a tuner-built engine's tag, a TensorRT precision_mode,
    else the model file's tag."""
    if config.backend == PLAN_BACKEND or config.platform == PLAN_PLATFORM:
        for precision, tag in PLAN_PRECISIONS.items():
            if config.default_model_filename.endswith(f".{tag}.{PLAN_EXTENSION}"):
                return precision
        return "fp32"
    for accel in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accel.name == "tensorrt":
            mode = accel.parameters.get("precision_mode", "FP32").upper()
            for precision, trt_mode in TRT_PRECISIONS.items():
                if mode == trt_mode:
                    return precision
    stem = config.default_model_filename.rpartition(".")[0]
    for tag in FILE_PRECISIONS:
        if stem.endswith(f".{tag}"):
            return tag
    return "fp32"


_UNSET = "(unset)"
_NONE = "(none)"


def diff(base: mc.ModelConfig, tuned: mc.ModelConfig) -> list[tuple[str, str, str]]:
    """Changed fields as (field, old, new), human-readable, e.g.
    ("instance_group[0].count", "1", "2"), ("parameters.intra_op_thread_count", "(unset)", "1"),
    ("precision", "fp32", "int8")."""
    old, new = _flat_config(base), _flat_config(tuned)
    changes = []
    for path in [*new, *(path for path in old if path not in new)]:
        old_value, old_absent = old.get(path, (None, ""))
        new_value, new_absent = new.get(path, (None, ""))
        before = old_value if old_value is not None else new_absent
        after = new_value if new_value is not None else old_absent
        if before != after:
            changes.append((path, before, after))
    return changes


def _flat_config(config: mc.ModelConfig) -> dict[str, tuple[str, str]]:
    """Field path -> (value, how the value reads where the field is absent)."""
    flat = {"dynamic_batching": ("on" if config.HasField("dynamic_batching") else "off", "off")}
    _flatten(config, "", None, flat)
    flat["precision"] = (config_precision(config), "fp32")
    return flat


def _flatten(
    message: Message, prefix: str, absent: str | None, out: dict[str, tuple[str, str]]
) -> None:
    # `absent` overrides the proto default inside list items and map values, where a missing
    # field means the whole item is missing.
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key in sorted(value):
                item = value[key]
                if isinstance(item, mc.ModelParameter):
                    out[f"{path}.{key}"] = (item.string_value, _UNSET)
                elif isinstance(item, Message):
                    _flatten(item, f"{path}.{key}.", _UNSET, out)
                else:
                    out[f"{path}.{key}"] = (_render(value_field, item), _UNSET)
        elif field.message_type is not None:
            if field.is_repeated:
                for i, item in enumerate(value):
                    _flatten(item, f"{path}[{i}].", _NONE, out)
            else:
                _flatten(value, f"{path}.", absent, out)
        elif field.is_repeated:
            rendered = "[" + ", ".join(_render(field, item) for item in value) + "]"
            out[path] = (rendered, absent or "[]")
        else:
            out[path] = (_render(field, value), absent or _render(field, field.default_value))


def _render(field: descriptor.FieldDescriptor, value: Any) -> str:
    if field.enum_type is not None:
        enum_value = field.enum_type.values_by_number.get(value)
        return enum_value.name if enum_value is not None else str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == "":
        return _UNSET
    return str(value)
