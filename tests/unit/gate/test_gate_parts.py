"""The gate's pure parts: tolerances, checks, the statistic of runs on both sides, the verdict
on a load, the baseline file, reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gate.baseline_file import (
    Baseline,
    BaselineError,
    GateSettings,
    LoadPoint,
    ModelBaseline,
    read_baseline,
    write_baseline,
)
from gate.compare import P95, THROUGHPUT, Check, Tolerance, checks, parse_tolerance
from gate.gating import GateOutcome
from gate.judging import Verdict, judge_load
from gate.junit import junit_xml
from gate.machine import describe_machine, machine_differences
from gate.markdown import gate_markdown
from gate.statistic import describe_runs, median_of, summarize


def point(throughput: float, p95_us: float, concurrency: int = 4) -> LoadPoint:
    return LoadPoint(
        concurrency=concurrency,
        throughput=throughput,
        p50_us=p95_us / 2,
        p95_us=p95_us,
        p99_us=p95_us * 2,
        avg_us=p95_us / 2,
        request_count=100,
    )


@pytest.mark.parametrize(("text", "value"), [("5%", 0.05), ("0.05", 0.05), (" 12.5 % ", 0.125)])
def test_tolerance_accepts_percent_or_fraction(text: str, value: float) -> None:
    assert parse_tolerance(text) == pytest.approx(value)


@pytest.mark.parametrize(("text", "message"), [("5", "ambiguous"), ("abc", "not a tolerance")])
def test_tolerance_refuses_ambiguous_or_bad_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tolerance(text)


def test_throughput_fall_and_p95_rise_beyond_tolerance_regress() -> None:
    found = checks("digits", point(5120, 1000), point(3010, 1040), Tolerance(0.05, 0.05))
    throughput, p95 = found
    assert throughput.metric == THROUGHPUT and throughput.regressed
    assert p95.metric == P95 and not p95.regressed  # +4% is within 5%
    assert throughput.describe() == (
        "digits @ concurrency 4: throughput 5,120 -> 3,010 infer/s (-41.2%, tolerance 5%)"
    )
    faster = checks("digits", point(5120, 1000), point(9000, 400), Tolerance(0.05, 0.05))
    assert not any(c.regressed for c in faster)  # improvements never fail


def test_latency_tolerance_applies_to_p95_only() -> None:
    _, p95 = checks("m", point(100, 1000), point(100, 2500), Tolerance(0.05, 2.0))
    assert not p95.regressed and p95.tolerance == 2.0
    assert "p95 latency 1.00 -> 2.50 ms (+150.0%, tolerance 200%)" in p95.describe()


def test_median_of_repeats() -> None:
    median = median_of([point(100, 900), point(140, 1500), point(120, 700)])
    assert median.throughput == 120 and median.p95_us == 900 and median.request_count == 300


def test_the_statistic_is_named_and_only_the_median_is_known() -> None:
    assert describe_runs("median", 1) == "a single run"
    assert describe_runs("median", 3) == "median of 3 runs"
    assert describe_runs("median", 6, 2) == "median of 6 runs in 2 attempts"
    with pytest.raises(ValueError, match="unknown statistic 'best'"):
        summarize([point(100, 900)], "best")


TEN_PERCENT = Tolerance(0.10, 0.10)


def _judge(runs: list[LoadPoint], repeats: int, retries: int) -> tuple[Verdict, list[str]]:
    """The verdict on a load whose baseline is the median 100 infer/s, p95 1 ms, when the
    gate's runs measure `runs` in turn; and the pauses and messages in between."""
    supply: Iterator[LoadPoint] = iter(runs)
    events: list[str] = []
    verdict = judge_load(
        "m",
        point(100, 1000),
        GateSettings(repeats=repeats),
        TEN_PERCENT,
        retries,
        measure=lambda: next(supply),
        pause=lambda: events.append("pause"),
        say=events.append,
    )
    return verdict, events


