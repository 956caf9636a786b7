"""The dynamic batcher with Triton's semantics, driven through fake instances.

Every test runs a real `DynamicBatcher` over real `InstanceWorker`s on an asyncio loop. The fake
instance records the request ids of each batch it executes and blocks on a gate (a
`threading.Event`) that the test opens, so the order of events is set by the test rather than by
timing; waits are bounded and nothing asserts on durations. Each response is computed from its own
request's input (`OUT = 2 * IN + 1`), so a response routed to the wrong request is caught.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.batching import batch_rows, concat_inputs, split_outputs
from serve.errors import ErrorKind, ServeError
from serve.inference import InferRequest
from serve.scheduler.dynamic_batcher import DynamicBatcher
from serve.scheduler.instance_worker import InstanceWorker
from serve.scheduler.queue_policy import BatchingPolicy
from serve.scheduler.statistics import FailureReason, ModelStatistics

WAIT_S = 5.0  # upper bound of every wait; a test that needs it has already failed
TEST_S = 20.0  # upper bound of one test body (pytest-timeout is the last resort)

# Fixed durations the fake reports, to check what the statistics add up.
INPUT_NS, INFER_NS, OUTPUT_NS = 1_000, 2_000, 3_000


def model_config(max_batch_size: int, extra: str = "") -> mc.ModelConfig:
    text = f"""
        name: "fake"
        backend: "fake"
        max_batch_size: {max_batch_size}
        input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
        {extra}
    """
    return text_format.Parse(text, mc.ModelConfig())


@dataclass(frozen=True)
class Batch:
    instance: str
    ids: tuple[str, ...]


Hook = Callable[["FakeInstance", tuple[str, ...]], None]


class FakeInstance(ModelInstance):
    """Records each batch, waits for its gate, then answers 2 * IN + 1 for every request.

    A request whose id starts with "bad" gets its own error; a batch holding a request whose id
    starts with "boom" raises (the whole batch fails).
    """

    def __init__(self, context: InstanceContext, log: list[Batch], hook: Hook | None) -> None:
        super().__init__(context)
        self.name = context.instance_name
        self.gate = threading.Event()
        self.gate.set()
        self.events: list[str] = []
        self.max_active = 0
        self._active = 0
        self._lock = threading.Lock()
        self._log = log
        self._hook = hook
        self._batches = context.config.max_batch_size > 0

    def load(self) -> None:
        self.events.append("load")

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        with self._lock:
            self._active += 1
            self.max_active = max(self.max_active, self._active)
        try:
            ids = tuple(r.id for r in requests)
            self.events.append("execute")
            self._log.append(Batch(self.name, ids))
            if self._hook is not None:
                self._hook(self, ids)
            if not self.gate.wait(WAIT_S):
                raise RuntimeError(f"{self.name}: the test never opened the gate")
            if any(i.startswith("boom") for i in ids):
                raise ValueError("boom")
            out = concat_inputs(requests)["IN"] * 2 + 1
            rows = [batch_rows(r) if self._batches else 1 for r in requests]
            pieces = split_outputs({"OUT": out}, rows)
            times.compute_input_ns = INPUT_NS
            times.compute_infer_ns = INFER_NS
            times.compute_output_ns = OUTPUT_NS
            return [
                ServeError.invalid(f"{r.id} is bad") if r.id.startswith("bad") else piece
                for r, piece in zip(requests, pieces, strict=True)
            ]
        finally:
            with self._lock:
                self._active -= 1

    def unload(self) -> None:
        self.events.append("unload")


class Harness:
    """A batcher over `count` fake instances (instance_group count, default 1)."""

    def __init__(self, config: mc.ModelConfig, hook: Hook | None = None) -> None:
        self.config = config
        self.hook = hook
        self.log: list[Batch] = []  # appended from worker threads; list.append is atomic
        self.results: dict[str, RequestResult] = {}
        self.order: list[str] = []  # request ids in delivery order
        self.inputs: dict[str, np.ndarray] = {}
        self.closed = False
        self.completed_twice: list[str] = []  # the batcher logs callback errors: record instead
        self._futures: dict[str, asyncio.Future[RequestResult]] = {}

    async def __aenter__(self) -> Harness:
        loop = asyncio.get_running_loop()
        count = sum(group.count for group in self.config.instance_group) or 1
        self.instances: list[FakeInstance] = []
        for index in range(count):
            context = InstanceContext(
                model_name="fake",
                model_version=1,
                repository_path=Path("/nonexistent"),
                model_dir=Path("/nonexistent/fake"),
                model_path=Path("/nonexistent/fake/1/model"),
                config=self.config,
                instance_name=f"fake_{index}",
                instance_index=index,
            )
            instance = FakeInstance(context, self.log, self.hook)
            instance.load()
            self.instances.append(instance)
        self.workers = [InstanceWorker(instance, loop) for instance in self.instances]
        self.stats = ModelStatistics("fake", "1")
        self.batcher = DynamicBatcher(
            BatchingPolicy.from_config(self.config), self.workers, self.stats, loop
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.open_all()
        await asyncio.wait_for(self.batcher.close(), WAIT_S)
        assert self.completed_twice == []

    # -- driving ------------------------------------------------------------------------------

    def send(
        self,
        rid: str,
        rows: int = 1,
        width: int = 2,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> None:
        """Enqueue a request whose values are unique to it; its result lands in `results`."""
        base = 1000.0 * (len(self.inputs) + 1)
        values = base + np.arange(rows * width, dtype=np.float32)
        data = values.reshape(rows, width) if self.config.max_batch_size > 0 else values
        parameters: dict[str, object] = {}
        if priority is not None:
            parameters["priority"] = priority
        if timeout_us is not None:
            parameters["timeout"] = timeout_us
        request = InferRequest("fake", "1", {"IN": data}, id=rid, parameters=parameters)
        self.inputs[rid] = data

        def on_done(result: RequestResult) -> None:
            if rid in self.results:
                self.completed_twice.append(rid)
            self.results[rid] = result
            self.order.append(rid)
            future = self._futures.pop(rid, None)
            if future is not None:
                future.set_result(result)

        self.batcher.enqueue(request, on_done)

    async def infer(self, rid: str, rows: int = 1) -> RequestResult:
        """What a transport does: enqueue with a callback that resolves a future, await it."""
        future: asyncio.Future[RequestResult] = asyncio.get_running_loop().create_future()
        self._futures[rid] = future
        self.send(rid, rows)
        return await asyncio.wait_for(future, WAIT_S)

    def block(self, index: int = 0) -> None:
        self.instances[index].gate.clear()

    def open(self, index: int = 0) -> None:
        self.instances[index].gate.set()

    def open_all(self) -> None:
        for instance in self.instances:
            instance.gate.set()

    def instance_of(self, rid: str) -> int:
        """Index of the instance that executed the batch holding `rid`."""
        for batch in self.log:
            if rid in batch.ids:
                names = [instance.name for instance in self.instances]
                return names.index(batch.instance)
        raise AssertionError(f"{rid} was never executed")

    # -- waiting and checking -----------------------------------------------------------------

    async def batches_started(self, count: int) -> None:
        await until(lambda: len(self.log) >= count, f"{count} batches to start")

    async def executions_done(self, count: int) -> None:
        await until(lambda: self.stats.execution_count >= count, f"{count} executions to finish")

    async def all_done(self) -> None:
        await until(lambda: len(self.results) == len(self.inputs), "every response")

    def batch_ids(self) -> list[list[str]]:
        return [list(batch.ids) for batch in self.log]

    def assert_ok(self, *rids: str) -> None:
        for rid in rids or tuple(self.inputs):
            result = self.results[rid]
            assert not isinstance(result, ServeError), f"{rid}: {result!r}"
            np.testing.assert_array_equal(result["OUT"], self.inputs[rid] * 2 + 1, err_msg=rid)

    def assert_error(self, rid: str, kind: ErrorKind, message: str) -> None:
        result = self.results[rid]
        assert isinstance(result, ServeError), f"{rid} succeeded"
        assert result.kind is kind
        assert message in result.message


async def until(predicate: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    """Let the loop run until `predicate` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


