"""`autotune baseline` then `autotune gate`: the same config passes, a slowed one fails and
names the regression, the workflow's 10% tolerance tells a 20% slower model from an unchanged
one, a bad baseline is an environment error, and the reports parse."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.conftest import autotune

MODELS = ("simple", "add_sub_py")
# Short windows keep the file within a minute or two on two cores. The tolerances and retries
# are what this shared two-core machine needs: under other work its sub-millisecond p95 swings
# 2-3x while throughput moves by a third. The slowed model below is 20x slower, far beyond.
SHORT = ("--measurement-interval", "300")
TOLERANCES = ("--tolerance", "60%", "--latency-tolerance", "250%")
SLOW_DELAY_MS = "40"

# The workflow's tolerances (.github/workflows/perf-gate.yml), tested on a model whose time is
# a fixed sleep: add_sub_py sleeping 60 ms per execute at concurrency 1 serves ~16.2 infer/s,
# and on this busy two-core machine its runs stay within 2.6% of each other; the median of 3
# came within 0.1% of the baseline's, and within -4.2%..+2.8% with two CPU burners besides
# (one set 12% slow there, outvoted by its retry). Sleeping 72 ms, a 20% slower execute, it
# serves 13.3 infer/s, 16-18% less. Windows of 800 ms hold ~13 requests.
WORKFLOW_TOLERANCES = ("--tolerance", "10%", "--latency-tolerance", "25%")
STEADY_DELAY_MS = "60"
SLOWER_DELAY_MS = "72"  # +20%
STEADY_WINDOW = ("--measurement-interval", "800")
_DELAY = re.compile(r'(key: "EXECUTE_DELAY_MS"\s*value \{ string_value: ")[^"]*(")')


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, bundled_repository: Path) -> Path:
    """A work folder with model_repository/{simple,add_sub_py} and perf-baseline.json."""
    work = tmp_path_factory.mktemp("gate")
    for model in MODELS:
        shutil.copytree(bundled_repository / model, work / "model_repository" / model)
    result = autotune(
        work, "baseline", "--out", "perf-baseline.json", "--repeats", "2", *SHORT, timeout=240
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return work


def _set_execute_delay(model: Path, delay_ms: str) -> None:
    """Make `model` (a copy of add_sub_py) sleep `delay_ms` in every execute."""
    config = model / "config.pbtxt"
    text, count = _DELAY.subn(rf"\g<1>{delay_ms}\g<2>", config.read_text())
    assert count == 1, config
    config.write_text(text)


@pytest.fixture(scope="module")
def steady(tmp_path_factory: pytest.TempPathFactory, bundled_repository: Path) -> Path:
    """A work folder with add_sub_py sleeping STEADY_DELAY_MS and its baseline at
    concurrency 1 (the median of 3 runs)."""
    work = tmp_path_factory.mktemp("gate-steady")
    model = work / "model_repository" / "add_sub_py"
    shutil.copytree(bundled_repository / "add_sub_py", model)
    _set_execute_delay(model, STEADY_DELAY_MS)
    result = autotune(
        work, "baseline", "--concurrency", "1", "--repeats", "3", *STEADY_WINDOW, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(median of 3 runs)" in result.stdout
    return work


def _copy(recorded: Path, target: Path) -> Path:
    shutil.copytree(recorded, target)
    return target


def _testcases(path: Path) -> list[ET.Element]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return list(root.iter("testcase"))


def test_baseline_file_records_each_model_load_and_the_machine(recorded: Path) -> None:
    document = json.loads((recorded / "perf-baseline.json").read_text())
    assert document["schema"] == 2
    machine = document["machine"]
    for key in ("cpu_model", "logical_cpus", "memory_gib", "os", "python", "onnxruntime"):
        assert machine[key], key
    assert machine["autotune"] == "0.1.0"
    assert document["recorded_at"]
    settings = document["settings"]
    assert settings["measurement_interval_ms"] == 300
    assert (settings["repeats"], settings["statistic"]) == (2, "median")
    assert sorted(m["name"] for m in document["models"]) == sorted(MODELS)
    for model in document["models"]:
        assert len(model["config_sha256"]) == 64
        assert [load["concurrency"] for load in model["loads"]] == [1, 4]
        for load in model["loads"]:
            assert load["throughput"] > 0
            assert 0 < load["p50_us"] <= load["p95_us"] <= load["p99_us"]


def test_same_config_passes(recorded: Path, tmp_path: Path) -> None:
    work = _copy(recorded, tmp_path / "work")
    result = autotune(
        work,
        "gate",
        "--baseline",
        "perf-baseline.json",
        *TOLERANCES,
        "--retries",
        "3",
        "--junit",
        "gate.xml",
        "--markdown",
        "gate.md",
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gate passed: 8 checks" in result.stdout
    assert "measured as the baseline's was: median of 2 runs" in result.stdout
    cases = _testcases(work / "gate.xml")
    assert len(cases) == 8  # 2 models x 2 loads x (throughput, p95)
    assert not [c for c in cases if c.find("failure") is not None]
    markdown = (work / "gate.md").read_text()
    assert "| model | concurrency | metric | baseline | now | change | runs |" in markdown
    assert markdown.count("| ✅ |") == 8
    assert "| add_sub_py | 4 | p95 latency (ms) |" in markdown


def test_slowed_model_fails_and_names_the_regression(recorded: Path, tmp_path: Path) -> None:
    work = _copy(recorded, tmp_path / "work")
    _set_execute_delay(work / "model_repository" / "add_sub_py", SLOW_DELAY_MS)
    result = autotune(
        work,
        "gate",
        "-m",
        "add_sub_py",
        *TOLERANCES,
        "--retries",
        "1",
        "--junit",
        "gate.xml",
        "--markdown",
        "gate.md",
        timeout=240,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "gate failed" in result.stdout
    assert "add_sub_py @ concurrency 1: throughput" in result.stdout
    assert "add_sub_py @ concurrency 1: p95 latency" in result.stdout
    assert "tolerance 60%" in result.stdout and "tolerance 250%" in result.stdout
    assert "median of 4 runs in 2 attempts" in result.stdout  # a second set of 2 runs
    assert "the served config differs from the baseline's" in result.stderr

    cases = _testcases(work / "gate.xml")
    assert len(cases) == 4
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert {"concurrency 1: throughput", "concurrency 1: p95"} <= failed
    suite = ET.parse(work / "gate.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("failures") == str(len(failed))
    for case in cases:
        failure = case.find("failure")
        if failure is not None:
            assert case.get("classname", "").endswith("add_sub_py")
            assert failure.get("message", "").startswith("add_sub_py @ concurrency")
    markdown = (work / "gate.md").read_text()
    assert "## Performance gate: ❌" in markdown
    assert "| ❌ | add_sub_py | 1 | throughput (infer/s) |" in markdown


def test_unchanged_config_passes_at_the_workflows_ten_percent(steady: Path, tmp_path: Path) -> None:
    work = _copy(steady, tmp_path / "work")
    result = autotune(work, "gate", *WORKFLOW_TOLERANCES, "--retries", "2", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "measured as the baseline's was: median of 3 runs" in result.stdout
    assert "gate passed: 2 checks within throughput 10%, p95 25%" in result.stdout
    assert "ok add_sub_py @ concurrency 1: throughput" in result.stdout


def test_twenty_percent_slower_model_fails_at_the_workflows_ten_percent(
    steady: Path, tmp_path: Path
) -> None:
    work = _copy(steady, tmp_path / "work")
    _set_execute_delay(work / "model_repository" / "add_sub_py", SLOWER_DELAY_MS)
    # No retry: one more set of runs could only confirm a 16-18% fall.
    result = autotune(work, "gate", *WORKFLOW_TOLERANCES, "--retries", "0", timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    regression = (
        r"^  add_sub_py @ concurrency 1: throughput [\d.]+ -> [\d.]+ infer/s \(-[\d.]+%, "
        r"tolerance 10%\), median of 3 runs$"
    )
    assert re.search(regression, result.stdout, re.MULTILINE), result.stdout


def test_missing_baseline_is_an_environment_error(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository_with("simple")
    result = autotune(tmp_path, "gate", "--baseline", "absent.json")
    assert result.returncode == 2
    assert "absent.json does not exist" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "is not valid JSON"),
        ('{"schema": 99, "models": []}', "'schema' is 99; this autotune reads schemas 1 and 2"),
        ("[]", "the top level must be a JSON object"),
        ('{"schema": 1, "recorded_at": "x", "machine": {}, "settings": {}}', "'models'"),
    ],
)
def test_malformed_baseline_is_an_environment_error(
    tmp_path: Path, repository_with: Callable[..., Path], content: str, problem: str
) -> None:
    repository_with("simple")
    (tmp_path / "perf-baseline.json").write_text(content)
    result = autotune(tmp_path, "gate")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "perf-baseline.json" in result.stderr
    assert problem in result.stderr
    assert "Traceback" not in result.stderr


def test_baseline_model_missing_from_repository(recorded: Path, tmp_path: Path) -> None:
    work = _copy(recorded, tmp_path / "work")
    shutil.rmtree(work / "model_repository" / "simple")
    result = autotune(work, "gate")
    assert result.returncode == 2
    assert "'simple' of perf-baseline.json" in result.stderr


def test_unreachable_server_is_an_environment_error(recorded: Path) -> None:
    result = autotune(recorded, "gate", "--url", "127.0.0.1:1")
    assert result.returncode == 2
    assert "cannot reach the server at 127.0.0.1:1" in result.stderr