def test_the_gate_compares_its_median_with_the_baseline_median_not_its_best_run() -> None:
    # The best run (130 infer/s, p95 0.7 ms) would pass; the median of the set, like the
    # baseline's, is 15% slower and 15% later: a regression at 10%.
    verdict, events = _judge([point(130, 700), point(85, 1150), point(80, 1200)], 3, 0)
    throughput, p95 = verdict.checks
    assert throughput.current == 85 and throughput.regressed
    assert p95.current == 1150 and p95.regressed
    assert (len(verdict.runs), verdict.attempts) == (3, 1) and events == []
    assert throughput.describe() == (
        "m @ concurrency 4: throughput 100 -> 85.0 infer/s (-15.0%, tolerance 10%), "
        "median of 3 runs"
    )


def test_a_retry_measures_a_whole_set_and_judges_the_median_of_all_runs() -> None:
    # One lucky run in each set would pass on its own; the median of all six does not.
    runs = [point(130, 700), point(85, 1150), point(80, 1200)]
    runs += [point(84, 1140), point(125, 720), point(83, 1160)]
    verdict, events = _judge(runs, 3, 1)
    assert (len(verdict.runs), verdict.attempts) == (6, 2)
    assert verdict.regressed and verdict.checks[0].current == pytest.approx(84.5)
    assert events[0].startswith("measuring again (2 of 2): m @ concurrency 4: throughput")
    assert events[1] == "pause"
    assert verdict.checks[0].describe().endswith("median of 6 runs in 2 attempts")


def test_a_passing_retry_set_outweighs_a_disturbed_first_set() -> None:
    disturbed = [point(80, 1300), point(82, 1250), point(81, 1280)]
    calm = [point(99, 1010), point(101, 990), point(100, 1000)] * 2
    verdict, events = _judge(disturbed + calm, 3, 2)
    assert not verdict.regressed  # the median of 9 runs, 6 of them calm
    assert (len(verdict.runs), verdict.attempts) == (9, 3) and events.count("pause") == 2


def test_an_unchanged_load_within_tolerance_is_measured_once() -> None:
    verdict, events = _judge([point(95, 1050), point(60, 3000), point(104, 980)], 3, 2)
    assert not verdict.regressed and verdict.checks[0].current == 95
    assert (len(verdict.runs), verdict.attempts) == (3, 1) and events == []


def test_a_single_run_baseline_is_compared_with_a_single_run() -> None:
    verdict, _ = _judge([point(89, 1000), point(91, 1000)], 1, 1)
    assert (len(verdict.runs), verdict.attempts) == (2, 2)  # median of 2 runs: 90, -10%
    assert not verdict.regressed


def _baseline() -> Baseline:
    return Baseline(
        recorded_at="2025-01-01T00:00:00+00:00",
        machine=describe_machine(),
        settings=GateSettings(measurement_interval_ms=300, repeats=3),
        models=[ModelBaseline("digits", "1", "ab" * 32, [point(5000, 1200, 1), point(9000, 2000)])],
    )


def test_baseline_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "perf-baseline.json"
    write_baseline(path, _baseline())
    document = json.loads(path.read_text())
    assert document["schema"] == 2
    assert (document["settings"]["repeats"], document["settings"]["statistic"]) == (3, "median")
    assert read_baseline(path) == _baseline()
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temporary file


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.update(schema=3), "'schema' is 3; this autotune reads schemas 1 and 2"),
        (lambda d: d["settings"].update(statistic="best"), "settings.statistic is 'best'"),
        (lambda d: d["settings"].pop("statistic"), "settings.statistic must be a non-empty"),
        (lambda d: d["settings"].update(repeats=0), "settings.repeats must be a whole number"),
        (lambda d: d["settings"].update(repeats=1.5), "settings.repeats must be a whole number"),
        (lambda d: d.pop("machine"), "'machine' must be a JSON object, not missing"),
        (lambda d: d["models"].clear(), "'models' is empty"),
        (lambda d: d["models"][0]["loads"][1].update(p95_us=-1), "models[0].loads[1].p95_us"),
        (lambda d: d["models"][0].update(name=""), "models[0].name"),
        (lambda d: d["settings"].update(batch_size="1"), "settings.batch_size must be a number"),
        (lambda d: d["settings"].update(protocol="udp"), "settings.protocol is 'udp'"),
    ],
)
def test_malformed_baseline_names_the_file_and_field(
    tmp_path: Path, edit: Callable[[dict[str, Any]], object], problem: str
) -> None:
    path = tmp_path / "b.json"
    document = _baseline().to_json()
    edit(document)
    path.write_text(json.dumps(document))
    with pytest.raises(BaselineError) as caught:
        read_baseline(path)
    assert str(path) in str(caught.value) and problem in str(caught.value)