async def loop_passes(count: int = 3) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def run(body: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(body(), TEST_S)

    asyncio.run(bounded())


@pytest.fixture(autouse=True)
def no_threads_left_behind() -> Iterator[None]:
    before = set(threading.enumerate())
    yield
    leftover = [t.name for t in threading.enumerate() if t not in before and t.is_alive()]
    assert leftover == []


BATCHING = "dynamic_batching { }"
TWO_INSTANCES = "instance_group [ { count: 2 kind: KIND_CPU } ]"


# -- forming batches ------------------------------------------------------------------------------


def test_requests_queued_behind_a_busy_instance_go_out_in_one_batch() -> None:
    async def body() -> None:
        async with Harness(model_config(8, BATCHING)) as h:
            h.block()
            first = asyncio.ensure_future(h.infer("r0"))
            await h.batches_started(1)
            rest = [asyncio.ensure_future(h.infer(f"r{i}")) for i in range(1, 7)]
            await loop_passes()
            assert h.batch_ids() == [["r0"]]
            assert h.batcher.queued == 6
            h.open()
            await asyncio.gather(first, *rest)
            assert h.batch_ids() == [["r0"], ["r1", "r2", "r3", "r4", "r5", "r6"]]
            assert h.stats.execution_count == 2
            assert h.stats.inference_count == 7
            h.assert_ok()

    run(body)


def test_max_batch_size_counts_rows_of_multi_row_requests() -> None:
    async def body() -> None:
        async with Harness(model_config(4, BATCHING)) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            for rid, rows in (("a", 2), ("b", 1), ("c", 2), ("d", 3), ("e", 1)):
                h.send(rid, rows=rows)
            h.open()
            await h.all_done()
            assert h.batch_ids() == [["r0"], ["a", "b"], ["c"], ["d", "e"]]
            assert sorted(h.stats.batches) == [1, 2, 3, 4]
            assert h.stats.inference_count == 10
            h.assert_ok()

    run(body)


def test_requests_with_different_shapes_are_not_batched_together() -> None:
    async def body() -> None:
        async with Harness(model_config(8, BATCHING)) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            for rid, width in (("a", 2), ("b", 2), ("c", 3), ("d", 3), ("e", 2)):
                h.send(rid, width=width)
            h.open()
            await h.all_done()
            assert h.batch_ids() == [["r0"], ["a", "b"], ["c", "d"], ["e"]]
            h.assert_ok()

    run(body)


@pytest.mark.parametrize("max_batch_size", [8, 0])
def test_without_dynamic_batching_every_request_executes_alone(max_batch_size: int) -> None:
    async def body() -> None:
        async with Harness(model_config(max_batch_size)) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            for i in range(1, 5):
                h.send(f"r{i}")
            await loop_passes()
            h.open()
            await h.all_done()
            assert h.batch_ids() == [[f"r{i}"] for i in range(5)]
            assert h.stats.execution_count == 5
            assert sorted(h.stats.batches) == [1]
            h.assert_ok()

    run(body)


# -- preferred sizes and the queue delay ---------------------------------------------------------


def test_preferred_batch_size_is_sent_without_waiting_for_the_delay() -> None:
    config = model_config(
        8,
        "dynamic_batching { preferred_batch_size: [2, 4] max_queue_delay_microseconds: 60000000 }",
    )

    async def body() -> None:
        async with Harness(config) as h:
            h.send("r1")
            await loop_passes()
            assert h.log == [], "a partial batch waits for the (one minute) delay"
            h.send("r2")  # 2 rows: a preferred size, sent at once
            await h.batches_started(1)
            assert h.batch_ids() == [["r1", "r2"]]
            await h.executions_done(1)

            h.block()
            h.send("r3")
            h.send("r4")
            await h.batches_started(2)
            for i in range(5, 11):
                h.send(f"r{i}")
            h.open()
            await h.all_done()
            # Six requests waited: the largest preferred size first, then the next one.
            assert h.batch_ids() == [
                ["r1", "r2"],
                ["r3", "r4"],
                ["r5", "r6", "r7", "r8"],
                ["r9", "r10"],
            ]
            h.assert_ok()

    run(body)


def test_preferred_batch_size_applies_without_a_queue_delay() -> None:
    config = model_config(8, "dynamic_batching { preferred_batch_size: [2, 4] }")

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            for i in range(1, 7):
                h.send(f"r{i}")
            h.open()
            await h.all_done()
            assert h.batch_ids() == [["r0"], ["r1", "r2", "r3", "r4"], ["r5", "r6"]]
            h.assert_ok()

    run(body)


def test_batch_stops_before_passing_the_largest_preferred_size() -> None:
    config = model_config(8, "dynamic_batching { preferred_batch_size: [4] }")

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            h.send("a", rows=3)
            h.send("b", rows=3)
            h.send("c", rows=1)
            h.open()
            await h.all_done()
            # a + b (6 rows) would pass 4: a goes alone, then b + c make the preferred 4.
            assert h.batch_ids() == [["r0"], ["a"], ["b", "c"]]
            h.assert_ok()

    run(body)


def test_queue_delay_holds_a_partial_batch_until_it_expires() -> None:
    config = model_config(8, "dynamic_batching { max_queue_delay_microseconds: 50000 }")

    async def body() -> None:
        async with Harness(config) as h:
            h.send("r1")
            await loop_passes()
            assert h.log == [], "an idle instance still waits for the delay"
            assert h.batcher.queued == 1
            h.send("r2")
            h.send("r3")
            await h.batches_started(1)  # nothing else arrives: the delay timer sends it
            await h.all_done()
            assert h.batch_ids() == [["r1", "r2", "r3"]]
            assert h.stats.execution_count == 1
            h.assert_ok()

    run(body)


def test_expired_delay_sends_everything_waiting_not_just_a_preferred_size() -> None:
    config = model_config(
        8, "dynamic_batching { preferred_batch_size: [2] max_queue_delay_microseconds: 50000 }"
    )

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            for rid in ("r1", "r2", "r3"):
                h.send(rid)
            await asyncio.sleep(0.1)  # r1 has now waited longer than the delay
            h.open()
            await h.all_done()
            assert h.batch_ids() == [["r0"], ["r1", "r2", "r3"]]
            h.assert_ok()

    run(body)


def test_sub_millisecond_delay_batches_what_arrives_in_one_loop_pass() -> None:
    config = model_config(8, "dynamic_batching { max_queue_delay_microseconds: 900 }")

    async def body() -> None:
        async with Harness(config) as h:
            for rid in ("r1", "r2", "r3"):
                h.send(rid)
            await h.all_done()
            h.send("r4")  # alone: goes out after one pass, no timer needed
            await h.all_done()
            assert h.batch_ids() == [["r1", "r2", "r3"], ["r4"]]
            h.assert_ok()

    run(body)


# -- queue policies -------------------------------------------------------------------------------


def test_full_queue_rejects_at_once() -> None:
    config = model_config(8, "dynamic_batching { default_queue_policy { max_queue_size: 2 } }")

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            h.send("r1")
            h.send("r2")
            h.send("r3")
            assert list(h.results) == ["r3"], "rejected while the others wait"
            h.assert_error("r3", ErrorKind.UNAVAILABLE, "Exceeds maximum queue size")
            h.open()
            await h.all_done()
            h.assert_ok("r0", "r1", "r2")
            assert h.batch_ids() == [["r0"], ["r1", "r2"]]
            assert h.stats.fail.count == 1
            assert h.stats.success.count == 3
            assert h.stats.failures[FailureReason.REJECTED] == 1

    run(body)


def test_timeout_reject_fails_a_request_still_in_the_queue() -> None:
    config = model_config(
        8,
        "dynamic_batching { default_queue_policy "
        "{ timeout_action: REJECT default_timeout_microseconds: 20000 } }",
    )

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")  # dispatched at once: its timeout no longer applies
            await h.batches_started(1)
            h.send("r1")
            await until(lambda: "r1" in h.results, "r1 to time out")
            h.assert_error("r1", ErrorKind.UNAVAILABLE, "Request timeout expired")
            assert "r0" not in h.results
            h.open()
            await h.all_done()
            h.assert_ok("r0")
            assert h.batch_ids() == [["r0"]], "a rejected request never executes"
            assert (h.stats.success.count, h.stats.fail.count) == (1, 1)
            assert h.stats.failures[FailureReason.REJECTED] == 1

    run(body)


def test_timeout_delay_moves_the_request_behind_the_others() -> None:
    config = model_config(
        1,
        "dynamic_batching { default_queue_policy { timeout_action: DELAY "
        "default_timeout_microseconds: 60000000 allow_timeout_override: true } }",
    )

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            h.send("r1", timeout_us=10_000)
            h.send("r2")
            h.send("r3")
            await asyncio.sleep(0.1)  # loop timers fire in deadline order: r1's has fired
            assert "r1" not in h.results, "DELAY keeps the request"
            h.open()
            await h.all_done()
            assert h.batch_ids() == [["r0"], ["r2"], ["r3"], ["r1"]]
            h.assert_ok()
            assert h.stats.fail.count == 0

    run(body)


def test_timeout_override_shortens_the_default() -> None:
    config = model_config(
        8,
        "dynamic_batching { default_queue_policy "
        "{ default_timeout_microseconds: 60000000 allow_timeout_override: true } }",
    )

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            h.send("r1", timeout_us=10_000)
            h.send("r2")
            await until(lambda: "r1" in h.results, "r1 to time out")
            h.assert_error("r1", ErrorKind.UNAVAILABLE, "Request timeout expired")
            h.open()
            await h.all_done()
            h.assert_ok("r0", "r2")
            assert h.batch_ids() == [["r0"], ["r2"]]

    run(body)


def test_timeout_override_cannot_extend_the_default() -> None:
    config = model_config(
        8,
        "dynamic_batching { default_queue_policy "
        "{ default_timeout_microseconds: 20000 allow_timeout_override: true } }",
    )

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            h.send("r1", timeout_us=60_000_000)
            await until(lambda: "r1" in h.results, "r1 to time out at the default")
            h.assert_error("r1", ErrorKind.UNAVAILABLE, "Request timeout expired")

    run(body)


@pytest.mark.parametrize(
    "policy",
    [
        "default_timeout_microseconds: 60000000",  # override not allowed
        "allow_timeout_override: true",  # no default timeout to shorten (Triton ignores it)
    ],
)
def test_timeout_parameter_ignored_unless_it_shortens_an_allowed_default(policy: str) -> None:
    config = model_config(8, f"dynamic_batching {{ default_queue_policy {{ {policy} }} }}")

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            h.send("r1", timeout_us=1_000)
            await asyncio.sleep(0.05)
            assert "r1" not in h.results
            h.open()
            await h.all_done()
            h.assert_ok()

    run(body)


def test_higher_priority_requests_are_served_first() -> None:
    config = model_config(2, "dynamic_batching { priority_levels: 2 default_priority_level: 2 }")

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0", priority=1)
            await h.batches_started(1)
            h.send("low1", priority=2)
            h.send("low2", priority=0)  # 0: the default level (2)
            h.send("high1", priority=1)
            h.send("other", priority=7)  # out of range: the default level
            h.send("high2", priority=1)
            h.open()
            await h.all_done()
            assert h.batch_ids() == [["r0"], ["high1", "high2"], ["low1", "low2"], ["other"]]
            h.assert_ok()

    run(body)


def test_priority_queue_policy_applies_to_its_level_only() -> None:
    config = model_config(
        2,
        "dynamic_batching { priority_levels: 2 default_priority_level: 2 "
        "priority_queue_policy { key: 1 value: { max_queue_size: 1 } } }",
    )

    async def body() -> None:
        async with Harness(config) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            h.send("low1", priority=2)
            h.send("low2", priority=2)
            h.send("high1", priority=1)
            h.send("high2", priority=1)
            h.assert_error("high2", ErrorKind.UNAVAILABLE, "Exceeds maximum queue size")
            h.open()
            await h.all_done()
            assert h.batch_ids() == [["r0"], ["high1", "low1"], ["low2"]]
            h.assert_ok("r0", "low1", "low2", "high1")

    run(body)


# -- instances and ordering -----------------------------------------------------------------------


@pytest.mark.parametrize("preserve", [True, False])
def test_preserve_ordering_across_instances(preserve: bool) -> None:
    batching = f"dynamic_batching {{ preserve_ordering: {str(preserve).lower()} }}"
    config = model_config(2, f"{batching} {TWO_INSTANCES}")

    async def body() -> None:
        async with Harness(config) as h:
            h.block(0)
            h.block(1)
            h.send("a1")
            h.send("a2")
            await h.batches_started(2)
            first, second = h.instance_of("a1"), h.instance_of("a2")
            assert first != second
            h.send("a3")
            h.send("a4")
            h.open(second)  # the second batch, then [a3, a4], finish before the first
            await h.executions_done(2)
            assert h.batch_ids()[2] == ["a3", "a4"]
            assert h.order == ([] if preserve else ["a2", "a3", "a4"])
            h.open(first)
            await h.all_done()
            expected = ["a1", "a2", "a3", "a4"] if preserve else ["a2", "a3", "a4", "a1"]
            assert h.order == expected
            h.assert_ok()

    run(body)


def test_two_instances_execute_batches_at_the_same_time() -> None:
    barrier = threading.Barrier(2)

    def meet(instance: FakeInstance, ids: tuple[str, ...]) -> None:
        barrier.wait(WAIT_S)  # breaks (and fails the batch) unless both are inside execute

    async def body() -> None:
        async with Harness(model_config(8, f"{BATCHING} {TWO_INSTANCES}"), hook=meet) as h:
            h.send("r1")
            h.send("r2")
            await h.all_done()
            h.assert_ok()
            assert {batch.instance for batch in h.log} == {"fake_0", "fake_1"}
            assert [i.max_active for i in h.instances] == [1, 1]

    run(body)


@pytest.mark.parametrize("instances", [1, 2])
def test_an_instance_never_runs_two_batches_at_once(instances: int) -> None:
    def linger(instance: FakeInstance, ids: tuple[str, ...]) -> None:
        time.sleep(0.0005)  # widen the window in which a second batch could slip in

    group = f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]"

    async def body() -> None:
        async with Harness(model_config(4, f"{BATCHING} {group}"), hook=linger) as h:
            for i in range(60):
                h.send(f"r{i}")
                if i % 3 == 0:
                    await asyncio.sleep(0)
            await h.all_done()
            h.assert_ok()
            assert [i.max_active for i in h.instances] == [1] * instances
            assert all(len(batch.ids) <= 4 for batch in h.log)
            assert sorted(rid for batch in h.log for rid in batch.ids) == sorted(h.inputs)

    run(body)


