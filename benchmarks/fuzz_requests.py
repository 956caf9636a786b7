"""Nearly-right inference requests for `simple` (two INT32 [1, 16] inputs), from a seed: valid
requests with one to three things broken (datatype, shape, data, names, parameters, the binary
extension's sizes and header length, random bytes), each well framed so that the server must
answer every one. The unit fuzzers (tests/unit/serve/test_fuzz_codecs.py) search the codec's
corners; these go over the socket, many at once, to count answers and watch memory."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from raw_load import request_bytes

PATH = "/v2/models/simple/infer"
DATATYPES = ["INT32", "INT8", "UINT64", "FP16", "FP32", "FP64", "BOOL", "BYTES", "BF16", "FOO", ""]
SHAPES: list[Any] = [
    [1, 16],
    [],
    [16],
    [-1, 16],
    [0, 16],
    [1, 16, 1],
    [2**62, 4],
    [2**32, 2**32],
    [1, 10**6],
    ["1", 16],
    [1.5, 16],
    None,
    "1,16",
]
DATA: list[Any] = [
    list(range(16)),
    [],
    [True] * 16,
    [1.5] * 16,
    [2**70] * 16,
    ["a"] * 16,
    [[1] * 16],
    None,
    {"x": 1},
    "data",
    list(range(10_000)),
]


def _valid() -> dict[str, Any]:
    return {
        "id": "fuzz",
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": list(range(16))}
            for n in ("INPUT0", "INPUT1")
        ],
        "outputs": [{"name": "OUTPUT0"}, {"name": "OUTPUT1"}],
    }


def _set_datatype(r: random.Random, request: dict[str, Any]) -> None:
    r.choice(request["inputs"])["datatype"] = r.choice(DATATYPES)


def _set_shape(r: random.Random, request: dict[str, Any]) -> None:
    r.choice(request["inputs"])["shape"] = r.choice(SHAPES)


def _set_data(r: random.Random, request: dict[str, Any]) -> None:
    r.choice(request["inputs"])["data"] = r.choice(DATA)


def _rename(r: random.Random, request: dict[str, Any]) -> None:
    target = r.choice(request["inputs"] + request["outputs"])
    target["name"] = r.choice(["", "INPUT0", "OUTPUT9", "../x", "\x00", "A" * 5000])


def _drop(r: random.Random, request: dict[str, Any]) -> None:
    where = r.choice([request, r.choice(request["inputs"])])
    if where:
        where.pop(r.choice(sorted(where)), None)


def _parameters(r: random.Random, request: dict[str, Any]) -> None:
    key = r.choice(["binary_data_output", "priority", "timeout", "sequence_id", "unknown"])
    value: Any = r.choice([True, -1, 2**63, "x", None, [], {"a": 1}, 1.5])
    r.choice([request, r.choice(request["outputs"])])["parameters"] = {key: value}


def _wrong_type(r: random.Random, request: dict[str, Any]) -> None:
    key = r.choice(["inputs", "outputs", "id", "parameters"])
    request[key] = r.choice([None, 1, "x", [1], {"a": []}])


MUTATIONS: list[Callable[[random.Random, dict[str, Any]], None]] = [
    _set_datatype,
    _set_shape,
    _set_data,
    _rename,
    _parameters,
]


def _json_request(r: random.Random) -> bytes:
    request = _valid()
    for _ in range(r.randint(1, 3)):
        r.choice(MUTATIONS)(r, request)
    if r.random() < 0.15:  # these two break the structure the others edit: last
        _drop(r, request)
    if r.random() < 0.1:
        _wrong_type(r, request)
    body = json.dumps(request).encode()  # the standard library writes integers past 64 bits
    if r.random() < 0.2:  # a few bytes flipped in the text
        raw = bytearray(body)
        for _ in range(r.randint(1, 4)):
            raw[r.randrange(len(raw))] = r.randrange(256)
        body = bytes(raw)
    return request_bytes(PATH, body, {"Content-Type": "application/json"})


def _binary_request(r: random.Random) -> bytes:
    request = _valid()
    tail = b""
    for tensor in request["inputs"]:
        size = r.choice([64, 64, 0, 63, 65, 2**40, -1])
        tensor.pop("data")
        tensor["parameters"] = {"binary_data_size": size}
        tail += r.randbytes(max(0, min(size, 64)))
    header = json.dumps(request).encode()
    length = r.choice([str(len(header)), str(len(header)), "-1", "0", "x", "9" * 30])
    if length == str(len(header)) and r.random() < 0.5:
        length = str(len(header) + r.randint(-5, 200))
    return request_bytes(
        PATH,
        header + tail,
        {"Content-Type": "application/octet-stream", "Inference-Header-Content-Length": length},
    )


def _random_bytes(r: random.Random) -> bytes:
    content_type = r.choice(["application/json", "application/octet-stream", "text/plain"])
    return request_bytes(PATH, r.randbytes(r.randint(0, 4096)), {"Content-Type": content_type})


def fuzzed_requests(count: int, seed: int) -> list[bytes]:
    """`count` requests: 60% mutated JSON, 30% binary extension, 10% random bytes."""
    r = random.Random(seed)
    makers = [_json_request] * 6 + [_binary_request] * 3 + [_random_bytes]
    return [r.choice(makers)(r) for _ in range(count)]
