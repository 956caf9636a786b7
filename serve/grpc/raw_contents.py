"""A ModelInferRequest's raw_input_contents taken out of its wire bytes without copies.

protobuf's Python message copies every `bytes` field it parses; for a request carrying large
tensors that is a second copy of each. `parse_infer_request` scans the message's top-level
fields (protobuf wire format: a varint tag, then a varint, 8 or 4 bytes, or a length-delimited
value), parses everything but field 7 (`raw_input_contents`) with protobuf, and returns those
entries as views of the received buffer. A message the scan cannot follow is parsed whole by
protobuf, which raises its DecodeError where it is malformed.
"""

from __future__ import annotations

from tritonclient.grpc import service_pb2 as pb

RAW_INPUT_CONTENTS = 7
_RAW_TAG = RAW_INPUT_CONTENTS << 3 | 2
# Below this size a message is parsed whole: the scan would not pay for itself.
SCAN_MIN = 1 << 14

Buffer = bytes | bytearray | memoryview


def parse_infer_request(message: Buffer) -> tuple[pb.ModelInferRequest, list[memoryview] | None]:
    """(the request, its raw_input_contents as views of `message`, in order, left out of the
    request); or (the whole request, None) for a small message or one the scan cannot follow."""
    if len(message) >= SCAN_MIN:
        split = _split(memoryview(message).cast("B"))
        if split is not None:
            rest, raw = split
            return pb.ModelInferRequest.FromString(rest), raw
    return pb.ModelInferRequest.FromString(message), None


def _split(view: memoryview) -> tuple[bytes, list[memoryview]] | None:
    """(the other fields' bytes, the raw_input_contents values); None when the bytes are not a
    sequence of well-formed top-level fields."""
    size = len(view)
    kept: list[memoryview] = []
    raw: list[memoryview] = []
    position = 0
    while position < size:
        start = position
        tag, position = _varint(view, position, size)
        if tag < 0:
            return None
        wire_type = tag & 7
        if wire_type == 0:
            _, position = _varint(view, position, size)
            if position < 0:
                return None
        elif wire_type == 1:
            position += 8
        elif wire_type == 5:
            position += 4
        elif wire_type == 2:
            length, position = _varint(view, position, size)
            if length < 0:
                return None
            if tag == _RAW_TAG:
                if position + length > size:
                    return None
                raw.append(view[position : position + length])
                position += length
                continue
            position += length
        else:  # groups are not in this message
            return None
        if position > size:
            return None
        kept.append(view[start:position])
    return b"".join(kept), raw


def _varint(view: memoryview, position: int, size: int) -> tuple[int, int]:
    """(value, position after it); (-1, -1) when it runs past the end or over 10 bytes."""
    value = 0
    shift = 0
    while position < size and shift < 70:
        byte = view[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    return -1, -1
