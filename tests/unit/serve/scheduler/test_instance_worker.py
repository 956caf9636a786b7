"""Where an instance's batches run: its own thread, or inline on the loop when it is quick."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.base import BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.inference import InferRequest
from serve.scheduler.instance_worker import INLINE_BELOW_NS, InstanceWorker


class RecordingInstance(ModelInstance):
    def __init__(self, seconds: float, inline_when_quick: bool = True) -> None:
        super().__init__(
            InstanceContext(
                "m", 1, Path("."), Path("."), Path("m.onnx"), mc.ModelConfig(), "m_0", 0
            )
        )
        self.seconds = seconds
        self.inline_when_quick = inline_when_quick
        self.threads: list[int] = []

    def load(self) -> None:
        pass

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        self.threads.append(threading.get_ident())
        if self.seconds:
            time.sleep(self.seconds)
        return [{"y": r.inputs["x"]} for r in requests]


async def _run_batches(worker: InstanceWorker, count: int) -> None:
    for _ in range(count):
        done = asyncio.get_running_loop().create_future()
        request = InferRequest("m", "", {"x": np.zeros((1, 2), dtype=np.float32)})
        worker.run([request], lambda _w, results, _t, done=done: done.set_result(results))
        results = await done
        assert np.array_equal(results[0]["y"], np.zeros((1, 2)))


def _threads_used(seconds: float, inline_when_quick: bool = True) -> tuple[list[int], int]:
    instance = RecordingInstance(seconds, inline_when_quick)

    async def main() -> int:
        worker = InstanceWorker(instance, asyncio.get_running_loop())
        try:
            await _run_batches(worker, 4)
        finally:
            await asyncio.to_thread(worker.close)
        return threading.get_ident()

    loop_thread = asyncio.run(main())
    return instance.threads, loop_thread


def test_quick_batches_run_inline_after_the_first() -> None:
    threads, loop_thread = _threads_used(0.0)
    assert threads[0] != loop_thread  # nothing measured yet: the instance's thread
    assert threads[1:] == [loop_thread] * 3


def test_slow_batches_stay_on_the_instance_thread() -> None:
    threads, loop_thread = _threads_used(INLINE_BELOW_NS / 1e9 * 5)
    assert loop_thread not in threads
    assert len(set(threads)) == 1  # always the same, single thread


def test_backends_that_may_wait_never_run_inline() -> None:
    threads, loop_thread = _threads_used(0.0, inline_when_quick=False)
    assert loop_thread not in threads
