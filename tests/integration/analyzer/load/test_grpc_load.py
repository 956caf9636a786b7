"""The load drivers over gRPC against a real server: unary ModelInfer calls and one
ModelStreamInfer stream per connection, in this process and in worker processes; every
request sent is one record and one request the server served."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from analyzer.aio import run
from analyzer.load.base import LoadLevel, RequestRecord
from analyzer.load.factory import connect
from analyzer.load.local import AsyncLoadDriver, InferTarget
from analyzer.load.options import LoadOptions
from analyzer.load.process import ProcessDriver
from protocol.client.control import ControlClient
from protocol.client.grpc_infer import encode_grpc_infer_request
from protocol.client.http import Endpoint
from tests.support.server_process import RunningServer


def grpc_options(server: RunningServer, **kwargs: Any) -> LoadOptions:
    return LoadOptions(url=server.grpc_url, model="simple", protocol="grpc", **kwargs)


def max_outstanding(records: list[RequestRecord]) -> int:
    events = sorted([(r.start_ns, 1) for r in records] + [(r.end_ns, -1) for r in records])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


async def success_count(client: ControlClient) -> int:
    stats = await client.statistics("simple")
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_concurrency_keeps_n_requests_outstanding(server: RunningServer, streaming: bool) -> None:
    async def go() -> None:
        connected = await connect(grpc_options(server, streaming=streaming))
        driver, client = connected.driver, connected.client
        assert isinstance(driver, AsyncLoadDriver)
        try:
            before = await success_count(client)
            await driver.start(LoadLevel(concurrency=3))
            await asyncio.sleep(0.5)
            assert driver.in_flight == 3
            at_concurrency = await driver.collect()
            await driver.change(LoadLevel(request_rate=150))
            await asyncio.sleep(1.0)
            records = at_concurrency + await driver.collect()
            records += await driver.stop()
            after = await success_count(client)
        finally:
            await connected.close()
        assert records and all(r.ok for r in records), {r.error for r in records}
        assert max_outstanding(at_concurrency) == 3
        assert after - before == len(records)
        assert all(r.end_ns >= r.start_ns and r.send_ns >= 0 for r in records)

    run(go())


@pytest.mark.parametrize("streaming", [False, True], ids=["unary", "streaming"])
def test_worker_processes_send_over_grpc(server: RunningServer, streaming: bool) -> None:
    async def go() -> None:
        options = grpc_options(server, streaming=streaming, worker_processes=2)
        connected = await connect(options)
        driver, client = connected.driver, connected.client
        assert isinstance(driver, ProcessDriver)
        try:
            before = await success_count(client)
            await driver.start(LoadLevel(concurrency=3))
            await asyncio.sleep(0.8)
            records = await driver.collect()
            assert driver.in_flight == 3
            records += await driver.stop()
            after = await success_count(client)
        finally:
            await connected.close()
        assert records and all(r.ok for r in records), {r.error for r in records}
        assert after - before == len(records)

    run(go())


def test_a_server_that_is_not_there_fails_each_request_and_backs_off() -> None:
    with socket.socket() as holder:  # a port nobody listens on while the load runs
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        request = encode_grpc_infer_request("simple", "", [], [])
        for transport in ("grpc", "grpc_stream"):
            target = InferTarget(Endpoint("127.0.0.1", port), (request,), transport)

            async def go(target: InferTarget = target) -> list[RequestRecord]:
                driver = AsyncLoadDriver(target)
                await driver.start(LoadLevel(concurrency=2))
                await asyncio.sleep(0.5)
                return await driver.stop()

            records = run(go())
            assert records and not any(r.ok for r in records)
            assert all(f"127.0.0.1:{port}" in r.error for r in records), records[0].error
            # Retried every 50 ms per connection, not in a tight loop.
            assert len(records) <= 2 * (0.5 / 0.05 + 2), len(records)
