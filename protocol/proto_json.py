"""Protobuf messages as the JSON Triton's HTTP routes print: proto field names, every field,
and 64-bit integers as numbers (json_format prints them as strings)."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor, json_format
from google.protobuf.message import Message

_INT64_TYPES = frozenset(
    {
        descriptor.FieldDescriptor.TYPE_INT64,
        descriptor.FieldDescriptor.TYPE_UINT64,
        descriptor.FieldDescriptor.TYPE_SINT64,
        descriptor.FieldDescriptor.TYPE_FIXED64,
        descriptor.FieldDescriptor.TYPE_SFIXED64,
    }
)


def message_to_json(message: Message) -> dict[str, Any]:
    """`message` as a JSON object (a dict), as Triton's HTTP API would print it."""
    raw = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    result: dict[str, Any] = _numbers(message.DESCRIPTOR, raw)
    return result


def _numbers(message_type: descriptor.Descriptor, value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, item in value.items():
        field = message_type.fields_by_name.get(key)
        out[key] = item if field is None else _field_value(field, item)
    return out


def _field_value(field: descriptor.FieldDescriptor, item: Any) -> Any:
    child = field.message_type
    if child is not None and child.GetOptions().map_entry:
        value_field = child.fields_by_name["value"]
        return {k: _single(value_field, v) for k, v in item.items()}
    if isinstance(item, list):
        return [_single(field, v) for v in item]
    return _single(field, item)


def _single(field: descriptor.FieldDescriptor, item: Any) -> Any:
    if field.message_type is not None and isinstance(item, dict):
        return _numbers(field.message_type, item)
    if field.type in _INT64_TYPES and isinstance(item, str):
        return int(item)
    return item
