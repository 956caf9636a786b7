"""Cancelled requests in the schedulers: a request whose client went away while it waited in a
queue is answered CANCELLED and never runs (dynamic batcher, default scheduler, sequence
batcher); one already running is the model's to end. Driven through the fake instances of the
schedulers' own tests: batches are held by gates the test opens, so no timing decides."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from serve.backends.base import RequestResult
from serve.errors import ErrorKind, ServeError
from serve.inference import Cancellation, InferRequest
from serve.scheduler.statistics import FailureReason
from tests.unit.serve.scheduler import test_dynamic_batcher as dyn
from tests.unit.serve.scheduler import test_sequence_batcher as seq


@pytest.fixture(autouse=True)
def no_threads_left_behind() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leftover = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leftover == []


def send(h: dyn.Harness, rid: str, cancellation: Cancellation | None) -> None:
    """`Harness.send` for a request a transport can cancel."""
    shape = (1, 2) if h.config.max_batch_size > 0 else (2,)
    data: np.ndarray = np.full(shape, float(len(h.inputs) + 1), dtype=np.float32)
    h.inputs[rid] = data
    request = InferRequest("fake", "1", {"IN": data}, id=rid, cancellation=cancellation)

    def on_done(result: RequestResult) -> None:
        if rid in h.results:
            h.completed_twice.append(rid)
        h.results[rid] = result
        h.order.append(rid)

    h.batcher.enqueue(request, on_done)


@pytest.mark.parametrize("batching", [True, False], ids=["dynamic-batcher", "default-scheduler"])
def test_a_queued_request_cancelled_is_answered_at_once_and_never_runs(batching: bool) -> None:
    config = dyn.model_config(8, dyn.BATCHING) if batching else dyn.model_config(0)

    async def body() -> None:
        async with dyn.Harness(config) as h:
            h.block()
            send(h, "r0", Cancellation())
            await h.batches_started(1)  # r0 runs (held): the others wait in the queue
            gone = Cancellation()
            send(h, "r1", gone)
            send(h, "r2", Cancellation())
            assert h.batcher.queued == 2
            gone.cancel()
            assert list(h.results) == ["r1"], "answered while r0 still runs"
            h.assert_error("r1", ErrorKind.CANCELLED, "cancelled")
            assert h.batcher.queued == 1
            h.open()
            await h.all_done()
            h.assert_ok("r0", "r2")
            assert all("r1" not in ids for ids in h.batch_ids())
            assert h.stats.failures[FailureReason.CANCELED] == 1
            assert (h.stats.success.count, h.stats.fail.count) == (2, 1)

    dyn.run(body)


def test_a_request_cancelled_before_it_is_queued_never_runs() -> None:
    async def body() -> None:
        async with dyn.Harness(dyn.model_config(8, dyn.BATCHING)) as h:
            gone = Cancellation()
            gone.cancel()
            send(h, "r0", gone)
            h.assert_error("r0", ErrorKind.CANCELLED, "cancelled")
            send(h, "r1", None)
            await h.all_done()
            assert h.batch_ids() == [["r1"]]
            assert h.stats.failures[FailureReason.CANCELED] == 1

    dyn.run(body)


def test_cancelling_a_running_request_leaves_it_to_the_model() -> None:
    async def body() -> None:
        async with dyn.Harness(dyn.model_config(8, dyn.BATCHING)) as h:
            h.block()
            running = Cancellation()
            send(h, "r0", running)
            await h.batches_started(1)
            running.cancel()
            await dyn.loop_passes()
            assert h.results == {}
            h.open()
            await h.all_done()
            h.assert_ok("r0")
            assert h.stats.failures[FailureReason.CANCELED] == 0

    dyn.run(body)


@pytest.mark.parametrize("batching", [True, False], ids=["dynamic-batcher", "default-scheduler"])
def test_an_answered_request_is_freed_without_the_cycle_collector(batching: bool) -> None:
    """A request that left the queue no longer listens for its client: a listener left behind
    (request -> cancellation -> listener -> queue entry -> request) kept every answered request
    alive until the cycle collector ran, which cost ~9% of the server's CPU on small requests."""
    config = dyn.model_config(8, dyn.BATCHING) if batching else dyn.model_config(0)
    cycles: list[object] = []

    async def body() -> None:
        async with dyn.Harness(config) as h:
            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for index in range(3):
                    send(h, f"r{index}", Cancellation())
                await h.all_done()
                h.assert_ok("r0", "r1", "r2")
                gc.collect()
                cycles.extend(o for o in gc.garbage if isinstance(o, InferRequest))
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()

    dyn.run(body)
    assert cycles == []


def _sequence_request(
    sequence: int, value: float, cancellation: Cancellation, start: bool = False, end: bool = False
) -> InferRequest:
    parameters: dict[str, object] = {
        "sequence_id": sequence,
        "sequence_start": start,
        "sequence_end": end,
    }
    return InferRequest(
        "fake",
        "",
        {"IN": np.array([[value]], dtype=np.float32)},
        parameters=parameters,
        cancellation=cancellation,
    )


@pytest.mark.parametrize("strategy", ["direct { }", "oldest { }"])
def test_a_cancelled_sequence_request_is_skipped_and_its_end_frees_the_slot(
    strategy: str,
) -> None:
    async def body() -> None:
        h = seq.Harness(seq.model_config(1, strategy))  # one slot
        a0 = h.send(7, 1, start=True)
        await h.batches_seen(1)  # a0 runs (held); the rest wait
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[RequestResult]] = []
        gone = [Cancellation(), Cancellation()]
        for value, cancellation, end in ((2, gone[0], False), (3, gone[1], True)):
            future: asyncio.Future[RequestResult] = loop.create_future()
            h.batcher.enqueue(_sequence_request(7, value, cancellation, end=end), future.set_result)
            futures.append(future)
        b0 = h.send(8, 10, start=True, end=True)  # backlogged: sequence 7 holds the slot
        for cancellation in gone:
            cancellation.cancel()
        h.run_freely()
        assert await seq.value_of(a0) == 1
        for future in futures:
            result = await asyncio.wait_for(future, seq.WAIT_S)
            assert isinstance(result, ServeError) and result.kind is ErrorKind.CANCELLED
        # The dropped end of sequence 7 freed its slot: sequence 8 runs, from its own start.
        assert await seq.value_of(b0) == 10
        await h.batcher.close()
        assert [row.corrid for batch in h.batches for row in batch if row.ready] == [7, 8]
        assert h.stats.failures[FailureReason.CANCELED] == 2

    asyncio.run(body())


def test_a_dropped_sequence_start_leaves_the_next_request_the_initial_state() -> None:
    async def body() -> None:
        h = seq.Harness(seq.model_config(1, "direct { }"))  # one slot
        blocker = h.send(6, 1, start=True, end=True)  # leaves its state (1) in the slot
        await h.batches_seen(1)  # it runs (held); the next sequence queues in the same slot
        gone = Cancellation()
        loop = asyncio.get_running_loop()
        dropped: asyncio.Future[RequestResult] = loop.create_future()
        h.batcher.enqueue(_sequence_request(9, 100, gone, start=True), dropped.set_result)
        after = h.send(9, 2)
        gone.cancel()
        h.run_freely()
        assert await seq.value_of(blocker) == 1
        result = await asyncio.wait_for(dropped, seq.WAIT_S)
        assert isinstance(result, ServeError) and result.kind is ErrorKind.CANCELLED
        assert await seq.value_of(after) == 2  # not 2 + 1 (sequence 6's last state)
        await h.batcher.close()

    asyncio.run(body())
