"""What a server spent during one measurement: CPU seconds and peak resident memory of its whole
process tree, and the requests it answered in that time.

- The tree: the server process and all its descendants (both servers run python-backend models
  in child processes: Triton's triton_python_backend_stub, our stub). CPU is user + system time
  of each process, plus that of children they have already reaped, read before and after (psutil
  reads /proc/<pid>/stat).
- Peak RSS: the tree's resident memory summed over its processes, sampled every
  SAMPLE_INTERVAL_S by a thread of this process while the measurement runs; its highest sample.
  Pages shared between processes (the shared-memory tensors of the python backends) count once
  per process that maps them.
- Client CPU: user + system time of the processes this script ran and reaped during the
  measurement (perf_analyzer; getrusage's RUSAGE_CHILDREN before and after), for what the client
  itself costs on a machine it shares with the server.
- Requests: the difference in the model's statistics (KServe v2 statistics extension, over
  HTTP) before and after: successful requests, inferences (rows) and executions (batches). This
  counts every request of the whole perf_analyzer run (its warm-up and unstable windows too),
  the same span the CPU time covers; perf_analyzer's own request count covers only the windows it
  reports.
Used by benchmarks/vs_triton.py and large_tensors.py; not a script.
"""

from __future__ import annotations

import resource
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psutil
import tritonclient.http as httpclient
from peer import Server

SAMPLE_INTERVAL_S = 0.25


@dataclass(frozen=True)
class Counts:
    requests: int  # inference_stats.success.count
    inferences: int  # inference_count: rows
    executions: int  # execution_count: batches the model ran


@dataclass(frozen=True)
class Usage:
    cpu_s: float
    peak_rss_bytes: int
    served: Counts  # during the measurement
    client_cpu_s: float = 0.0  # the reaped children's: the client's

    @property
    def cpu_s_per_1000(self) -> float | None:
        return self._per_1000(self.cpu_s)

    @property
    def client_cpu_s_per_1000(self) -> float | None:
        return self._per_1000(self.client_cpu_s)

    def _per_1000(self, cpu_s: float) -> float | None:
        if self.served.requests <= 0:
            return None
        return cpu_s * 1000 / self.served.requests

    @property
    def average_batch(self) -> float | None:
        if self.served.executions <= 0:
            return None
        return self.served.inferences / self.served.executions


def _tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_cpu_s(pid: int) -> float:
    total = 0.0
    for process in _tree(pid):
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def tree_rss_bytes(pid: int) -> int:
    total = 0
    for process in _tree(pid):
        try:
            total += process.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return total


def reaped_children_cpu_s() -> float:
    """User + system seconds of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def model_counts(server: Server, model: str) -> Counts:
    """The model's cumulative counts from the server's statistics extension."""
    client = httpclient.InferenceServerClient(server.urls["http"])
    try:
        stats: dict[str, Any] = client.get_inference_statistics(model)
    finally:
        client.close()
    entries = stats.get("model_stats", [])
    return Counts(
        requests=sum(int(e["inference_stats"]["success"]["count"]) for e in entries),
        inferences=sum(int(e.get("inference_count", 0)) for e in entries),
        executions=sum(int(e.get("execution_count", 0)) for e in entries),
    )


class UsageMonitor:
    """`with UsageMonitor(server, model) as monitor: <measure>`; then `monitor.usage`."""

    def __init__(self, server: Server, model: str) -> None:
        self.server, self.model = server, model
        self._pid = server.process.pid
        self._stop = threading.Event()
        self._peak = 0
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._cpu_before = 0.0
        self._client_cpu_before = 0.0
        self._counts_before = Counts(0, 0, 0)
        self.usage: Usage | None = None

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak = max(self._peak, tree_rss_bytes(self._pid))
            self._stop.wait(SAMPLE_INTERVAL_S)

    def __enter__(self) -> UsageMonitor:
        self._counts_before = model_counts(self.server, self.model)
        self._cpu_before = tree_cpu_s(self._pid)
        self._client_cpu_before = reaped_children_cpu_s()
        self._sampler.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        cpu_after = tree_cpu_s(self._pid)
        client_cpu = reaped_children_cpu_s() - self._client_cpu_before
        self._stop.set()
        self._sampler.join()
        if kind is not None:
            return
        after = model_counts(self.server, self.model)
        before = self._counts_before
        served = Counts(
            after.requests - before.requests,
            after.inferences - before.inferences,
            after.executions - before.executions,
        )
        self.usage = Usage(cpu_after - self._cpu_before, self._peak, served, client_cpu)
