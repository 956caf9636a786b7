"""Each tool's winner measured again on one tritonserver 2.51 by one client, for
benchmarks/model_analyzer_side.py. Not a script.

The contenders (the config as written, Model Analyzer's winner per mode, autotune's written
config) are model folders of their own in one repository (the python model's files, the
contender's config.pbtxt under its own name); identical configs are measured once. One
tritonserver in explicit model control loads them all (each checked against in-process
onnxruntime) and they are measured paired: in each round every contender runs the same sweep,
and the sweeps advance together, one point of each in turn (A c1, B c1, C c1, A c2, B c2, ...),
the order rotating from round to round, so contenders are compared a few seconds apart. On a
2-core machine the same config drifts 30-40% from one minute to the next while windows seconds
apart agree within ~12%: only a comparison made within a round can tell 10%, so the figures
that decide are each round's ratios (`paired_ratios`), not ratios of medians.

What a measurement is: the same concurrency sweep for every contender, in the manner of Model
Analyzer's own: concurrency 1, 2, 4, ... up to a cap until a point's p95 is over the budget,
then a binary search between the last point within the budget and that one (until they are
within a quarter of each other); the contender's figure in that round is the highest
throughput within the budget. Each tool's search measured with its own client, and on 2 cores
the client's own CPU moves the operating point a lot, so the sweep asks of every winner the same
question with the same client (`RemeasureClient`: the real perf_analyzer 2.51, or our analyzer
with the same flags and CSV): the most it gives within the budget. Each contender is also
measured at its own reported concurrency (where its tool reported one) when the sweep did not,
recorded apart.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient
from google.protobuf import text_format
from peer import AUTOTUNE_PERF, Run, Server, check_outputs, measure, pinned
from python_models import ORT_TOLERANCE, reference
from tritonclient.grpc import model_config_pb2 as mc

UNLOAD_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Contender:
    """A tool's winner (or the config as written) to measure again."""

    label: str  # "as written", "Model Analyzer quick", "autotune", ...
    config_text: str
    own_concurrency: int | None  # the concurrency its tool reported for it; None: none


@dataclass(frozen=True)
class Served:
    """One configuration as served: a model folder `name`, and the contenders it stands for."""

    name: str
    labels: tuple[str, ...]
    config: mc.ModelConfig
    own_concurrencies: tuple[int, ...]


@dataclass(frozen=True)
class RemeasureClient:
    """The one client that measures every contender: its name, its command (perf_analyzer's
    flags follow it) and the protocol it speaks."""

    name: str
    command: tuple[str, ...]
    protocol: str


def perf_analyzer_client(binary: Path, protocol: str, cpus: str | None) -> RemeasureClient:
    return RemeasureClient("perf_analyzer 2.51", (*pinned(cpus), str(binary)), protocol)


def autotune_client(protocol: str, cpus: str | None) -> RemeasureClient:
    return RemeasureClient("autotune perf", (*pinned(cpus), *AUTOTUNE_PERF), protocol)


def split_cpus(count: int) -> tuple[str, str]:
    """(the client's CPUs, the server's) for a pinned re-measure: CPU 0 for the client, the
    rest for tritonserver and its python stubs, so neither takes the other's CPU time."""
    if count < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    return "0", f"1-{count - 1}" if count > 2 else "1"


@dataclass(frozen=True)
class SweepSettings:
    budget_ms: float
    max_concurrency: int
    window_ms: int
    client: RemeasureClient
    attempts: int = 2  # runs per point until the client's windows are stable


def slug(label: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in label.lower()).strip("_")


def group_contenders(model: str, contenders: Sequence[Contender]) -> list[Served]:
    """The distinct configurations among `contenders` (compared without their name), in order
    of first appearance, each named `<model>_<first label>`."""
    served: list[Served] = []
    for contender in contenders:
        config = text_format.Parse(contender.config_text, mc.ModelConfig())
        config.ClearField("name")
        own = () if contender.own_concurrency is None else (contender.own_concurrency,)
        for index, existing in enumerate(served):
            if existing.config == config:
                served[index] = Served(
                    existing.name,
                    (*existing.labels, contender.label),
                    existing.config,
                    tuple(sorted({*existing.own_concurrencies, *own})),
                )
                break
        else:
            served.append(
                Served(f"{model}_{slug(contender.label)}", (contender.label,), config, own)
            )
    return served


