"""HTTP/2 frame constants and builders (RFC 9113), and the few response headers gRPC needs,
HPACK-encoded once (RFC 7541: indexed and literal-without-indexing fields only, so the
encoder keeps no table)."""

from __future__ import annotations

import struct

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9

END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6

NO_ERROR = 0x0
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
STREAM_CLOSED = 0x5
FRAME_SIZE_ERROR = 0x6
REFUSED_STREAM = 0x7
CANCEL = 0x8
COMPRESSION_ERROR = 0x9

DEFAULT_WINDOW = 65_535
DEFAULT_MAX_FRAME = 16_384
MAX_WINDOW = 2**31 - 1
FRAME_HEADER_BYTES = 9

_HEADER = struct.Struct(">IBI")
_U32 = struct.Struct(">I")
_SETTING = struct.Struct(">HI")
_MESSAGE_PREFIX = struct.Struct(">BI")


def frame(frame_type: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame: the 9-byte header for `payload`, then the payload."""
    return _HEADER.pack(len(payload) << 8 | frame_type, flags, stream_id) + payload


def frame_header(frame_type: int, flags: int, stream_id: int, length: int) -> bytes:
    """A frame's 9-byte header alone, for a payload of `length` bytes sent as separate pieces."""
    return _HEADER.pack(length << 8 | frame_type, flags, stream_id)


def settings_frame(settings: dict[int, int]) -> bytes:
    """A SETTINGS frame (not an ACK) carrying `settings` (identifier -> value)."""
    return frame(SETTINGS, 0, 0, b"".join(_SETTING.pack(k, v) for k, v in settings.items()))


def parse_settings(payload: bytes) -> list[tuple[int, int]]:
    """A SETTINGS frame's payload as (identifier, value) pairs, in order."""
    return [_SETTING.unpack_from(payload, i) for i in range(0, len(payload), 6)]


def window_update(stream_id: int, increment: int) -> bytes:
    """A WINDOW_UPDATE frame granting `increment` bytes on `stream_id` (0: the connection)."""
    return frame(WINDOW_UPDATE, 0, stream_id, _U32.pack(increment))


def rst_stream(stream_id: int, error_code: int) -> bytes:
    """An RST_STREAM frame ending `stream_id` with HTTP/2 error code `error_code`."""
    return frame(RST_STREAM, 0, stream_id, _U32.pack(error_code))


def goaway(last_stream_id: int, error_code: int, debug: bytes = b"") -> bytes:
    """A GOAWAY frame: streams above `last_stream_id` will not be processed; `error_code` says why
    (NO_ERROR for a graceful close)."""
    return frame(GOAWAY, 0, 0, _U32.pack(last_stream_id) + _U32.pack(error_code) + debug)


def read_u31(payload: bytes | memoryview, offset: int = 0) -> int:
    """The 31-bit value (a stream id or window increment) at `offset`, its reserved top bit
    dropped."""
    return int(_U32.unpack_from(payload, offset)[0]) & 0x7FFF_FFFF


def message_prefix(length: int) -> bytes:
    """gRPC's 5-byte message prefix: not compressed, then the length."""
    return _MESSAGE_PREFIX.pack(0, length)


# -- HPACK output -------------------------------------------------------------------------------


def _hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _literal(name: bytes, value: bytes) -> bytes:
    """A literal field without indexing, new name, no Huffman coding."""
    return b"\x00" + _hpack_int(len(name), 7, 0) + name + _hpack_int(len(value), 7, 0) + value


def _literal_indexed_name(index: int, value: bytes) -> bytes:
    return _hpack_int(index, 4, 0) + _hpack_int(len(value), 7, 0) + value


_STATUS_200 = b"\x88"  # static table entry 8
_CONTENT_TYPE_INDEX = 31
RESPONSE_HEADERS = _STATUS_200 + _literal_indexed_name(_CONTENT_TYPE_INDEX, b"application/grpc")
OK_TRAILERS = _literal(b"grpc-status", b"0")

_UNRESERVED = frozenset(range(0x20, 0x7F)) - {ord("%")}


def percent_encode(text: str) -> bytes:
    """grpc-message's encoding: UTF-8, with bytes outside printable ASCII and '%' as %XX."""
    out = bytearray()
    for byte in text.encode("utf-8"):
        if byte in _UNRESERVED:
            out.append(byte)
        else:
            out += b"%%%02X" % byte
    return bytes(out)


def status_trailers(code: int, message: str) -> bytes:
    """The HPACK block of a failed call's trailers: grpc-status `code`, and grpc-message
    (percent-encoded) when `message` is not empty."""
    block = _literal(b"grpc-status", str(code).encode())
    if message:
        block += _literal(b"grpc-message", percent_encode(message))
    return block
