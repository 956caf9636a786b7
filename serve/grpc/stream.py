"""ModelStreamInfer: many requests on one bidirectional stream, served concurrently.

Each request is queued as soon as it is read; its response (or its error, as
`error_message` with the request's id) is written when it completes, in completion order. A
decoupled model's request may have any number of responses, each written as it comes. A bad
request answers in the stream and the stream goes on. The stream ends once the client has
stopped sending and every request read has been answered; a stream that ends before (the client
cancelled it or went away) cancels the requests it still has open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tritonclient.grpc import service_pb2 as pb

from serve.dataplane_api import DataPlaneApi
from serve.errors import ServeError
from serve.grpc.codec import decode_infer_request, encode_infer_response
from serve.inference import Cancellation, InferRequest, InferResponse


def error_response(message: pb.ModelInferRequest, error: str) -> pb.ModelStreamInferResponse:
    """The stream's answer to a failed request: its error, with the request's id so the client
    knows which one failed."""
    return pb.ModelStreamInferResponse(
        error_message=error,
        infer_response=pb.ModelInferResponse(
            model_name=message.model_name, model_version=message.model_version, id=message.id
        ),
    )


def stream_answer(
    message: pb.ModelInferRequest,
    request: InferRequest,
    result: InferResponse | ServeError | None,
    final: bool,
) -> pb.ModelStreamInferResponse | None:
    """What the stream carries for one response (None: nothing). A decoupled model's responses
    carry `triton_final_response`; a final flag sent with no response becomes an empty
    response only when the request asked for it (`triton_enable_empty_final_response`)."""
    if isinstance(result, ServeError):
        return error_response(message, result.message)
    decoupled = request.on_response is not None
    if result is None:
        if not request.parameters.get("triton_enable_empty_final_response"):
            return None
        infer = pb.ModelInferResponse(
            model_name=message.model_name, model_version=message.model_version, id=message.id
        )
    else:
        try:
            infer = encode_infer_response(result, request)
        except ServeError as exc:
            return error_response(message, exc.message)
        except Exception as exc:  # an answer must come whatever happens: the stream waits on it
            return error_response(message, f"internal error encoding the response: {exc!r}")
    if decoupled:
        infer.parameters["triton_final_response"].bool_param = final
    return pb.ModelStreamInferResponse(infer_response=infer)


class StreamSession:
    """One ModelStreamInfer call: reads requests, submits them, hands responses to the writer."""

    def __init__(self, dataplane: DataPlaneApi) -> None:
        self._dataplane = dataplane
        self._answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        self._in_flight = 0
        self._reading = True
        self._open: set[Cancellation] = set()  # the requests not yet answered in full

    async def responses(
        self, requests: AsyncIterator[pb.ModelInferRequest]
    ) -> AsyncIterator[pb.ModelStreamInferResponse]:
        reader = asyncio.create_task(self._read(requests))
        try:
            while (answer := await self._answers.get()) is not None:
                yield answer
            await reader  # raises what ended the reading, if anything
        finally:
            reader.cancel()
            # Ended with requests open (the client cancelled, or the call broke): cancel them.
            for cancellation in list(self._open):
                cancellation.cancel()

    async def _read(self, requests: AsyncIterator[pb.ModelInferRequest]) -> None:
        try:
            async for message in requests:
                self._submit(message)
        finally:
            self._reading = False
            if self._in_flight == 0:
                self._answers.put_nowait(None)

    def _submit(self, message: pb.ModelInferRequest) -> None:
        self._in_flight += 1
        cancellation = Cancellation()
        self._open.add(cancellation)
        try:
            request = decode_infer_request(message)
            request.cancellation = cancellation
            self._dataplane.submit_stream(
                request, lambda result, final: self._done(message, request, result, final)
            )
        except ServeError as exc:
            self._open.discard(cancellation)
            self._answer(error_response(message, exc.message), True)

    def _done(
        self,
        message: pb.ModelInferRequest,
        request: InferRequest,
        result: InferResponse | ServeError | None,
        final: bool,
    ) -> None:
        if final and request.cancellation is not None:
            self._open.discard(request.cancellation)
        self._answer(stream_answer(message, request, result, final), final)

    def _answer(self, answer: pb.ModelStreamInferResponse | None, final: bool) -> None:
        if final:
            self._in_flight -= 1
        if answer is not None:
            self._answers.put_nowait(answer)
        if not self._reading and self._in_flight == 0:
            self._answers.put_nowait(None)
