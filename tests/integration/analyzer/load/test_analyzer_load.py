"""The analyzer's load drivers against a real server (and a scripted stub for broken servers).

Counts are checked with generous bounds: the machine is small and shared, so no tight timing.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httptools
import psutil
import pytest

from analyzer.aio import run
from analyzer.errors import AnalyzerError
from analyzer.load.base import (
    DELAY_TOLERANCE_NS,
    LoadDriver,
    LoadLevel,
    RequestRecord,
    ScheduleProgress,
)
from analyzer.load.factory import connect
from analyzer.load.local import AsyncLoadDriver, InferTarget
from analyzer.load.options import LoadOptions
from analyzer.load.process import ProcessDriver
from analyzer.load.schedule import ScheduleSpec
from protocol.client.http import Endpoint, HttpClient, build_infer_request
from tests.conftest import PROJECT_ROOT
from tests.support.server_process import RunningServer

T = TypeVar("T")


def simple_options(server: RunningServer, **kwargs: Any) -> LoadOptions:
    return LoadOptions(url=server.url, model="simple", **kwargs)


def max_outstanding(records: list[RequestRecord]) -> int:
    """The most requests in flight at once, from the records' start and end times."""
    events = sorted([(r.start_ns, 1) for r in records] + [(r.end_ns, -1) for r in records])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


async def success_count(client: HttpClient, model: str = "simple") -> int:
    stats = await client.statistics(model)
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


async def run_for(driver: LoadDriver, level: LoadLevel, seconds: float) -> list[RequestRecord]:
    await driver.start(level)
    await asyncio.sleep(seconds)
    records = await driver.collect()
    return records + await driver.stop()


def established_to(port: int) -> list[Any]:
    return [
        c
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    ]


# connecting


