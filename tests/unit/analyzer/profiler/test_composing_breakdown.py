"""An ensemble's composing models: found from the configs (nested ensembles, versions,
cycles), their counters read with the ensemble's, their breakdown from the deltas over the
windows, and perf_analyzer's console section and per-model CSV files."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from analyzer.ensembles import ComposingModel, composing_models, is_sequence_model
from analyzer.errors import AnalyzerError
from analyzer.measurement import Measurement, ServerBreakdown
from analyzer.profiler.server_stats import ServerCounters, breakdown, composing_breakdowns
from analyzer.profiler.statistics_client import ServerStatistics
from analyzer.report.composing import (
    composing_csv_path,
    composing_csv_text,
    composing_lines,
    write_composing_csvs,
)
from analyzer.report.csv_report import CsvLayout


def step(model: str, version: int = -1) -> dict[str, Any]:
    return {"model_name": model, "model_version": str(version)}


def ensemble(name: str, *steps: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "platform": "ensemble", "ensemble_scheduling": {"step": list(steps)}}


class Configs:
    def __init__(self, configs: dict[str, dict[str, Any]]) -> None:
        self.configs = configs
        self.asked: list[tuple[str, str]] = []

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]:
        self.asked.append((model, version))
        return self.configs[model]


def test_composing_models_are_found_depth_first_with_nested_ensembles() -> None:
    top = ensemble("pipe", step("pre"), step("inner", 2), step("post"), step("pre"))
    client = Configs(
        {
            "pre": {"name": "pre", "backend": "python"},
            "inner": ensemble("inner", step("model", 1)),
            "model": {"name": "model", "sequence_batching": {}},
            "post": {"name": "post"},
        }
    )
    found = asyncio.run(composing_models(client, top))
    assert [(m.name, m.version, m.parent) for m in found] == [
        ("pre", "", "pipe"),
        ("inner", "2", "pipe"),
        ("model", "1", "inner"),
        ("post", "", "pipe"),
    ]
    assert ("pre", "") in client.asked and client.asked.count(("pre", "")) == 1
    assert is_sequence_model(top, found)  # a stateful step makes the ensemble stateful
    assert not is_sequence_model({"name": "plain"}, ())
    assert asyncio.run(composing_models(client, {"name": "plain"})) == ()


def test_a_cycle_of_ensembles_is_refused() -> None:
    client = Configs({"b": ensemble("b", step("a"))})
    with pytest.raises(AnalyzerError, match="cycle"):
        asyncio.run(composing_models(client, ensemble("a", step("b"))))


def stats_entry(name: str, version: str, count: int, queue_ns: int, infer_ns: int) -> dict:
    def duration(c: int, ns: int) -> dict[str, str]:
        return {"count": str(c), "ns": str(ns)}

    return {
        "name": name,
        "version": version,
        "inference_count": str(count),
        "execution_count": str(count // 2),
        "inference_stats": {
            "success": duration(count, (queue_ns + infer_ns) * count + 1000 * count),
            "queue": duration(count, queue_ns * count),
            "compute_input": duration(count, 0),
            "compute_infer": duration(count, infer_ns * count),
            "compute_output": duration(count, 0),
        },
    }


class Stats:
    """Every model's statistics document, growing with each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def statistics(self, model: str = "", version: str = "") -> dict[str, Any]:
        self.calls.append((model, version))
        n = len(self.calls) * 100  # each snapshot: 100 more requests everywhere
        return {
            "model_stats": [
                stats_entry("pipe", "1", n, 0, 0),
                stats_entry("pre", "1", n, 10_000, 20_000),
                stats_entry("pre", "3", 7 * n, 1, 1),  # the latest version of "pre"
                stats_entry("post", "1", 2 * n, 30_000, 50_000),
            ]
        }


def test_composing_counters_are_read_with_the_ensembles_and_broken_down_per_model() -> None:
    client = Stats()
    stats = ServerStatistics(client, "pipe", "1", [("pre", "1"), ("post", "")])
    before = asyncio.run(stats.snapshot())
    after = asyncio.run(stats.snapshot())
    assert before is not None and after is not None
    assert client.calls == [("", ""), ("", "")]  # one call for every model at once
    assert stats.versions == {"pre": "1", "post": "1"}
    delta = after.minus(before)
    parts = composing_breakdowns(delta)
    assert list(parts) == ["pre", "post"]
    assert parts["pre"].request_count == 100 and parts["post"].request_count == 200
    assert parts["pre"].queue_us == pytest.approx(10.0)
    assert parts["pre"].compute_infer_us == pytest.approx(20.0)
    assert parts["post"].queue_us == pytest.approx(30.0)
    assert parts["post"].overhead_us == pytest.approx(1.0)
    assert breakdown(delta).request_count == 100  # the ensemble's own