def write_served(model: str, source: Path, served: Sequence[Served], destination: Path) -> None:
    """Each served configuration as a model folder in `destination`: the python model's files
    from `source`/`model`, its config under its own name."""
    for item in served:
        folder = destination / item.name
        shutil.copytree(source / model, folder)
        config = mc.ModelConfig()
        config.CopyFrom(item.config)
        config.name = item.name
        (folder / "config.pbtxt").write_text(text_format.MessageToString(config))


class Sweep:
    """One contender's sweep, a point at a time so that several can advance together:
    concurrency 1, 2, 4, ... until a point is over the budget (or the cap), then a binary
    search between the last point within it and that one. A point without stable windows tells
    nothing: the doubling goes on past it, the binary search stops."""

    def __init__(self, budget_ms: float, max_concurrency: int) -> None:
        self._limit_us = budget_ms * 1000
        self._max_concurrency = max_concurrency
        self._doubling = True
        self._next: int | None = 1
        self._low: int | None = None
        self._high: int | None = None
        self.runs: list[Run] = []

    def next_concurrency(self) -> int | None:
        """The next point to measure; None once the sweep is done."""
        return self._next

    def record(self, run: Run | None) -> None:
        """The run of the point `next_concurrency` named (None: no stable windows)."""
        concurrency = self._next
        if concurrency is None:
            raise RuntimeError("the sweep is done")
        if run is not None:
            self.runs.append(run)
        if self._doubling:
            if run is not None and run.p95_us > self._limit_us:
                self._high = concurrency
                self._doubling = False
            else:
                if run is not None:
                    self._low = concurrency
                self._next = concurrency * 2
                if self._next <= self._max_concurrency:
                    return
                self._doubling = False
        elif run is None:
            self._next = None
            return
        elif run.p95_us > self._limit_us:
            self._high = concurrency
        else:
            self._low = concurrency
        self._next = self._bisect()

    def _bisect(self) -> int | None:
        low, high = self._low, self._high
        if low is None or high is None or high - low <= max(1, low // 4):
            return None
        return (low + high) // 2


def best_within(runs: Sequence[Run], budget_ms: float) -> Run | None:
    within = [run for run in runs if run.p95_us <= budget_ms * 1000]
    return max(within, key=lambda run: run.infer_per_s, default=None)


def load(server: Server, name: str) -> None:
    client = httpclient.InferenceServerClient(server.urls["http"], network_timeout=300.0)
    try:
        client.load_model(name)
    finally:
        client.close()


def unload(server: Server, name: str) -> None:
    """Unload `name` and wait until the server says it is gone (its python stubs with it)."""
    client = httpclient.InferenceServerClient(server.urls["http"])
    try:
        client.unload_model(name)
        deadline = time.monotonic() + UNLOAD_TIMEOUT_S
        while time.monotonic() < deadline:
            states = [
                entry.get("state")
                for entry in client.get_model_repository_index()
                if entry.get("name") == name
            ]
            if all(state not in ("READY", "UNLOADING", "LOADING") for state in states):
                return
            time.sleep(0.1)
        raise SystemExit(f"{name} still loaded {UNLOAD_TIMEOUT_S:.0f} s after its unload")
    finally:
        client.close()


def run_record(run: Run) -> dict[str, Any]:
    return {
        "concurrency": run.concurrency,
        "infer_per_s": run.infer_per_s,
        "p95_ms": run.p95_us / 1000,
    }


def check_served(server: Server, model: str, item: Served, protocol: str) -> None:
    """`item`'s outputs against in-process onnxruntime, in no more rows than its
    max_batch_size accepts (Model Analyzer tries 1)."""
    inputs, expected = reference(model)
    rows = item.config.max_batch_size or None
    inputs = {name: value[:rows] for name, value in inputs.items()}
    expected = {name: value[:rows] for name, value in expected.items()}
    check_outputs(server, protocol, item.name, inputs, expected, ORT_TOLERANCE)


def measure_round(
    server: Server,
    served: Sequence[Served],
    settings: SweepSettings,
    scratch: Path,
) -> dict[str, dict[str, Any]]:
    """One round: the contenders' sweeps advance together, a point of each in turn, in the
    order of `served`; then each is measured at its own concurrencies the sweep missed."""
    client = settings.client

    def measure_at(item: Served, concurrency: int) -> Run | None:
        label = f"  {item.name} c{concurrency:<4}"
        return measure(
            settings.attempts,
            label,
            client.command,
            server,
            item.name,
            client.protocol,
            concurrency,
            settings.window_ms,
            scratch,
            "remeasure",
        )

    sweeps = {item.name: Sweep(settings.budget_ms, settings.max_concurrency) for item in served}
    while any(s.next_concurrency() is not None for s in sweeps.values()):
        for item in served:
            point = sweeps[item.name].next_concurrency()
            if point is not None:
                sweeps[item.name].record(measure_at(item, point))
    results = {}
    for item in served:
        runs = sweeps[item.name].runs
        own = []
        for concurrency in item.own_concurrencies:
            run = next((r for r in runs if r.concurrency == concurrency), None)
            if run is None:
                run = measure_at(item, concurrency)
            own.append({"concurrency": concurrency, "run": run and run_record(run)})
        best = best_within(runs, settings.budget_ms)
        results[item.name] = {
            "points": [run_record(run) for run in runs],
            "best": best and run_record(best),
            "own": own,
        }
    return results


def remeasure(
    server: Server,
    model: str,
    served: Sequence[Served],
    settings: SweepSettings,
    repeats: int,
    scratch: Path,
) -> list[dict[str, Any]]:
    """`repeats` paired rounds over `served`, all of them loaded throughout (round k starts
    at the k-th contender, the order rotating); per configuration its rounds and summary."""
    rounds: dict[str, list[dict[str, Any]]] = {item.name: [] for item in served}
    loaded: list[Served] = []
    try:
        for item in served:
            load(server, item.name)
            loaded.append(item)
            check_served(server, model, item, settings.client.protocol)
        for index in range(repeats):
            print(f"{model}: re-measure round {index + 1} of {repeats}", flush=True)
            shift = index % len(served)
            order = [*served[shift:], *served[:shift]]
            for name, result in measure_round(server, order, settings, scratch).items():
                rounds[name].append(result)
            for item in served:
                best = rounds[item.name][-1]["best"]
                shown = (
                    f"{best['infer_per_s']:,.1f} infer/s at c{best['concurrency']}, "
                    f"p95 {best['p95_ms']:.2f} ms"
                    if best
                    else "no point within the budget"
                )
                print(f"{model}: {' = '.join(item.labels)}: {shown}", flush=True)
    finally:
        for item in reversed(loaded):
            unload(server, item.name)
    return [
        {
            "name": item.name,
            "labels": list(item.labels),
            "config_pbtxt": text_format.MessageToString(item.config),
            "rounds": rounds[item.name],
            **describe_rounds(rounds[item.name]),
        }
        for item in served
    ]


def paired_ratios(measured: Sequence[dict[str, Any]], of: str) -> dict[str, dict[str, Any]]:
    """Per other label, the contender labelled `of` over it round by round (each round's best
    within the budget; a round where either has none is left out): median, range, values."""

    def bests(entry: dict[str, Any]) -> list[float | None]:
        return [r["best"] and r["best"]["infer_per_s"] for r in entry["rounds"]]

    by_label = {label: bests(entry) for entry in measured for label in entry["labels"]}
    ours = by_label.get(of)
    if ours is None:
        return {}
    ratios: dict[str, dict[str, Any]] = {}
    for label, theirs in by_label.items():
        if label == of:
            continue
        values = [a / b for a, b in zip(ours, theirs, strict=True) if a and b]
        summary = summary_of(values)
        if summary is not None:
            ratios[label] = summary
    return ratios


def describe_rounds(rounds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Median and range over the rounds of the best throughput within the budget (a round
    without one counts as 0 infer/s), the p95 and concurrency of those bests, and the
    figures at the contender's own concurrency."""
    bests = [r["best"] for r in rounds]
    rates = [b["infer_per_s"] if b else 0.0 for b in bests]
    within = [b for b in bests if b]
    own: dict[str, dict[str, Any]] = {}
    for r in rounds:
        for entry in r["own"]:
            slot = own.setdefault(str(entry["concurrency"]), {"infer_per_s": [], "p95_ms": []})
            if entry["run"]:
                slot["infer_per_s"].append(entry["run"]["infer_per_s"])
                slot["p95_ms"].append(entry["run"]["p95_ms"])
    return {
        "best_infer_per_s": summary_of(rates),
        "best_p95_ms": summary_of([b["p95_ms"] for b in within]),
        "best_concurrencies": [b["concurrency"] if b else None for b in bests],
        "rounds_within_budget": len(within),
        "own_concurrency": {
            key: {"infer_per_s": summary_of(v["infer_per_s"]), "p95_ms": summary_of(v["p95_ms"])}
            for key, v in own.items()
        },
    }


def summary_of(values: Sequence[float]) -> dict[str, Any] | None:
    """median, min, max and the values; None for none."""
    if not values:
        return None
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "values": list(values),
    }