def test_connect_describes_the_model(server: RunningServer) -> None:
    async def go() -> None:
        connected = await connect(simple_options(server, batch_size=4))
        driver, model, client = connected.driver, connected.model, connected.client
        await client.close()
        assert model.name == "simple" and model.version == "1" and model.max_batch_size == 8
        assert [t.name for t in model.inputs] == ["INPUT0", "INPUT1"]
        assert model.inputs[0].shape == [-1, 16]
        assert isinstance(driver, AsyncLoadDriver)

    asyncio.run(go())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"model": "nope"}, "model 'nope' is not known to the server at .*: .*nope"),
        ({"version": "7"}, "model 'simple' version '7' is not known to the server"),
        # gRPC at the HTTP port: no gRPC server answers there.
        ({"protocol": "grpc"}, r"cannot reach the server at 127\.0\.0\.1:\d+ \(gRPC\)"),
        ({"batch_size": 9}, "-b 9 exceeds the max_batch_size 8 of model 'simple'"),
    ],
)
def test_connect_refuses_clearly(
    server: RunningServer, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(AnalyzerError, match=message):
        asyncio.run(connect(LoadOptions(**{"url": server.url, "model": "simple", **options})))


def test_connect_to_nothing_says_so() -> None:
    port = _free_port()
    with pytest.raises(
        AnalyzerError, match=f"cannot reach the server at 127.0.0.1:{port}: connection refused"
    ):
        asyncio.run(connect(LoadOptions(url=f"127.0.0.1:{port}", model="simple")))


# concurrency mode


def test_concurrency_keeps_n_requests_outstanding(server: RunningServer) -> None:
    async def go() -> None:
        connected = await connect(simple_options(server))
        driver, client = connected.driver, connected.client
        before = await success_count(client)
        await driver.start(LoadLevel(concurrency=4))
        await asyncio.sleep(0.3)
        assert driver.in_flight == 4
        await asyncio.sleep(0.7)
        records = await driver.collect()
        records += await driver.stop()
        after = await success_count(client)
        await client.close()
        assert records and all(r.ok for r in records), {r.error for r in records}
        assert max_outstanding(records) == 4
        assert after - before == len(records)
        assert driver.in_flight == 0
        assert all(r.send_ns >= 0 and 0 <= r.recv_ns <= r.latency_ns for r in records)
        assert established_to(server.port) == []

    run(go())


def test_change_switches_levels_on_the_same_connections(server: RunningServer) -> None:
    async def go() -> None:
        connected = await connect(simple_options(server))
        driver, client = connected.driver, connected.client
        assert isinstance(driver, AsyncLoadDriver)
        before = await success_count(client)
        await driver.start(LoadLevel(concurrency=2))
        await asyncio.sleep(0.2)
        await driver.change(LoadLevel(concurrency=5))
        early = await driver.collect()
        await asyncio.sleep(0.3)
        assert driver.in_flight == 5 and driver.connection_count == 5
        peak = await driver.collect()
        await driver.change(LoadLevel(concurrency=1))
        await asyncio.sleep(0.3)
        assert driver.connection_count == 5  # kept open for the next level
        settling = await driver.collect()  # requests sent at concurrency 5 end here
        await asyncio.sleep(0.2)
        low = await driver.collect()
        await driver.change(LoadLevel(request_rate=100))
        await asyncio.sleep(0.3)
        assert driver.connection_count == 5  # 100/s needs no more connections
        rest = await driver.stop()
        after = await success_count(client)
        await client.close()
        assert max_outstanding(peak) == 5
        assert max_outstanding(low) == 1
        everything = peak + settling + low + rest
        assert all(r.ok for r in everything)
        assert after - before == len(everything) + len(early)

    asyncio.run(go())


# request-rate and custom-interval modes


@pytest.mark.parametrize(
    "options",
    [
        {"request_distribution": "constant"},
        {"request_distribution": "poisson", "seed": 5},
        {"request_intervals_us": [2000, 8000]},  # a mean of 200/s
    ],
    ids=["constant", "poisson", "intervals"],
)
def test_request_rate_sends_at_about_the_rate(
    server: RunningServer, options: dict[str, Any]
) -> None:
    async def go() -> list[RequestRecord]:
        connected = await connect(simple_options(server, **options))
        driver, client = connected.driver, connected.client
        await client.close()
        return await run_for(driver, LoadLevel(request_rate=200), 1.5)

    records = run(go())
    assert all(r.ok for r in records)
    assert 200 <= len(records) <= 380  # 300 expected


# errors


def test_rejected_requests_come_back_as_error_records(server: RunningServer) -> None:
    endpoint = Endpoint(server.host, server.port)
    body = b'{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":' + (
        b"[" + b",".join([b"1"] * 16) + b"]}]}"
    )
    bad = build_infer_request(endpoint, "simple", "", body, None)
    unknown = build_infer_request(endpoint, "nope", "", body, None)

    async def go() -> list[RequestRecord]:
        driver = AsyncLoadDriver(InferTarget(endpoint, (bad, unknown)))
        return await run_for(driver, LoadLevel(concurrency=2), 0.3)

    records = asyncio.run(go())
    assert records and not any(r.ok for r in records)
    messages = {r.error for r in records}
    assert any("missing input 'INPUT1'" in m for m in messages), messages
    assert any("'nope'" in m for m in messages), messages


# broken servers (a scripted stub)

Reply = Callable[[int], "bytes | None"]  # request number -> response bytes; None: hang up


async def with_stub(
    reply: Reply, body: Callable[[int], Awaitable[T]], idle_close_s: float = 0.0
) -> T:
    """Run `body(port)` while a stub server answers each request with `reply(n)` (and, with
    `idle_close_s`, closes a connection that long after answering, as keep-alive timeouts do)."""
    counter = iter(range(1_000_000))

    class Stub(asyncio.Protocol):
        def __init__(self) -> None:
            self.parser = httptools.HttpRequestParser(self)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            response = reply(next(counter))
            if response is None:
                self.transport.close()
            else:
                self.transport.write(response)
                if idle_close_s:
                    asyncio.get_running_loop().call_later(idle_close_s, self.transport.close)

    stub = await asyncio.get_running_loop().create_server(Stub, "127.0.0.1", 0)
    try:
        return await body(stub.sockets[0].getsockname()[1])
    finally:
        stub.close()


def stub_driver(port: int) -> AsyncLoadDriver:
    request = build_infer_request(Endpoint("127.0.0.1", port), "m", "", b"{}", None)
    return AsyncLoadDriver(InferTarget(Endpoint("127.0.0.1", port), (request,)))


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
CLOSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


@pytest.mark.parametrize(
    ("reply", "expect_ok", "expect_error"),
    [
        (lambda n: CHUNKED, True, None),
        (lambda n: CLOSE, True, None),  # Connection: close: reconnect for the next request
        (lambda n: None if n % 2 else CHUNKED, True, "closed the connection"),
        (
            lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            False,
            "malformed HTTP response",
        ),
    ],
    ids=["chunked", "connection-close", "hang-up", "malformed"],
)
def test_broken_servers_give_records_not_hangs(
    reply: Reply, expect_ok: bool, expect_error: str | None
) -> None:
    async def body(port: int) -> list[RequestRecord]:
        return await run_for(stub_driver(port), LoadLevel(concurrency=2), 0.3)

    records = asyncio.run(with_stub(reply, body))
    assert len(records) > 10
    assert any(r.ok for r in records) == expect_ok
    if expect_error is None:
        assert all(r.ok for r in records), {r.error for r in records}
    else:
        assert any(expect_error in r.error for r in records), {r.error for r in records}


def test_connections_the_server_closed_while_idle_are_not_reused() -> None:
    async def body(port: int) -> list[RequestRecord]:
        return await run_for(stub_driver(port), LoadLevel(request_rate=20), 0.5)

    records = asyncio.run(with_stub(lambda n: CHUNKED, body, idle_close_s=0.01))
    assert len(records) >= 8 and all(r.ok for r in records), {r.error for r in records}


def test_error_status_carries_the_servers_message() -> None:
    reply = b'HTTP/1.1 503 No\r\nContent-Length: 20\r\n\r\n{"error":"too busy"}'

    async def body(port: int) -> list[RequestRecord]:
        return await run_for(stub_driver(port), LoadLevel(concurrency=1), 0.2)

    records = asyncio.run(with_stub(lambda n: reply, body))
    assert records and {r.error for r in records} == {"too busy"}


def test_unreachable_server_gives_error_records_at_a_bounded_pace() -> None:
    port = _free_port()

    async def go() -> list[RequestRecord]:
        return await run_for(stub_driver(port), LoadLevel(concurrency=2), 0.5)

    records = asyncio.run(go())
    assert records and not any(r.ok for r in records)
    assert {r.error for r in records} == {
        f"cannot reach the server at 127.0.0.1:{port}: connection refused"
    }
    assert len(records) < 60  # retried after a pause, not in a busy loop


def test_unanswered_requests_fail_when_stop_gives_up() -> None:
    async def body(port: int) -> list[RequestRecord]:
        request = build_infer_request(Endpoint("127.0.0.1", port), "m", "", b"{}", None)
        driver = AsyncLoadDriver(
            InferTarget(Endpoint("127.0.0.1", port), (request,)), drain_timeout_s=0.2
        )
        return await run_for(driver, LoadLevel(concurrency=3), 0.1)

    never = b""  # the stub writes nothing: the requests stay unanswered
    records = asyncio.run(with_stub(lambda n: never, body))
    assert len(records) == 3
    assert all("no response from the server" in r.error for r in records)


# keeping a request-rate schedule


def _stub_target(port: int) -> InferTarget:
    request = build_infer_request(Endpoint("127.0.0.1", port), "m", "", b"{}", None)
    return InferTarget(Endpoint("127.0.0.1", port), (request,))


def test_request_rate_at_the_connection_cap_waits_and_says_so() -> None:
    async def body(port: int) -> tuple[ScheduleProgress, list[RequestRecord]]:
        driver = AsyncLoadDriver(_stub_target(port), max_connections=2, drain_timeout_s=0.1)
        await driver.start(LoadLevel(request_rate=1000))
        await asyncio.sleep(0.2)  # about 200 sends due; two connections, never answered
        progress = driver.schedule_progress
        return progress, await driver.stop()

    progress, records = asyncio.run(with_stub(lambda n: b"", body))
    assert progress.sent == 2 and progress.max_connections == 2
    assert progress.cap_waits >= 1
    assert progress.behind_ns > DELAY_TOLERANCE_NS  # the third send is long overdue
    assert len(records) == 2 and not any(r.ok for r in records)


def test_request_rate_counts_the_sends_that_left_late() -> None:
    async def body(port: int) -> tuple[ScheduleProgress, ScheduleProgress]:
        driver = AsyncLoadDriver(_stub_target(port))
        await driver.start(LoadLevel(request_rate=1000))
        await asyncio.sleep(0.05)
        before = driver.schedule_progress
        time.sleep(0.05)  # the event loop is held: the sends due meanwhile leave late
        await asyncio.sleep(0.01)
        after = driver.schedule_progress
        await driver.stop()
        return before, after

    before, after = asyncio.run(with_stub(lambda n: CHUNKED, body))
    late = after.since(before)
    assert late.delayed >= 25 and late.sent >= late.delayed  # about 49 due more than 1 ms ago
    assert late.cap_waits == 0 and late.behind_ns == 0


# worker processes


def test_worker_processes_share_the_load(server: RunningServer) -> None:
    async def go() -> None:
        connected = await connect(simple_options(server, worker_processes=2))
        driver, client = connected.driver, connected.client
        assert isinstance(driver, ProcessDriver)
        before = await success_count(client)
        await driver.start(LoadLevel(concurrency=3))
        pids = driver.pids
        await asyncio.sleep(0.8)
        records = await driver.collect()
        assert driver.in_flight == 3
        await driver.change(LoadLevel(request_rate=150))
        switching = await driver.collect()
        await asyncio.sleep(1.0)
        at_rate = await driver.collect()
        rest = await driver.stop()
        after = await success_count(client)
        await client.close()

        everything = records + switching + at_rate + rest
        assert all(r.ok for r in everything), {r.error for r in everything}
        assert after - before == len(everything)
        assert [r.end_ns for r in records] == sorted(r.end_ns for r in records)
        assert max_outstanding(records) == 3
        assert 100 <= len(at_rate) <= 200  # 150 expected
        assert len(pids) == 2 and not any(_alive(p) for p in pids)

    run(go())


def test_worker_processes_report_the_schedule_together() -> None:
    async def body(port: int) -> ScheduleProgress:
        driver = ProcessDriver(
            _stub_target(port), ScheduleSpec(), 2, drain_timeout_s=0.1, max_connections=4
        )
        await driver.start(LoadLevel(request_rate=500))
        try:
            await asyncio.sleep(0.3)
            await driver.collect()
            return driver.schedule_progress
        finally:
            await driver.stop()

    progress = run(with_stub(lambda n: b"", body))
    # Two connections each (4 split over 2 workers), never answered: 4 sends, then waiting.
    assert progress.sent == 4 and progress.max_connections == 4
    assert progress.cap_waits >= 2 and progress.behind_ns > DELAY_TOLERANCE_NS


def test_workers_exit_when_the_parent_dies(server: RunningServer) -> None:
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        from analyzer.load.factory import connect
        from analyzer.load.base import LoadLevel
        from analyzer.load.options import LoadOptions

        async def main():
            options = LoadOptions(url="{server.url}", model="simple", worker_processes=2)
            connected = await connect(options)
            driver, client = connected.driver, connected.client
            await driver.start(LoadLevel(concurrency=2))
            print(*driver.pids, flush=True)
            await asyncio.sleep(60)

        asyncio.run(main())
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], cwd=PROJECT_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(psutil.pid_exists(p) for p in pids)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
