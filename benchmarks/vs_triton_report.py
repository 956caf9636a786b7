"""The tables of benchmarks/vs_triton.py: built once as rows of text, printed either as terminal
tables (rich) or in the markdown layout of docs/benchmarks.md.

Per model, protocol and concurrency:
1. throughput: each server's median infer/s [range] and median p95, the ratios of the medians
   to Triton's;
2. ceiling (onnxruntime models): in-process onnxruntime's median [range] at the batch size the
   cell allows (the concurrency, at most max_batch_size) with the model's threads, and each
   server's median over it;
3. resources: each server's median CPU seconds per 1,000 requests, highest peak RSS of its
   process tree, median rows per batch it ran.
Then the start-up times. `raw` gives every figure they are built from, for vs_triton.py's raw
results (benchmarks/results/vs_triton*.json). Not a script.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from peer import Run
from rich.console import Console
from rich.table import Table
from rich.text import Text
from startup import Startup
from usage import Usage

SERVER_TITLES = {"ours": "ours", "ours-python": "ours, python model", "triton": "Triton 2.51"}
MODE_TITLES = {
    "http": "HTTP",
    "grpc": "gRPC",
    "grpc-streaming": "gRPC streaming",
    "grpc-shm": "gRPC system shm",
    "http-shm": "HTTP system shm",
}
KEY_HEADERS = ["model", "protocol", "c"]


@dataclass(frozen=True)
class Sample:
    """One server's perf_analyzer run in one cell, and what the server spent on it."""

    model: str
    mode: str
    run: Run  # run.server, run.concurrency, infer/s, p95
    usage: Usage | None


@dataclass(frozen=True)
class Ceiling:
    """One in-process onnxruntime run: rows/s at `batch` rows a run."""

    model: str
    concurrency: int
    batch: int
    threads: str
    rate: float


@dataclass(frozen=True)
class Section:
    title: str
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Results:
    samples: list[Sample]
    ceilings: list[Ceiling]
    startups: list[Startup]
    servers: list[str]  # the measured servers, in the order of the columns
    cells: list[tuple[str, str, int]]  # (model, mode, concurrency) in the order measured
    repeats: int


def _median_rate(samples: Sequence[Sample]) -> float:
    return statistics.median(s.run.infer_per_s for s in samples)


def _rate_range(rates: Sequence[float]) -> str:
    return f"{statistics.median(rates):,.0f} [{min(rates):,.0f}-{max(rates):,.0f}]"


def _count(n: int, repeats: int) -> str:
    return "" if n == repeats else f" (n={n})"


def _throughput_cell(samples: Sequence[Sample], repeats: int) -> str:
    if not samples:
        return "-"
    p95_ms = statistics.median(s.run.p95_us for s in samples) / 1000
    rates = [s.run.infer_per_s for s in samples]
    return f"{_rate_range(rates)}, p95 {p95_ms:.2f} ms{_count(len(samples), repeats)}"


def _ratio(mine: Sequence[Sample], theirs: Sequence[Sample] | float) -> str:
    if not mine:
        return "-"
    if isinstance(theirs, float):
        return f"{_median_rate(mine) / theirs:.2f}"
    if not theirs:
        return "-"
    return f"{_median_rate(mine) / _median_rate(theirs):.2f}"


def _usage_cell(samples: Sequence[Sample]) -> str:
    usages = [s.usage for s in samples if s.usage is not None]
    per_1000 = [u.cpu_s_per_1000 for u in usages if u.cpu_s_per_1000 is not None]
    batches = [u.average_batch for u in usages if u.average_batch is not None]
    if not per_1000:
        return "-"
    rss_mib = max(u.peak_rss_bytes for u in usages) / 2**20
    batch = f", batch {statistics.median(batches):.1f}" if batches else ""
    return f"{statistics.median(per_1000):.3f} s, {rss_mib:,.0f} MiB{batch}"


def sections(results: Results) -> list[Section]:
    servers = results.servers
    titles = [SERVER_TITLES[s] for s in servers]
    others = [s for s in servers if s != "triton"]
    with_triton = "triton" in servers
    throughput = Section(
        "Throughput: median infer/s [range], median p95",
        [
            *KEY_HEADERS,
            *titles,
            *([f"{SERVER_TITLES[s]} / Triton" for s in others] if with_triton else []),
        ],
        [],
    )
    ceiling = Section(
        "Ceiling: in-process onnxruntime at the cell's batch size and the model's threads",
        [
            *KEY_HEADERS,
            "in-process infer/s [range]",
            *[f"{title} / in-process" for title in titles],
        ],
        [],
    )
    resources = Section(
        "Server: median CPU s per 1,000 requests, peak RSS of the process tree, median batch",
        [*KEY_HEADERS, *titles],
        [],
    )
    for model, mode, concurrency in results.cells:
        key = [model, MODE_TITLES.get(mode, mode), str(concurrency)]
        by_server = {
            server: [
                s
                for s in results.samples
                if (s.model, s.mode, s.run.concurrency, s.run.server)
                == (model, mode, concurrency, server)
            ]
            for server in servers
        }
        row = [*key, *[_throughput_cell(by_server[s], results.repeats) for s in servers]]
        if with_triton:
            row += [_ratio(by_server[s], by_server["triton"]) for s in others]
        throughput.rows.append(row)
        resources.rows.append([*key, *[_usage_cell(by_server[s]) for s in servers]])
        ceilings = [c for c in results.ceilings if (c.model, c.concurrency) == (model, concurrency)]
        if ceilings:
            rates = [c.rate for c in ceilings]
            first = ceilings[0]
            label = f"{_rate_range(rates)} (batch {first.batch}, intra-op threads {first.threads})"
            in_process = statistics.median(rates)
            ceiling.rows.append([*key, label, *[_ratio(by_server[s], in_process) for s in servers]])
    found = [throughput, ceiling, resources]
    if results.startups:
        found.append(
            Section(
                "Start-up: launch to /v2/health/ready = 200, median [range]",
                ["server", "repository", "ready in"],
                [
                    [SERVER_TITLES.get(s.server, s.server), s.repository, s.describe()]
                    for s in results.startups
                ],
            )
        )
    return [section for section in found if section.rows]


def raw(results: Results) -> dict[str, Any]:
    """Every figure of `results` as JSON values: each server's perf_analyzer run (`samples`:
    model, mode, its run's server, concurrency, infer/s and p95 in us, and its usage: CPU
    seconds, peak RSS bytes and the requests, rows and batches served), each in-process run
    (`ceilings`), each start-up's seconds (`startups`), the servers and cells in the tables'
    order and the rounds asked for (`repeats`)."""
    return asdict(results)


def print_tables(results: Results) -> None:
    console = Console(width=220)
    for section in sections(results):
        # Text, not markup: "[range]" and "[1-2]" are meant literally.
        table = Table(title=Text(section.title), title_justify="left")
        for header in section.headers:
            table.add_column(Text(header), overflow="fold")
        for row in section.rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)


def markdown(results: Results, preamble: Sequence[str]) -> str:
    """The tables in docs/benchmarks.md's layout, after `preamble` (date, machine, command)."""
    lines = [*preamble, ""]
    for section in sections(results):
        lines += [f"{section.title}:", ""]
        lines.append("| " + " | ".join(section.headers) + " |")
        lines.append("|" + "---|" * len(section.headers))
        lines += ["| " + " | ".join(row) + " |" for row in section.rows]
        lines.append("")
    return "\n".join(lines)