def test_a_plain_model_reads_only_its_own_statistics() -> None:
    client = Stats()
    stats = ServerStatistics(client, "post", "1")
    counters = asyncio.run(stats.snapshot())
    assert counters is not None and counters.composing == ()
    assert client.calls == [("post", "1")]


def test_a_composing_model_without_statistics_leaves_the_breakdown_out() -> None:
    stats = ServerStatistics(Stats(), "pipe", "1", [("missing", "")])
    assert asyncio.run(stats.snapshot()) is None
    assert "missing" in stats.problem


def test_minus_matches_composing_models_by_name() -> None:
    later = ServerCounters(success_count=5, composing=(("a", ServerCounters(success_count=9)),))
    earlier = ServerCounters(success_count=2, composing=(("a", ServerCounters(success_count=4)),))
    delta = later.minus(earlier)
    assert delta.success_count == 3 and dict(delta.composing)["a"].success_count == 5


def part(count: int, queue: float, infer: float, total: float) -> ServerBreakdown:
    return ServerBreakdown(
        request_count=count,
        execution_count=count,
        inference_count=count,
        queue_us=queue,
        compute_infer_us=infer,
        total_us=total,
        available=True,
    )


def measurement(throughput: float, composing: dict[str, ServerBreakdown]) -> Measurement:
    return Measurement(
        model="pipe",
        concurrency=2,
        request_rate=0.0,
        batch_size=1,
        throughput=throughput,
        request_throughput=throughput,
        request_count=100,
        error_count=0,
        errors={},
        latency_avg_us=500.0,
        latency_p50_us=400.0,
        latency_p90_us=600.0,
        latency_p95_us=700.0,
        latency_p99_us=900.0,
        server=part(100, 0.0, 0.0, 400.0),
        composing=composing,
    )


MODELS = (
    ComposingModel("pre", "", "pipe", {"name": "pre"}),
    ComposingModel("inner", "", "pipe", ensemble("inner", step("model"))),
    ComposingModel("model", "", "inner", {"name": "model"}),
)


def test_console_section_follows_perf_analyzers_layout() -> None:
    m = measurement(
        1000.0,
        {
            "pre": part(100, 50.0, 100.0, 160.0),
            "inner": part(100, 0.0, 0.0, 200.0),
            "model": part(100, 30.0, 120.0, 190.0),
        },
    )
    lines = composing_lines(m, "pipe", MODELS, {"pre": "1", "inner": "1", "model": "4"})
    assert lines[:5] == [
        "  Server: ",
        "    Inference count: 100",
        "    Execution count: 100",
        "    Successful request count: 100",
        # queue and compute: the sums over the leaves (pre, and inner's model)
        "    Avg request latency: 400 usec (overhead 100 usec + queue 80 usec + compute 220 usec)",
    ]
    assert "  Composing models: " in lines
    assert "  pre, version: 1" in lines
    assert (
        "      Avg request latency: 160 usec (overhead 10 usec + queue 50 usec + compute input"
        " 0 usec + compute infer 100 usec + compute output 0 usec)"
    ) in lines
    assert "    model, version: 4" in lines  # nested under inner
    assert composing_lines(measurement(1.0, {}), "pipe", (), {}) == []


def test_composing_csv_files_scale_throughput_by_request_ratio(tmp_path: Path) -> None:
    layout = CsvLayout(concurrency_mode=True)
    rows = [
        measurement(2000.0, {"pre": part(200, 50.0, 100.0, 160.0)}),
        measurement(1000.0, {"pre": part(50, 40.0, 90.0, 140.0)}),
    ]
    text = composing_csv_text(rows, "pre", layout)
    assert text.splitlines() == [
        "Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,"
        "Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv",
        "2,500,0,10,40,0,90,0,0",  # 1000 infer/s x 50/100 requests
        "2,4000,0,10,50,0,100,0,0",
    ]
    main = tmp_path / "perf.csv"
    written = write_composing_csvs(main, rows, {"pre": "3"}, layout)
    assert written == [tmp_path / "pre_v3.perf.csv"] == [composing_csv_path(main, "pre", "3")]
    assert written[0].read_text() == text
