"""pb_utils' cancellation API over fake services: `is_cancelled()` asks the server by the
request's slot until it answers True, then keeps it (Triton's caching); a request the model
built itself is never cancelled and asks nothing; `ResponseIterator.cancel()` reaches the
server while the iteration goes on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from serve.backends.python import pb_utils
from serve.backends.python.response import ERROR_KINDS
from serve.errors import ErrorKind
from serve.grpc.status import GRPC_STATUS
from serve.http.status import HTTP_STATUS


class FakeServices:
    def __init__(self) -> None:
        self.cancelled_slots: set[int] = set()
        self.asked: list[tuple[str, tuple[Any, ...]]] = []

    def control(self, op: str, args: tuple[Any, ...]) -> Any:
        self.asked.append((op, args))
        assert op == "is_cancelled"
        return args[0] in self.cancelled_slots


@pytest.fixture
def services() -> Iterator[FakeServices]:
    fake = FakeServices()
    pb_utils._install_services(fake)  # type: ignore[arg-type]
    yield fake
    pb_utils._install_services(None)


def test_request_asks_by_its_slot_until_cancelled_then_keeps_it(services: FakeServices) -> None:
    request = pb_utils.InferenceRequest(model_name="m")
    request._slot = 7
    assert request.is_cancelled() is False
    services.cancelled_slots.add(7)
    assert request.is_cancelled() is True
    services.cancelled_slots.clear()
    assert request.is_cancelled() is True
    assert services.asked == [("is_cancelled", (7,)), ("is_cancelled", (7,))]


def test_a_request_built_by_the_model_is_never_cancelled(services: FakeServices) -> None:
    assert pb_utils.InferenceRequest(model_name="m").is_cancelled() is False
    assert services.asked == []


def test_response_sender_asks_for_its_request(services: FakeServices) -> None:
    sender = pb_utils.InferenceResponseSender(lambda response, flags: None, slot=3)
    services.cancelled_slots.add(3)
    assert sender.is_cancelled() is True
    assert pb_utils.InferenceResponseSender(lambda response, flags: None).is_cancelled() is False
    assert services.asked == [("is_cancelled", (3,))]


def test_response_iterator_cancel_and_iteration() -> None:
    cancelled: list[bool] = []
    responses = iter([pb_utils.InferenceResponse(), pb_utils.InferenceResponse()])
    iterator = pb_utils.ResponseIterator(responses, lambda: cancelled.append(True))
    assert iter(iterator) is iterator
    next(iterator)
    iterator.cancel()
    assert cancelled == [True]
    assert len(list(iterator)) == 1


def test_a_cancelled_error_from_the_model_is_a_cancelled_error_kind() -> None:
    # Answered as tritonserver answers TRITONSERVER_ERROR_CANCELLED: 400 / gRPC CANCELLED.
    assert ERROR_KINDS[pb_utils.TritonError.CANCELLED] is ErrorKind.CANCELLED
    assert HTTP_STATUS[ErrorKind.CANCELLED] == 400
    assert GRPC_STATUS[ErrorKind.CANCELLED] is grpc.StatusCode.CANCELLED
