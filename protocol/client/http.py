"""A small async KServe v2 HTTP/1.1 client: the server's address, control calls and infer
request framing.

Control calls (server and model metadata, model config, statistics, the repository extension)
share one keep-alive connection and return the parsed JSON; anything the user can act on
(server unreachable, model unknown, an error status) raises `ClientError`. The infer path lives
in `protocol.client.infer_connection`; `build_infer_request` frames its requests once per
payload.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import urllib.parse
from dataclasses import dataclass
from typing import Any, cast

import httptools
import orjson

from protocol.errors import ClientError
from protocol.headers import CONTENT_TYPE_BINARY, CONTENT_TYPE_JSON, HEADER_LENGTH

DEFAULT_PORT = 8000
_ERRNO = re.compile(r"\[Errno (\d+)\]")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the server listens (perf_analyzer's -u)."""

    host: str
    port: int

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_url(url: str, default_port: int = DEFAULT_PORT) -> Endpoint:
    """`host:port`, `host` (`default_port`) or `http://host:port[/]`; IPv6 hosts in
    brackets."""
    text = url.strip()
    if text.startswith("https://"):
        raise ClientError(f"{url}: HTTPS is not supported by this client yet")
    text = text.removeprefix("http://").rstrip("/")
    try:
        parsed = urllib.parse.urlsplit(f"//{text}")
        host, port = parsed.hostname, parsed.port
    except ValueError as exc:
        raise ClientError(f"{url} is not a valid server address: {exc}") from None
    if not host or parsed.path:
        raise ClientError(f"{url} is not a valid server address (expected host:port)")
    return Endpoint(host, default_port if port is None else port)


def model_path(model: str, version: str = "") -> str:
    """`/v2/models/{model}[/versions/{version}]` with the names URL-quoted."""
    path = f"/v2/models/{_quote(model)}"
    if version:
        path += f"/versions/{_quote(version)}"
    return path


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def build_infer_request(
    endpoint: Endpoint,
    model: str,
    version: str,
    body: bytes,
    header_length: int | None,
    headers: dict[str, str] | None = None,
) -> bytes:
    """A complete POST .../infer request (request line, headers and body) in one bytes."""
    lines = [
        f"POST {model_path(model, version)}/infer HTTP/1.1",
        f"Host: {endpoint.address}",
    ]
    if header_length is None:
        lines.append(f"Content-Type: {CONTENT_TYPE_JSON}")
    else:
        lines.append(f"Content-Type: {CONTENT_TYPE_BINARY}")
        lines.append(f"{HEADER_LENGTH}: {header_length}")
    lines.append(f"Content-Length: {len(body)}")
    lines.extend(f"{name}: {value}" for name, value in (headers or {}).items())
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body


