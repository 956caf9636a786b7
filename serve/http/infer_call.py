"""POST .../infer from body bytes to an answer, completed by the DataPlane's callback.

Both HTTP front ends use it: the native one (`serve.http.native`) writes the answer from the
callback itself, the ASGI one (`serve.http.infer_route`) awaits it. When the core traces the
request, the answer carries the trace, held open (with the request's reception stamped) until
the front end has sent the response: `sending()` before the write, `sent()` after it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

from protocol.headers import CONTENT_TYPE_BINARY, CONTENT_TYPE_JSON
from serve.dataplane_api import DataPlaneApi
from serve.errors import ServeError
from serve.http.codec import (
    decode_infer_request,
    encode_error,
    encode_infer_response_parts,
    parse_header_length,
)
from serve.http.status import HTTP_STATUS
from serve.inference import Cancellation, InferRequest, InferResponse
from serve.trace.request_trace import RequestTrace

log = logging.getLogger("serve.http")

INFER_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?/infer$")
JSON = CONTENT_TYPE_JSON.encode()
BINARY = CONTENT_TYPE_BINARY.encode()
# A response at least this large keeps its binary outputs as separate buffers (no join).
KEEP_PARTS_MIN = 1 << 16

Body = bytes | list[bytes | memoryview]


class InferAnswer:
    """A response to send: status, body (bytes, or the buffers of a large one in order),
    content type and the JSON header's length (None for an all-JSON body)."""

    __slots__ = ("body", "content_type", "json_length", "status", "trace")

    def __init__(
        self,
        status: int,
        body: Body,
        content_type: bytes = JSON,
        json_length: int | None = None,
        trace: RequestTrace | None = None,
    ) -> None:
        self.status = status
        self.body = body
        self.content_type = content_type
        self.json_length = json_length
        self.trace = trace

    def sending(self) -> None:
        if self.trace is not None:
            self.trace.stamp("HTTP_SEND_START")

    def sent(self) -> None:
        """The response is written (or its connection is gone): the trace may be written."""
        trace, self.trace = self.trace, None
        if trace is not None:
            trace.stamp("HTTP_SEND_END")
            trace.release()


def error_answer(error: ServeError) -> InferAnswer:
    """The infer answer for `error`: its kind's HTTP status and the JSON error body."""
    return InferAnswer(HTTP_STATUS[error.kind], encode_error(error.message))


def submit_infer(
    dataplane: DataPlaneApi,
    body: bytes | memoryview,
    header_length: bytes | None,
    model: str,
    version: str,
    on_answer: Callable[[InferAnswer], None],
    recv_start: int = 0,
    cancellation: Cancellation | None = None,
) -> None:
    """Decode and queue the request; `on_answer` gets its answer exactly once, possibly before
    this returns (a request refused before it is queued). `header_length` is the raw
    Inference-Header-Content-Length value; `recv_start` (monotonic ns, 0 when not tracing) is
    when the request began to arrive, stamped with its end (now) on a traced request. The front
    end cancels `cancellation` when its client goes away before the answer."""
    recv_end = time.monotonic_ns() if recv_start else 0
    try:
        request = decode_infer_request(body, parse_header_length(header_length), model, version)
        request.cancellation = cancellation
        dataplane.submit(
            request,
            lambda result: on_answer(_answer(request, result, recv_start, recv_end)),
        )
    except ServeError as exc:
        on_answer(error_answer(exc))


def _answer(
    request: InferRequest, result: InferResponse | ServeError, recv_start: int, recv_end: int
) -> InferAnswer:
    # The core still holds a traced request's trace while its completion callback runs.
    trace = _join_trace(request, recv_start, recv_end) if recv_start else None
    try:
        if isinstance(result, ServeError):
            raise result
        parts, json_length = encode_infer_response_parts(result, request)
    except ServeError as exc:
        answer = error_answer(exc)
        answer.trace = trace
        return answer
    except Exception as exc:  # a bug: answered 500, as the ASGI server would
        log.exception("encoding the inference response failed")
        answer = InferAnswer(500, encode_error(f"internal error: {exc!r}"), trace=trace)
        return answer
    payload: Body = parts
    if len(parts) == 1:
        payload = bytes(parts[0])
    elif sum(map(len, parts)) < KEEP_PARTS_MIN:
        payload = b"".join(parts)
    return InferAnswer(200, payload, JSON if json_length is None else BINARY, json_length, trace)


def _join_trace(request: InferRequest, recv_start: int, recv_end: int) -> RequestTrace | None:
    """When the core traces the request, add its reception and keep the trace open until
    the response is sent."""
    trace = request.trace
    if trace is None or not trace.hold():
        return None
    trace.stamp("HTTP_RECV_START", recv_start)
    trace.stamp("HTTP_RECV_END", recv_end)
    return trace
