"""How the native connection reads (asyncio.BufferedProtocol): what an open connection holds
between reads."""

from __future__ import annotations

import tracemalloc

from serve.http.native.protocol import READ_SIZE
from tests.unit.serve.http.test_native_protocol import connect, get, parse

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
