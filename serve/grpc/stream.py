"""ModelStreamInfer: many requests on one bidirectional stream, served concurrently.

Each request is queued as soon as it is read; its response (or its error, as
`error_message` with the request's id) is written when it completes, in completion order. A bad
request answers in the stream and the stream goes on. The stream ends once the client has
stopped sending and every request read has been answered.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from tritonclient.grpc import service_pb2 as pb

from serve.dataplane import DataPlane
from serve.errors import ServeError
from serve.grpc.codec import decode_infer_request, encode_infer_response
from serve.inference import InferRequest, InferResponse


def error_response(message: pb.ModelInferRequest, error: str) -> pb.ModelStreamInferResponse:
    """The stream's answer to a failed request: its error, with the request's id so the client
    knows which one failed."""
    return pb.ModelStreamInferResponse(
        error_message=error,
        infer_response=pb.ModelInferResponse(
            model_name=message.model_name, model_version=message.model_version, id=message.id
        ),
    )


class StreamSession:
    """One ModelStreamInfer call: reads requests, submits them, hands responses to the writer."""

    def __init__(self, dataplane: DataPlane) -> None:
        self._dataplane = dataplane
        self._answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        self._in_flight = 0
        self._reading = True

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
        try:
            request = decode_infer_request(message)
            self._dataplane.submit(request, lambda result: self._done(message, request, result))
        except ServeError as exc:
            self._answer(error_response(message, exc.message))

    def _done(
        self,
        message: pb.ModelInferRequest,
        request: InferRequest,
        result: InferResponse | ServeError,
    ) -> None:
        if isinstance(result, ServeError):
            self._answer(error_response(message, result.message))
            return
        try:
            answer = pb.ModelStreamInferResponse(
                infer_response=encode_infer_response(result, request)
            )
        except ServeError as exc:
            answer = error_response(message, exc.message)
        except Exception as exc:  # an answer must come whatever happens: the stream waits on it
            answer = error_response(message, f"internal error encoding the response: {exc!r}")
        self._answer(answer)

    def _answer(self, answer: pb.ModelStreamInferResponse) -> None:
        self._in_flight -= 1
        self._answers.put_nowait(answer)
        if not self._reading and self._in_flight == 0:
            self._answers.put_nowait(None)
