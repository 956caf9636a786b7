"""What answers each request of the native front end: POST .../infer is decoded, submitted and
answered from the DataPlane's completion callback (`serve.http.infer_call`), with no task or
future per request; every other request goes to the control plane (`serve.http.app`) through
`asgi_bridge`.
`AsgiRoutes` serves an ASGI application alone (the metrics endpoint)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import unquote

import httptools

from protocol.headers import HEADER_LENGTH_ASGI
from serve.dataplane_api import DataPlaneApi
from serve.http.access import refusal
from serve.http.codec import encode_error
from serve.http.infer_call import BINARY, INFER_PATH, JSON, InferAnswer, submit_infer
from serve.http.native.asgi_bridge import AsgiBridge
from serve.http.native.protocol import HttpRequest, ResponseSlot
from serve.inference import Cancellation
from serve.restricted import RestrictedApis

log = logging.getLogger("serve.http")

_CONTENT_TYPE = {
    JSON: b"content-type: " + JSON + b"\r\n",
    BINARY: b"content-type: " + BINARY + b"\r\n",
}
_HEADER_LENGTH_LINE = HEADER_LENGTH_ASGI + b": %d\r\n"


class AsgiRoutes:
    """Every request to one ASGI application."""

    timing = False

    def __init__(self, app: Any) -> None:
        self.bridge = AsgiBridge(app)

    def handle(self, request: HttpRequest, slot: ResponseSlot) -> None:
        target = parsed_target(request, slot)
        if target is not None:
            self.bridge.run(request, *target, slot)


class NativeRoutes:
    """The KServe v2 routes: infer answered natively, the rest by the control plane."""

    def __init__(
        self,
        dataplane: DataPlaneApi,
        control_plane: Any,
        restricted: RestrictedApis | None = None,
    ) -> None:
        self._dataplane = dataplane
        self._tracer = dataplane.tracer
        self.bridge = AsgiBridge(control_plane)
        self._restricted = restricted or RestrictedApis()

    @property
    def timing(self) -> bool:
        return self._tracer.active

    def handle(self, request: HttpRequest, slot: ResponseSlot) -> None:
        target = parsed_target(request, slot)
        if target is None:
            return
        path, raw_path, query = target
        if self._restricted:
            refused = refusal(self._restricted, path, request.header)
            if refused is not None:
                slot.send(403, _CONTENT_TYPE[JSON], encode_error(refused))
                return
        if request.method == b"POST":
            match = INFER_PATH.match(path)
            if match is not None:
                cancellation = Cancellation()
                slot.on_lost = cancellation.cancel
                submit_infer(
                    self._dataplane,
                    request.body,
                    request.header(HEADER_LENGTH_ASGI),
                    match.group(1),
                    match.group(2) or "",
                    lambda answer: send_answer(slot, answer),
                    request.recv_start,
                    cancellation,
                )
                return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("HTTP request: %s %s", request.method.decode("latin-1"), path)
        self.bridge.run(request, path, raw_path, query, slot)


def send_answer(slot: ResponseSlot, answer: InferAnswer) -> None:
    """Write `answer` to its request's slot (status, content type, the JSON header's length when the
    body carries binary tensors); a traced answer's trace is told `sending()` before the write
    and `sent()` after it."""
    headers = _CONTENT_TYPE.get(answer.content_type) or (
        b"content-type: " + answer.content_type + b"\r\n"
    )
    if answer.json_length is not None:
        headers += _HEADER_LENGTH_LINE % answer.json_length
    if answer.trace is None:
        slot.send(answer.status, headers, answer.body)
        return
    answer.sending()
    slot.send(answer.status, headers, answer.body, answer.sent)


def parsed_target(request: HttpRequest, slot: ResponseSlot) -> tuple[str, bytes, bytes] | None:
    """`split_target` of the request's target, or None once a 400 answered a malformed one."""
    try:
        return split_target(request.target)
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        shown = request.target[:200].decode("latin-1")
        slot.send(400, _CONTENT_TYPE[JSON], encode_error(f"malformed request target {shown!r}"))
        return None


def split_target(target: bytes) -> tuple[str, bytes, bytes]:
    """A request target as ASGI's scope has it: (path, percent-decoded; raw path; query)."""
    if target[:1] == b"/" and b"?" not in target and b"%" not in target:
        return target.decode("ascii"), target, b""
    url = httptools.parse_url(target)
    raw_path = url.path or b"/"
    path = raw_path.decode("ascii")
    if "%" in path:
        path = unquote(path)
    return path, raw_path, url.query or b""
