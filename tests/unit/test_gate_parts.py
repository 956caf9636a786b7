"""The gate's pure parts: tolerances, checks, combining attempts, the baseline file, reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tuner.gate.baseline_file import (
    Baseline,
    BaselineError,
    GateSettings,
    LoadPoint,
    ModelBaseline,
    read_baseline,
    write_baseline,
)
from tuner.gate.compare import P95, THROUGHPUT, Check, Tolerance, best_of, checks, parse_tolerance
from tuner.gate.gating import GateOutcome
from tuner.gate.junit import junit_xml
from tuner.gate.machine import describe_machine, machine_differences
from tuner.gate.markdown import gate_markdown
from tuner.gate.recording import median_of


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


def test_best_of_attempts_takes_each_metric_at_its_best() -> None:
    best = best_of([point(100, 900), point(140, 1500), point(120, 700)])
    assert best.throughput == 140 and best.p95_us == 700


def test_median_of_repeats() -> None:
    median = median_of([point(100, 900), point(140, 1500), point(120, 700)])
    assert median.throughput == 120 and median.p95_us == 900 and median.request_count == 300


def _baseline() -> Baseline:
    return Baseline(
        recorded_at="2025-01-01T00:00:00+00:00",
        machine=describe_machine(),
        settings=GateSettings(measurement_interval_ms=300),
        models=[ModelBaseline("digits", "1", "ab" * 32, [point(5000, 1200, 1), point(9000, 2000)])],
    )


def test_baseline_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "perf-baseline.json"
    write_baseline(path, _baseline())
    assert json.loads(path.read_text())["schema"] == 1
    assert read_baseline(path) == _baseline()
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temporary file


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.update(schema=2), "'schema' is 2"),
        (lambda d: d.pop("machine"), "'machine' must be a JSON object, not missing"),
        (lambda d: d["models"].clear(), "'models' is empty"),
        (lambda d: d["models"][0]["loads"][1].update(p95_us=-1), "models[0].loads[1].p95_us"),
        (lambda d: d["models"][0].update(name=""), "models[0].name"),
        (lambda d: d["settings"].update(batch_size="1"), "settings.batch_size must be a number"),
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


def test_machine_differences_name_the_fields() -> None:
    here = describe_machine()
    assert machine_differences(here, here) == []
    other = {**here, "cpu_model": "Other CPU", "os": "whatever"}  # os is not compared
    assert machine_differences(other, here) == [f"cpu_model: 'Other CPU' -> {here['cpu_model']!r}"]


def _outcome() -> GateOutcome:
    tolerance = Tolerance(0.05, 0.05)
    outcome = GateOutcome(tolerance, notes=["a <note> & more"])
    outcome.checks = [
        *checks("digits", point(5000, 1000, 1), point(4900, 1010, 1), tolerance),
        *checks("a|b", point(5000, 1000), point(2000, 3000), tolerance, attempts=3),
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
    notes = [p.get("value") for p in suite.iter("property") if p.get("name") == "note"]
    assert notes == ["a <note> & more"]


def test_markdown_is_a_table_with_escaped_cells() -> None:
    text = gate_markdown(_outcome(), Path("perf-baseline.json"))
    assert text.startswith("## Performance gate: ❌ 2 regressions")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 5  # header + 4 checks
    assert "| ❌ | a\\|b | 4 | throughput (infer/s) | 5,000 | 2,000 | -60.0% | 3 |" in rows
    assert "- a <note> & more" in text


def test_check_change_is_relative() -> None:
    check = Check("m", 1, P95, 1000.0, 1500.0, 0.4)
    assert check.change == pytest.approx(0.5) and check.regressed
