"""How the native connection reads (asyncio.BufferedProtocol): what an open connection holds
between reads, and requests cut at every awkward place by the socket's reads."""

from __future__ import annotations

import tracemalloc

from serve.http.native.protocol import DIRECT_BODY_MIN, READ_SIZE, HttpConnection
from tests.unit.serve.http.test_native_protocol import connect, get, parse, post

# perf_analyzer's async request-rate mode opens a connection for each request that finds all
# of its connections busy: a server that falls behind holds thousands of them.
CONNECTIONS = 300


def test_open_connections_do_not_each_hold_a_read_buffer() -> None:
    held = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(CONNECTIONS):
            connection, transport, handler = connect()
            connection.data_received(get("/ready"))
            handler.answer(0)
            held.append((connection, transport, handler))
        per_connection = (tracemalloc.get_traced_memory()[0] - before) / CONNECTIONS
    finally:
        tracemalloc.stop()
    assert all(parse(transport.written)[0].status == 200 for _, transport, _ in held)
    assert per_connection < READ_SIZE / 8, f"{per_connection:.0f} bytes per open connection"


def test_a_read_cut_short_by_the_close_leaves_the_next_connection_a_buffer() -> None:
    # the transport asked for a buffer, then the read found EOF: buffer_updated never came
    gone, _, _ = connect()
    assert len(gone.get_buffer(-1)) == READ_SIZE
    gone.connection_lost(None)
    connection, transport, handler = connect()
    connection.data_received(get("/after"))
    handler.answer(0)
    assert [r.body for r in parse(transport.written)] == [b"/after"]


def _read_in_cuts(connection: HttpConnection, stream: bytes, cuts: list[int]) -> None:
    """`stream` as socket reads that end at each of `cuts` (a read never crosses a cut, and
    fills at most the buffer the connection offers)."""
    start = 0
    for end in [*cuts, len(stream)]:
        while start < end:
            buffer = connection.get_buffer(-1)
            size = min(len(buffer), end - start)
            buffer[:size] = stream[start:end][:size]
            start += size
            connection.buffer_updated(size)


def test_pipelined_requests_cut_at_every_awkward_place_are_read_whole() -> None:
    header = b'{"inputs":[{"name":"X","datatype":"UINT8","shape":[%d]}]}'
    bodies = [
        header % 3 + b"abc",
        header % DIRECT_BODY_MIN + bytes(range(256)) * (DIRECT_BODY_MIN // 256),
        header % 7 + b"1234567",
        b"z" * (DIRECT_BODY_MIN - 1),  # just under: read with the parser
        bytes(reversed(range(256))) * (DIRECT_BODY_MIN // 256 + 1),  # over: read in place
        b"tail",
    ]
    requests = [post(f"/r{i}", body) for i, body in enumerate(bodies)]
    stream = b"".join(requests)
    places = set()
    offset = 0
    for request in requests:
        body_at = offset + request.index(b"\r\n\r\n") + 4
        end = offset + len(request)
        # in the headers' blank line, at and around the body's start (inside its JSON), at
        # the direct threshold, the end of the body and the start of the next request
        places |= {body_at - 2, body_at, body_at + 1, body_at + 20, body_at + DIRECT_BODY_MIN}
        places |= {end - 1, end, end + 3}
        offset = end
    places = {place for place in places if 0 < place < len(stream)}
    cut_sets = [[place] for place in sorted(places)]
    cut_sets += [sorted({place, place + 1}) for place in sorted(places)]  # a 1-byte read
    cut_sets.append(sorted(places))
    for cuts in cut_sets:
        connection, transport, handler = connect()
        _read_in_cuts(connection, stream, cuts)
        assert [bytes(r.body) for r in handler.requests] == bodies, cuts
        for index in range(len(bodies)):
            handler.answer(index, b"%d" % index)
        answers = parse(transport.written)
        assert [a.body for a in answers] == [b"%d" % i for i in range(len(bodies))], cuts
        assert not transport.closed
