"""The body budget shared by an endpoint's connections: a request whose body does not fit
waits, its connection not read, in the order they asked, until the bodies ahead of it are
handed on; an admitted body always completes; a closed or refused connection gives back what
it held or asked for."""

from __future__ import annotations

from serve.http.limits import HttpLimits
from serve.http.native.budget import BodyBudget
from tests.unit.serve.http.test_native_protocol import connect, parse, post

LIMITS = HttpLimits(max_input_bytes=100, read_timeout_s=5.0)


def _head(size: int, path: str = "/a") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode()


def test_a_body_that_does_not_fit_waits_unread_until_the_one_ahead_is_handed_on() -> None:
    budget = BodyBudget(150)
    first, first_transport, first_handler = connect(limits=LIMITS, budget=budget)
    second, second_transport, second_handler = connect(limits=LIMITS, budget=budget)
    first.data_received(_head(100) + b"x" * 40)  # admitted: 100 of 150 held
    assert budget.used == 100 and not first_transport.paused
    second.data_received(_head(80, "/b"))  # 80 more does not fit: not read any further
    assert second_transport.paused and budget.waiting == 1
    first.data_received(b"x" * 60)  # the first body is whole and handed on
    assert first_handler.requests[0].body == b"x" * 100
    assert not second_transport.paused and budget.used == 80  # the second now holds its 80
    second.data_received(b"y" * 80)
    assert second_handler.requests[0].body == b"y" * 80
    assert budget.used == 0


def test_the_waiting_are_admitted_in_the_order_they_asked() -> None:
    budget = BodyBudget(100)
    holder, _, _ = connect(limits=LIMITS, budget=budget)
    holder.data_received(_head(100))
    waiting = [connect(limits=LIMITS, budget=budget) for _ in range(3)]
    for index, (connection, _, _) in enumerate(waiting):
        connection.data_received(_head(60 - 10 * index, f"/{index}"))
    assert [t.paused for _, t, _ in waiting] == [True, True, True]
    holder.data_received(b"x" * 100)
    # 60 is first in line: then 50 does not fit behind it, and 40 does not jump the line
    assert [t.paused for _, t, _ in waiting] == [False, True, True]
    waiting[0][0].data_received(b"x" * 60)
    assert [t.paused for _, t, _ in waiting] == [False, False, False]  # 50 + 40 fit


def test_one_request_is_admitted_whatever_its_size_when_nothing_is_held() -> None:
    budget = BodyBudget(10)
    connection, transport, handler = connect(limits=LIMITS, budget=budget)
    connection.data_received(post("/a", b"z" * 100))
    assert handler.requests[0].body == b"z" * 100 and not transport.paused
    assert budget.used == 0


def test_a_connection_lost_while_holding_or_waiting_gives_it_back() -> None:
    budget = BodyBudget(100)
    holder, _, _ = connect(limits=LIMITS, budget=budget)
    holder.data_received(_head(100) + b"x" * 10)
    waiter, _, _ = connect(limits=LIMITS, budget=budget)
    waiter.data_received(_head(50))
    third, third_transport, _ = connect(limits=LIMITS, budget=budget)
    third.data_received(_head(50))
    waiter.connection_lost(None)  # leaves the line
    assert budget.waiting == 1
    holder.connection_lost(None)  # its 100 come back: the third is admitted
    assert budget.used == 50 and not third_transport.paused


def test_a_refused_request_gives_back_its_reservation() -> None:
    budget = BodyBudget(100)
    connection, transport, _ = connect(limits=LIMITS, budget=budget)
    connection.data_received(_head(100) + b"x" * 10)
    assert budget.used == 100
    connection.read_timed_out()  # 408
    (refused,) = parse(transport.written)
    assert refused.status == 408 and budget.used == 0


def test_a_chunked_body_holds_the_size_limit_until_it_ends() -> None:
    budget = BodyBudget(150)
    connection, _, handler = connect(limits=LIMITS, budget=budget)
    head = b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    connection.data_received(head + b"5\r\nhello\r\n")
    assert budget.used == 100  # its size is known only at its end
    connection.data_received(b"0\r\n\r\n")
    assert handler.requests[0].body == b"hello" and budget.used == 0


def test_a_body_that_came_whole_with_its_head_does_not_wait() -> None:
    budget = BodyBudget(100)
    holder, _, _ = connect(limits=LIMITS, budget=budget)
    holder.data_received(_head(100))
    connection, transport, handler = connect(limits=LIMITS, budget=budget)
    connection.data_received(post("/b", b"q" * 30))  # already read: handed on at once
    assert handler.requests[0].body == b"q" * 30
    assert budget.waiting == 0 and budget.used == 100
    assert not transport.paused
