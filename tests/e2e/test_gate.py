"""`autotune baseline` then `autotune gate`: the same config passes, a slowed one fails and
names the regression, a bad baseline is an environment error, and the reports parse."""

from __future__ import annotations

import json
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


def _copy(recorded: Path, target: Path) -> Path:
    shutil.copytree(recorded, target)
    return target


def _testcases(path: Path) -> list[ET.Element]:
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    return list(root.iter("testcase"))


def test_baseline_file_records_each_model_load_and_the_machine(recorded: Path) -> None:
    document = json.loads((recorded / "perf-baseline.json").read_text())
    assert document["schema"] == 1
    machine = document["machine"]
    for key in ("cpu_model", "logical_cpus", "memory_gib", "os", "python", "onnxruntime"):
        assert machine[key], key
    assert machine["autotune"] == "0.1.0"
    assert document["recorded_at"]
    assert document["settings"]["measurement_interval_ms"] == 300
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
    cases = _testcases(work / "gate.xml")
    assert len(cases) == 8  # 2 models x 2 loads x (throughput, p95)
    assert not [c for c in cases if c.find("failure") is not None]
    markdown = (work / "gate.md").read_text()
    assert "| model | concurrency | metric | baseline | now | change | attempts |" in markdown
    assert markdown.count("| ✅ |") == 8
    assert "| add_sub_py | 4 | p95 latency (ms) |" in markdown


def test_slowed_model_fails_and_names_the_regression(recorded: Path, tmp_path: Path) -> None:
    work = _copy(recorded, tmp_path / "work")
    config = work / "model_repository" / "add_sub_py" / "config.pbtxt"
    slowed = config.read_text().replace('string_value: "0"', f'string_value: "{SLOW_DELAY_MS}"')
    assert slowed != config.read_text()
    config.write_text(slowed)
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
    assert "best of 2 attempts" in result.stdout  # the regression was measured twice
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
        ('{"schema": 99, "models": []}', "'schema' is 99; this autotune reads schema 1"),
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
