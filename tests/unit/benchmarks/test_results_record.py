"""benchmarks/results_record.py: every record starts with the same header, is written whole to
benchmarks/results/<name>.json (or the folder given) and reads back; a smoke run's records go
elsewhere."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"
HEADER = {"benchmark", "date", "machine", "revision", "command"}


@pytest.fixture
def results_record(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # The benchmarks import their siblings by plain name, as `python benchmarks/x.py` runs them.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import results_record

    return results_record


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_the_header_names_benchmark_date_machine_revision_and_command(
    results_record: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / "demo.py"), "--repeats", "2", "--x", "a b"])
    days = {datetime.now(UTC).date().isoformat()}
    header = results_record.header("demo")
    days.add(datetime.now(UTC).date().isoformat())  # the call may straddle midnight
    assert set(header) == HEADER
    assert header["benchmark"] == "demo"
    assert header["date"] in days
    assert header["command"] == "demo.py --repeats 2 --x 'a b'"
    assert isinstance(header["revision"], str) and header["revision"]
    machine = header["machine"]
    assert {"cpu_model", "logical_cpus", "usable_cpus", "python", "onnxruntime"} <= set(machine)
    assert isinstance(machine["load_average_1m"], float)
    assert json.loads(json.dumps(header)) == header


def test_a_record_is_written_to_its_path_and_reads_back(
    results_record: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = {**results_record.header("demo"), "runs": [{"infer_per_s": 1234.5, "p95_us": 870}]}
    path = results_record.write_record("demo-digits", record, tmp_path / "out")
    assert path == tmp_path / "out" / "demo-digits.json"
    assert json.loads(path.read_text()) == record
    assert f"raw results: {path}" in capsys.readouterr().out
    assert _names(path.parent) == ["demo-digits.json"]


def test_a_failed_write_leaves_the_old_record_whole(
    results_record: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = results_record.write_record("demo", {"runs": [1.0]}, tmp_path)

    def interrupted(source: str, target: str) -> None:
        raise OSError("killed before the rename")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(OSError, match="killed"):
        results_record.write_record("demo", {"runs": [2.0, 3.0]}, tmp_path)
    assert json.loads(path.read_text()) == {"runs": [1.0]}
    assert _names(tmp_path) == ["demo.json"]  # no temporary file left beside it


def test_records_go_to_benchmarks_results_unless_a_folder_is_given(
    results_record: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert results_record.RESULTS == BENCHMARKS / "results"
    monkeypatch.setattr(results_record, "RESULTS", tmp_path / "results")
    assert results_record.write_record("demo", {}) == tmp_path / "results" / "demo.json"
    assert results_record.results_directory(None, smoke=False) == tmp_path / "results"
    assert results_record.results_directory(tmp_path, smoke=True) == tmp_path
    smoke = results_record.results_directory(None, smoke=True)
    try:
        assert smoke.is_dir() and smoke != tmp_path / "results" and _names(smoke) == []
    finally:
        shutil.rmtree(smoke)


def test_smoke_settings_replace_the_defaults_but_not_the_options_given(
    results_record: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def parse(*argv: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        parser.add_argument("--repeats", type=int, default=3)
        parser.add_argument("--window-ms", type=int, default=4000)
        monkeypatch.setattr(sys, "argv", ["demo.py", *argv])
        args: argparse.Namespace = results_record.parse_with_smoke(
            parser, {"repeats": 1, "window_ms": 500}
        )
        return args

    full = parse()
    assert (full.repeats, full.window_ms, full.smoke) == (3, 4000, False)
    assert full.output == results_record.RESULTS
    smoke = parse("--smoke", "--repeats", "2", "--output", str(tmp_path))
    assert (smoke.repeats, smoke.window_ms, smoke.smoke) == (2, 500, True)
    assert smoke.output == tmp_path


def test_a_smoke_setting_for_a_missing_option_is_refused(
    results_record: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    monkeypatch.setattr(sys, "argv", ["demo.py"])
    with pytest.raises(ValueError, match="window_ms"):
        results_record.parse_with_smoke(parser, {"repeats": 1, "window_ms": 500})
