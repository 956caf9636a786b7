"""Each tool's winner measured again on one tritonserver 2.51 by one client, for
benchmarks/model_analyzer_side.py. Not a script.

The contenders (the config as written, Model Analyzer's winner per mode, autotune's written
config) are model folders of their own in one repository (the python model's files, the
contender's config.pbtxt under its own name); identical configs are measured once. One
tritonserver in explicit model control serves them one at a time, interleaved: round after
round, each contender is loaded, its outputs checked (first round) and measured by the real
perf_analyzer 2.51, then unloaded (A, B, C, A, B, C, ...), so a slow spell of the machine hits
them all alike.

What a measurement is: the same concurrency sweep for every contender, in the manner of Model
Analyzer's own: concurrency 1, 2, 4, ... up to a cap until a point's p95 is over the budget,
then a binary search between the last point within the budget and that one (until they are
within a quarter of each other); the contender's figure in that round is the highest
throughput among its points within the budget. Each tool's search measured with its own client
(perf_analyzer's C++ client for Model Analyzer, our Python analyzer for autotune), and on 2
cores the client's own CPU moves the operating point a lot, so the sweep asks of every winner
the same question with the same client: the most it gives within the budget. Each contender is
also measured at its own reported concurrency (where its tool reported one) when the sweep did
not, recorded apart.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient
from google.protobuf import text_format
from peer import Run, Server, check_outputs, measure
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
class SweepSettings:
    budget_ms: float
    max_concurrency: int
    window_ms: int
    protocol: str
    attempts: int = 2  # perf_analyzer runs per point until its windows are stable


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


def sweep(
    measure_at: Callable[[int], Run | None], budget_ms: float, max_concurrency: int
) -> list[Run]:
    """Concurrency 1, 2, 4, ... until a point is over the budget (or the cap), then a binary
    search between the last point within it and that one; every point measured. A point
    without stable windows tells nothing: the sweep goes on past it (the binary search stops)."""
    limit_us = budget_ms * 1000
    runs: list[Run] = []
    low: int | None = None
    high: int | None = None
    concurrency = 1
    while concurrency <= max_concurrency:
        run = measure_at(concurrency)
        if run is not None:
            runs.append(run)
            if run.p95_us > limit_us:
                high = concurrency
                break
            low = concurrency
        concurrency *= 2
    while low is not None and high is not None and high - low > max(1, low // 4):
        middle = (low + high) // 2
        run = measure_at(middle)
        if run is None:
            break
        runs.append(run)
        if run.p95_us > limit_us:
            high = middle
        else:
            low = middle
    return runs


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


def measure_round(
    binary: Path,
    server: Server,
    model: str,
    item: Served,
    settings: SweepSettings,
    scratch: Path,
    check: bool,
) -> dict[str, Any]:
    """One contender once: loaded, checked, swept, measured at its own concurrency, unloaded."""
    load(server, item.name)
    try:
        if check:
            inputs, expected = reference(model)
            # no more rows than the config's max_batch_size accepts (Model Analyzer tries 1)
            rows = item.config.max_batch_size or None
            inputs = {name: value[:rows] for name, value in inputs.items()}
            expected = {name: value[:rows] for name, value in expected.items()}
            check_outputs(server, settings.protocol, item.name, inputs, expected, ORT_TOLERANCE)

        def measure_at(concurrency: int) -> Run | None:
            label = f"  {item.name} c{concurrency:<4}"
            return measure(
                settings.attempts,
                label,
                binary,
                server,
                item.name,
                settings.protocol,
                concurrency,
                settings.window_ms,
                scratch,
                "remeasure",
            )

        runs = sweep(measure_at, settings.budget_ms, settings.max_concurrency)
        own = []
        for concurrency in item.own_concurrencies:
            run = next((r for r in runs if r.concurrency == concurrency), None)
            if run is None:
                run = measure_at(concurrency)
            own.append({"concurrency": concurrency, "run": run and run_record(run)})
    finally:
        unload(server, item.name)
    best = best_within(runs, settings.budget_ms)
    return {
        "points": [run_record(run) for run in runs],
        "best": best and run_record(best),
        "own": own,
    }


def remeasure(
    binary: Path,
    server: Server,
    model: str,
    served: Sequence[Served],
    settings: SweepSettings,
    repeats: int,
    scratch: Path,
) -> list[dict[str, Any]]:
    """`repeats` interleaved rounds over `served`; per configuration its rounds and summary."""
    rounds: dict[str, list[dict[str, Any]]] = {item.name: [] for item in served}
    for index in range(repeats):
        print(f"{model}: re-measure round {index + 1} of {repeats}", flush=True)
        for item in served:
            result = measure_round(binary, server, model, item, settings, scratch, index == 0)
            rounds[item.name].append(result)
            best = result["best"]
            shown = (
                f"{best['infer_per_s']:,.1f} infer/s at c{best['concurrency']}, "
                f"p95 {best['p95_ms']:.2f} ms"
                if best
                else "no point within the budget"
            )
            print(f"{model}: {' = '.join(item.labels)}: {shown}", flush=True)
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