def test_baseline_records_the_protocol_and_reads_http_when_absent(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    grpc_baseline = replace(_baseline(), settings=replace(_baseline().settings, protocol="grpc"))
    write_baseline(path, grpc_baseline)
    assert json.loads(path.read_text())["settings"]["protocol"] == "grpc"
    assert read_baseline(path).settings.protocol == "grpc"
    document = _baseline().to_json()
    del document["settings"]["protocol"]  # recorded before gRPC
    path.write_text(json.dumps(document))
    assert read_baseline(path).settings.protocol == "http"


def _schema_1(document: dict[str, Any], repeats: int | None) -> dict[str, Any]:
    """`document` as autotune wrote it before the statistic was recorded."""
    settings = {k: v for k, v in document["settings"].items() if k not in ("repeats", "statistic")}
    if repeats is not None:
        settings["baseline_repeats"] = repeats
    return {**document, "schema": 1, "settings": settings}


@pytest.mark.parametrize(("repeats", "expected"), [(3, 3), (None, 1)])
def test_schema_1_baseline_reads_as_the_median_of_its_repeats(
    tmp_path: Path, repeats: int | None, expected: int
) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_schema_1(_baseline().to_json(), repeats)))
    settings = read_baseline(path).settings
    assert (settings.repeats, settings.statistic) == (expected, "median")
    assert read_baseline(path).models == _baseline().models


def test_machine_differences_name_the_fields() -> None:
    here = describe_machine()
    assert machine_differences(here, here) == []
    other = {**here, "cpu_model": "Other CPU", "os": "whatever"}  # os is not compared
    assert machine_differences(other, here) == [f"cpu_model: 'Other CPU' -> {here['cpu_model']!r}"]


def _outcome() -> GateOutcome:
    tolerance = Tolerance(0.05, 0.05)
    outcome = GateOutcome(tolerance, repeats=3, notes=["a <note> & more"])
    outcome.checks = [
        *checks("digits", point(5000, 1000, 1), point(4900, 1010, 1), tolerance),
        *checks("a|b", point(5000, 1000), point(2000, 3000), tolerance, runs=9, attempts=3),
    ]
    outcome.seconds = {("digits", 1): 1.5, ("a|b", 4): 4.0}
    return outcome


def test_junit_has_one_testcase_per_metric_and_failures_with_messages() -> None:
    root = ET.fromstring(junit_xml(_outcome(), Path("perf-baseline.json")))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "0")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [
        "concurrency 1: throughput",
        "concurrency 1: p95",
        "concurrency 4: throughput",
        "concurrency 4: p95",
    ]
    failures = [c.find("failure") for c in cases]
    assert failures[:2] == [None, None]
    message = failures[2].get("message", "") if failures[2] is not None else ""
    assert message.startswith("a|b @ concurrency 4: throughput 5,000 -> 2,000 infer/s (-60.0%")
    assert message.endswith(", median of 9 runs in 3 attempts")
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["note"] == "a <note> & more"
    assert properties["statistic"] == "median of 3 runs per load"


def test_markdown_is_a_table_with_escaped_cells() -> None:
    text = gate_markdown(_outcome(), Path("perf-baseline.json"))
    assert text.startswith("## Performance gate: ❌ 2 regressions")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 5  # header + 4 checks
    row = "| ❌ | a\\|b | 4 | throughput (infer/s) | 5,000 | 2,000 | -60.0% | 9 in 3 attempts |"
    assert row in rows
    assert "Both sides: median of 3 runs per load" in text
    assert "- a <note> & more" in text


def test_check_change_is_relative() -> None:
    check = Check("m", 1, P95, 1000.0, 1500.0, 0.4)
    assert check.change == pytest.approx(0.5) and check.regressed