# -- shutdown and statistics ----------------------------------------------------------------------


def test_close_waits_for_queued_and_running_work_then_unloads() -> None:
    async def body() -> None:
        async with Harness(model_config(2, BATCHING)) as h:
            h.block()
            h.send("r0")
            await h.batches_started(1)
            for rid in ("r1", "r2", "r3"):
                h.send(rid)
            h.closed = True  # closed below, by hand
            closing = asyncio.ensure_future(h.batcher.close())
            await loop_passes()
            assert not closing.done()
            assert "unload" not in h.instances[0].events
            h.send("late")
            h.assert_error("late", ErrorKind.UNAVAILABLE, "being unloaded")
            assert h.stats.failures[FailureReason.OTHER] == 1
            h.open()
            await asyncio.wait_for(closing, WAIT_S)
            h.assert_ok("r0", "r1", "r2", "r3")
            assert h.batch_ids() == [["r0"], ["r1", "r2"], ["r3"]]
            assert h.instances[0].events == ["load", "execute", "execute", "execute", "unload"]
            assert h.completed_twice == []

    run(body)


def test_statistics_count_successes_failures_and_batches() -> None:
    async def body() -> None:
        async with Harness(model_config(8, BATCHING)) as h:
            h.block()
            h.send("r0", rows=2)
            await h.batches_started(1)
            h.send("a")
            h.send("bad1")  # the backend answers this one with an error
            h.send("b", rows=3)
            h.open()
            await h.all_done()
            h.send("boom")  # the backend raises: the whole batch fails
            await h.all_done()

            h.assert_ok("r0", "a", "b")
            h.assert_error("bad1", ErrorKind.INVALID_ARGUMENT, "bad1 is bad")
            h.assert_error("boom", ErrorKind.INTERNAL, "ValueError: boom")
            stats = h.stats
            assert stats.execution_count == 3
            assert stats.inference_count == 2 + 5 + 1
            assert stats.success.count == 3
            assert stats.fail.count == 2
            assert stats.failures == dict.fromkeys(FailureReason, 0) | {FailureReason.BACKEND: 2}
            assert stats.queue.count == 3
            assert (stats.compute_input.count, stats.compute_input.ns) == (3, 3 * INPUT_NS)
            assert (stats.compute_infer.count, stats.compute_infer.ns) == (3, 3 * INFER_NS)
            assert (stats.compute_output.count, stats.compute_output.ns) == (3, 3 * OUTPUT_NS)
            assert stats.last_inference_ms > 0

            report = stats.to_json()
            assert report["execution_count"] == 3
            assert set(report["inference_stats"]) == {
                "success", "fail", "queue", "compute_input", "compute_infer",
                "compute_output", "cache_hit", "cache_miss",
            }  # fmt: skip
            batch_stats = {b["batch_size"]: b for b in report["batch_stats"]}
            assert sorted(batch_stats) == [1, 2, 5]
            assert batch_stats[5]["compute_infer"] == {"count": 1, "ns": INFER_NS}
            assert batch_stats[2]["compute_input"] == {"count": 1, "ns": INPUT_NS}
            assert batch_stats[1]["compute_infer"] == {"count": 1, "ns": 0}  # it raised

    run(body)
