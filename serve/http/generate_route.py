"""The generate extension's HTTP routes (`POST .../generate`, `.../generate_stream`) on the
control plane, as tritonserver 2.51 answers them:

- `generate`: one JSON object (`serve.generate`); a decoupled model must send exactly one
  response, else the answer is 200 with `{"error": "generate expects model to produce exactly
  1 response, ..."}` (Triton's status and words);
- `generate_stream`: `text/event-stream; charset=utf-8`, one `data: {...}` event per response
  as the model sends it (a bare final flag sends none), an error mid-stream as a `data:
  {"error": ...}` event; a request refused before inference is an ordinary JSON error.
A client that goes away mid-stream cancels the request (the model sees `is_cancelled()`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from protocol.metadata import ModelMetadata
from serve.dataplane_api import DataPlaneApi
from serve.errors import ServeError
from serve.generate import ONE_RESPONSE_ONLY, generate_answer, generate_error, generate_request
from serve.http.router import Answer, ControlRequest, Router
from serve.inference import Cancellation, InferRequest, InferResponse

_JSON = b"application/json"
_EVENTS = b"text/event-stream; charset=utf-8"
Outcome = tuple[InferResponse | ServeError | None, bool]


def add_generate_routes(app: Router, dataplane: DataPlaneApi) -> None:
    """Add POST .../generate and .../generate_stream (with and without a version) to `app`, each
    request submitted to `dataplane` as a stream of responses."""

    def request_of(control: ControlRequest) -> InferRequest:
        model = control.params["model"]
        version = control.params.get("version", "")
        metadata = ModelMetadata.from_json(dataplane.model_metadata(model, version))
        request = generate_request(model, version, metadata.inputs, control.body)
        request.cancellation = Cancellation()
        return request

    def start(request: InferRequest) -> asyncio.Queue[Outcome]:
        outcomes: asyncio.Queue[Outcome] = asyncio.Queue()
        dataplane.submit_stream(request, lambda result, final: outcomes.put_nowait((result, final)))
        return outcomes

    async def generate(control: ControlRequest) -> Answer:
        request = request_of(control)
        outcomes = start(request)
        answers: list[InferResponse] = []
        while True:
            result, final = await outcomes.get()
            if isinstance(result, ServeError):
                raise result
            if result is not None:
                answers.append(result)
            if final:
                break
        if len(answers) != 1:
            return Answer(200, generate_error(ONE_RESPONSE_ONLY), _JSON)
        return Answer(200, generate_answer(answers[0]), _JSON)

    async def generate_stream(control: ControlRequest) -> Answer:
        request = request_of(control)
        outcomes = start(request)

        async def events() -> AsyncIterator[bytes]:
            ended = False
            try:
                while not ended:
                    result, ended = await outcomes.get()
                    if isinstance(result, ServeError):
                        ended = True
                        yield b"data: " + generate_error(result.message) + b"\n\n"
                    elif result is not None:
                        yield b"data: " + generate_answer(result) + b"\n\n"
            finally:
                if not ended and request.cancellation is not None:
                    request.cancellation.cancel()  # the client went away mid-stream

        return Answer(200, content_type=_EVENTS, stream=events())

    for suffix in ("", "/versions/{version}"):
        model = "/v2/models/{model}" + suffix
        app.add("POST", model + "/generate", generate)
        app.add("POST", model + "/generate_stream", generate_stream)
