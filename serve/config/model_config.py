"""Reading and writing config.pbtxt as tritonclient's `ModelConfig` message.

The schema is Triton's own protobuf: text format for files, Triton's JSON
form (field names as in the proto, every field printed, 64-bit integers as numbers) for the
HTTP `/config` route and for config overrides sent to the repository API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from google.protobuf import descriptor, json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from common.atomic import write_text_atomic
from serve.errors import ServeError

CONFIG_FILENAME = "config.pbtxt"

_INT64_TYPES = {
    descriptor.FieldDescriptor.TYPE_INT64,
    descriptor.FieldDescriptor.TYPE_UINT64,
    descriptor.FieldDescriptor.TYPE_SINT64,
    descriptor.FieldDescriptor.TYPE_FIXED64,
    descriptor.FieldDescriptor.TYPE_SFIXED64,
}


def parse_config_text(text: str, source: str) -> mc.ModelConfig:
    """Parse config.pbtxt text; errors name `source` and the line and field at fault."""
    config = mc.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise ServeError.invalid(f"{source}: {exc}") from None
    return config


def read_config_file(path: Path) -> mc.ModelConfig:
    """The config in `path` (text format); ServeError (invalid) naming the file when it cannot be
    read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ServeError.invalid(f"{path}: cannot read: {exc}") from None
    return parse_config_text(text, str(path))


def config_to_text(config: mc.ModelConfig) -> str:
    """Text format with `max_batch_size` always present, even when it is 0.

    Proto3 omits zero scalars, but Triton's own examples and users read `max_batch_size: 0`
    as a statement that the model does not batch, so it is written out explicitly.
    """
    text: str = text_format.MessageToString(config, use_short_repeated_primitives=True)
    if config.max_batch_size != 0:
        return text
    lines = text.splitlines(keepends=True)
    head = ("name:", "platform:", "backend:", "runtime:")
    at = 0
    while at < len(lines) and lines[at].startswith(head):
        at += 1
    lines.insert(at, "max_batch_size: 0\n")
    return "".join(lines)


def write_config_file(path: Path, config: mc.ModelConfig) -> None:
    """Atomic write-back of a config.pbtxt; re-writing its own output is byte-stable."""
    write_text_atomic(path, config_to_text(config))


def _ints_from_strings(message: Any, value: Any) -> Any:
    """Turn the 64-bit integers that json_format prints as strings back into numbers."""
    if isinstance(value, dict):
        fields = message.DESCRIPTOR.fields_by_name
        out: dict[str, Any] = {}
        for key, item in value.items():
            field = fields.get(key)
            if field is None:
                out[key] = item
                continue
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.message_type is not None:
                    sample = getattr(message, key).get_or_create(_map_key_sample(field))
                    out[key] = {k: _ints_from_strings(sample, v) for k, v in item.items()}
                    getattr(message, key).clear()
                else:
                    out[key] = item
            elif field.message_type is not None:
                child = getattr(message, key)
                if field.is_repeated:
                    sample = child.add()
                    out[key] = [_ints_from_strings(sample, v) for v in item]
                    del child[:]
                else:
                    out[key] = _ints_from_strings(child, item)
            elif field.type in _INT64_TYPES:
                out[key] = [int(v) for v in item] if isinstance(item, list) else int(item)
            else:
                out[key] = item
        return out
    return value


def _map_key_sample(field: descriptor.FieldDescriptor) -> Any:
    key_field = field.message_type.fields_by_name["key"]
    return "" if key_field.type == descriptor.FieldDescriptor.TYPE_STRING else 0


def config_to_json(config: mc.ModelConfig) -> dict[str, Any]:
    """The config as Triton's `/config` route prints it."""
    raw = json_format.MessageToDict(
        config,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    result: dict[str, Any] = _ints_from_strings(mc.ModelConfig(), raw)
    return result


def config_from_json(text: str | bytes, source: str) -> mc.ModelConfig:
    """Parse a ModelConfig sent as JSON (repository load override)."""
    config = mc.ModelConfig()
    try:
        json_format.Parse(text, config)
    except (json_format.ParseError, UnicodeDecodeError) as exc:  # bytes: UTF-8 JSON or nothing
        raise ServeError.invalid(f"{source}: {exc}") from None
    return config
