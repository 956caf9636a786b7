"""Bad input gets a clear 4xx naming what is wrong, and the server keeps serving. (What
tritonclient makes of these errors: tests/integration/serve/http/test_http_models.py.)"""

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
    "wrong shape": (
        "/v2/models/simple/infer",
        orjson.dumps(
            {
                "inputs": [
                    _tensor("INPUT0", [1, 15], "INT32", [1] * 15),
                    _tensor("INPUT1", [1, 16], "INT32", ONES),
                ]
            }
        ),
        {},
        400,
        "INPUT0",
    ),
    "wrong datatype": (
        "/v2/models/simple/infer",
        orjson.dumps(
            {
                "inputs": [
                    _tensor("INPUT0", [1, 16], "FP32", [1.0] * 16),
                    _tensor("INPUT1", [1, 16], "INT32", ONES),
                ]
            }
        ),
        {},
        400,
        "INPUT0",
    ),
    "unknown input": (
        "/v2/models/simple/infer",
        orjson.dumps({"inputs": [*GOOD["inputs"], _tensor("INPUT9", [1, 16], "INT32", ONES)]}),
        {},
        400,
        "INPUT9",
    ),
    "missing input": (
        "/v2/models/simple/infer",
        orjson.dumps({"inputs": [_tensor("INPUT0", [1, 16], "INT32", ONES)]}),
        {},
        400,
        "INPUT1",
    ),
    "unknown output": (
        "/v2/models/simple/infer",
        orjson.dumps({**GOOD, "outputs": [{"name": "OUTPUT7"}]}),
        {},
        400,
        "OUTPUT7",
    ),
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
    "batch over max_batch_size": (
        "/v2/models/simple/infer",
        orjson.dumps(
            {
                "inputs": [
                    _tensor("INPUT0", [9, 16], "INT32", [1] * 144),
                    _tensor("INPUT1", [9, 16], "INT32", [1] * 144),
                ]
            }
        ),
        {},
        400,
        "batch-size must be <= 8",
    ),
    "unknown model": ("/v2/models/nope/infer", orjson.dumps(GOOD), {}, 404, "nope"),
    "unknown version": ("/v2/models/simple/versions/7/infer", orjson.dumps(GOOD), {}, 404, "7"),
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


async def test_unknown_model_metadata_is_404(asgi_client: httpx.AsyncClient) -> None:
    assert (await asgi_client.get("/v2/models/nope")).status_code == 404
    assert (await asgi_client.get("/v2/models/simple/versions/9")).status_code == 404
    assert (await asgi_client.get("/v2/models/nope/ready")).status_code == 400