def error_message(status: int, body: bytes) -> str:
    """The server's message from a KServe `{"error": "..."}` body, else the status and text."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return str(document["error"])
    text = body.decode("utf-8", "replace").strip()[:200]
    return f"HTTP {status}" + (f": {text}" if text else "")


class HttpClient:
    """Control calls to a KServe v2 server over one keep-alive connection.

    Calls are serialised (one request at a time); they are for setup and statistics, not load.
    """

    def __init__(
        self, url: str, headers: dict[str, str] | None = None, timeout_s: float = 30.0
    ) -> None:
        self.endpoint = parse_url(url)
        self._headers = dict(headers or {})
        self._timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def server_metadata(self) -> dict[str, Any]:
        """GET /v2: the server's name, version and extensions."""
        return await self._get_json("/v2", "the server metadata")

    async def model_metadata(self, model: str, version: str = "") -> dict[str, Any]:
        return await self._get_json(model_path(model, version), _model_what(model, version))

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        return await self._get_json(
            model_path(model, version) + "/config", _model_what(model, version)
        )

    async def statistics(self, model: str = "", version: str = "") -> dict[str, Any]:
        """The statistics extension: one model's (or every model's, for model "")."""
        path = model_path(model, version) + "/stats" if model else "/v2/models/stats"
        return await self._get_json(path, _model_what(model, version) if model else "statistics")

    async def repository_index(self) -> list[dict[str, Any]]:
        """The repository extension's index: one entry per model version it knows."""
        document = await self._json("POST", "/v2/repository/index", list, body=b"{}")
        return cast(list[dict[str, Any]], document)

    async def load_model(self, model: str, parameters: dict[str, Any] | None = None) -> None:
        """Load (or reload) a model through the repository extension; `parameters` (such as
        `config`, a JSON string) go in the request. When the server refuses, ClientError
        carries its message and status."""
        body = orjson.dumps({"parameters": parameters}) if parameters else b"{}"
        await self._post(f"/v2/repository/models/{_quote(model)}/load", body)

    async def unload_model(self, model: str) -> None:
        await self._post(f"/v2/repository/models/{_quote(model)}/unload", b"{}")

    async def register_system_shared_memory(
        self, name: str, key: str, byte_size: int, offset: int = 0
    ) -> None:
        """The shared-memory extension: register the POSIX region `key` as `name`."""
        body = orjson.dumps({"key": key, "offset": offset, "byte_size": byte_size})
        await self._register_region(
            "systemsharedmemory", f"system shared memory region '{name}' (key {key})", name, body
        )

    async def unregister_system_shared_memory(self, name: str = "") -> None:
        """Unregister the region `name` (every system region for "")."""
        await self._unregister_regions("systemsharedmemory", "system", name)

    async def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        """The CUDA shared-memory extension: register the GPU memory whose cudaIpcMemHandle
        is `raw_handle` (its base64, as tritonclient's get_raw_handle gives it) as `name`."""
        handle = {"b64": raw_handle.decode()}
        body = orjson.dumps({"raw_handle": handle, "device_id": device_id, "byte_size": byte_size})
        await self._register_region(
            "cudasharedmemory", f"CUDA shared memory region '{name}'", name, body
        )

    async def unregister_cuda_shared_memory(self, name: str = "") -> None:
        """Unregister the CUDA region `name` (every CUDA region for "")."""
        await self._unregister_regions("cudasharedmemory", "CUDA", name)

    async def _register_region(self, route: str, what: str, name: str, body: bytes) -> None:
        path = f"/v2/{route}/region/{_quote(name)}/register"
        status, answer = await self.request("POST", path, body)
        if status != 200:
            raise ClientError(
                f"the server at {self.endpoint.address} refused to register {what}: "
                f"{error_message(status, answer)}",
                status,
            )

    async def _unregister_regions(self, route: str, kind: str, name: str) -> None:
        region = f"/region/{_quote(name)}" if name else ""
        status, answer = await self.request("POST", f"/v2/{route}{region}/unregister", b"{}")
        if status != 200:
            what = f"region '{name}'" if name else "the regions"
            raise ClientError(
                f"the server at {self.endpoint.address} refused to unregister {kind} shared"
                f" memory {what}: {error_message(status, answer)}",
                status,
            )

    async def system_shared_memory_status(self, name: str = "") -> list[dict[str, Any]]:
        """The registered system regions (one, or all for ""): name, key, offset, byte_size."""
        region = f"/region/{_quote(name)}" if name else ""
        document = await self._json("GET", f"/v2/systemsharedmemory{region}/status", list)
        return cast(list[dict[str, Any]], document)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """Send one request; (status, body). A stale keep-alive connection is retried once."""
        async with self._lock:
            for attempt in (1, 2):
                reused = self._writer is not None
                try:
                    return await asyncio.wait_for(
                        self._exchange(method, path, body), self._timeout_s
                    )
                except (ConnectionError, asyncio.IncompleteReadError) as exc:
                    await self._drop()
                    if not reused or attempt == 2:
                        raise ClientError(
                            f"the connection to the server at {self.endpoint.address} failed"
                            f" during {method} {path}: {connect_error_reason(exc)}"
                        ) from None
                except TimeoutError:
                    await self._drop()
                    raise ClientError(
                        f"the server at {self.endpoint.address} did not answer {method} {path}"
                        f" within {self._timeout_s:g} s"
                    ) from None
        raise AssertionError("unreachable")

    async def close(self) -> None:
        async with self._lock:
            await self._drop()

    async def _post(self, path: str, body: bytes) -> None:
        status, answer = await self.request("POST", path, body)
        if status != 200:
            raise ClientError(error_message(status, answer), status)

    async def _get_json(self, path: str, what: str) -> dict[str, Any]:
        document = await self._json("GET", path, dict, what=what)
        return cast(dict[str, Any], document)

    async def _json(
        self, method: str, path: str, kind: type, body: bytes = b"", what: str = ""
    ) -> Any:
        """The JSON document (of `kind`: dict or list) a 200 answer carries; ClientError with
        the server's message otherwise. `what` ("model 'x'") words a 400 / 404 as unknown."""
        status, answer = await self.request(method, path, body)
        address = self.endpoint.address
        if status != 200:
            message = error_message(status, answer)
            if status in (400, 404) and what.startswith("model"):
                raise ClientError(
                    f"{what} is not known to the server at {address}: {message}", status
                )
            raise ClientError(f"the server at {address} refused {method} {path}: {message}", status)
        try:
            document = orjson.loads(answer)
        except orjson.JSONDecodeError as exc:
            raise ClientError(
                f"the server at {address} answered {method} {path} with invalid JSON: {exc}"
            ) from None
        if not isinstance(document, kind):
            expected = "an object" if kind is dict else "a list"
            raise ClientError(
                f"the server at {address} answered {method} {path} with a JSON"
                f" {type(document).__name__}, not {expected}"
            )
        return document

    async def _exchange(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            await self._connect()
        reader, writer = self._reader, self._writer
        if reader is None or writer is None:
            raise RuntimeError("a connected client has a reader and a writer")
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.endpoint.address}"]
        if body or method == "POST":
            lines += [f"Content-Type: {CONTENT_TYPE_JSON}", f"Content-Length: {len(body)}"]
        lines += [f"{name}: {value}" for name, value in self._headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        response = _Response()
        parser = httptools.HttpResponseParser(response)
        while not response.complete:
            data = await reader.read(65536)
            if not data:
                raise ConnectionResetError("the server closed the connection")
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as exc:
                raise ConnectionResetError(f"malformed HTTP response: {exc}") from None
        if not parser.should_keep_alive():
            await self._drop()
        return parser.get_status_code(), b"".join(response.body)

    async def _connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.open_connection(
                self.endpoint.host, self.endpoint.port
            )
        except OSError as exc:
            raise ClientError(
                f"cannot reach the server at {self.endpoint.address}: {connect_error_reason(exc)}"
            ) from None

    async def _drop(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class _Response:
    """httptools callbacks collecting one response's body."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


def _model_what(model: str, version: str) -> str:
    return f"model '{model}'" + (f" version '{version}'" if version else "")


def connect_error_reason(exc: BaseException) -> str:
    """Why a connection failed, short and lower-case: 'connection refused', not
    '[Errno 111] Connect call failed ...'."""
    text = str(exc) or type(exc).__name__
    if isinstance(exc, socket.gaierror) and exc.strerror:
        text = exc.strerror
    elif isinstance(exc, OSError) and exc.errno:
        text = os.strerror(exc.errno)
    else:
        # Connecting to a name with several addresses raises one OSError for all attempts.
        match = _ERRNO.search(text)
        if match:
            text = os.strerror(int(match.group(1)))
    return text[0].lower() + text[1:]
