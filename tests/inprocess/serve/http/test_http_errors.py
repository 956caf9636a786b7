"""HTTP's own bad input (malformed JSON, binary framing that does not add up) gets a clear 400
naming what is wrong, and the server keeps serving. (Bad requests any transport can carry:
tests/integration/serve/contract/test_errors.py.)"""

from __future__ import annotations

import struct

import httpx
import orjson
import pytest

pytestmark = pytest.mark.anyio

ONES = [1] * 16


def _tensor(name: str, shape: list[int], datatype: str, data: list[object]) -> dict[str, object]:
    return {"name": name, "shape": shape, "datatype": datatype, "data": data}


GOOD = {
    "inputs": [_tensor("INPUT0", [1, 16], "INT32", ONES), _tensor("INPUT1", [1, 16], "INT32", ONES)]
}


async def _post(
    client: httpx.AsyncClient, path: str, body: bytes, headers: dict[str, str] | None = None
) -> httpx.Response:
    return await client.post(path, content=body, headers=headers or {})


async def _assert_still_serving(client: httpx.AsyncClient) -> None:
    response = await _post(client, "/v2/models/simple/infer", orjson.dumps(GOOD))
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [2] * 16


BYTES_PAYLOAD = struct.pack("<I", 10) + b"abc"  # says 10 bytes, has 3

CASES = {
    "malformed json": ("/v2/models/simple/infer", b'{"inputs": [', {}, 400, "JSON"),
    "binary header longer than body": (
        "/v2/models/simple/infer",
        orjson.dumps(GOOD),
        {"Inference-Header-Content-Length": "100000"},
        400,
        "Inference-Header-Content-Length",
    ),
    "binary data shorter than declared": (
        "/v2/models/simple/infer",
        orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "INPUT0",
                        "shape": [1, 16],
                        "datatype": "INT32",
                        "parameters": {"binary_data_size": 64},
                    },
                    _tensor("INPUT1", [1, 16], "INT32", ONES),
                ]
            }
        )
        + b"\x00" * 10,
        {},
        400,
        "INPUT0",
    ),
    "bytes lengths do not match": (
        "/v2/models/simple/infer",
        orjson.dumps(
            {
                "inputs": [
                    {
                        "name": "TEXT",
                        "shape": [1],
                        "datatype": "BYTES",
                        "parameters": {"binary_data_size": len(BYTES_PAYLOAD)},
                    }
                ]
            }
        ),
        {},
        400,
        "TEXT",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_request_is_rejected_and_server_keeps_serving(
    asgi_client: httpx.AsyncClient, case: str
) -> None:
    path, body, headers, status, mentions = CASES[case]
    if case == "bytes lengths do not match":
        headers = {"Inference-Header-Content-Length": str(len(body))}
        body = body + BYTES_PAYLOAD
    if case == "binary data shorter than declared":
        json_part = body[: body.index(b"\x00")]
        headers = {"Inference-Header-Content-Length": str(len(json_part))}
    response = await _post(asgi_client, path, body, headers)
    assert response.status_code == status, response.text
    message = response.json()["error"]
    assert mentions in message
    await _assert_still_serving(asgi_client)


async def test_readiness_of_an_unknown_model_is_a_400(asgi_client: httpx.AsyncClient) -> None:
    assert (await asgi_client.get("/v2/models/nope/ready")).status_code == 400
