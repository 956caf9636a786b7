"""`autotune perf` on a sequence model and on ensembles, against our server over HTTP and
gRPC, and NVIDIA's perf_analyzer with the same flags on the same server.

The server checks what the load sends: a request on a new sequence id without
`sequence_start`, or without an id at all, fails (and would show as errors), and each
sequence's requests keep their id (the profile export records it). The ensemble `pair`
chains two copies of add_sub_py, `acc_pipe` wraps the stateful accumulator (an ensemble with
a stateful step is driven as a sequence model).
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.conftest import RepositoryFactory, _version_folders_of
from tests.support.perf_analyzer import perf_analyzer_path
from tests.support.server_process import RunningServer, start_server, stop_server

# Short windows and a loose stability rule: these tests check what is sent, not the figures.
QUICK = ["-p", "300", "-s", "100", "-r", "20"]

ADD_SUB = """# from: add_sub_py
name: "{name}"
backend: "python"
max_batch_size: 8
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }},
       {{ name: "INPUT1" data_type: TYPE_FP32 dims: [16] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }},
        {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }}]
dynamic_batching {{ }}
instance_group [{{ count: 1 kind: KIND_CPU }}]
"""

PAIR = """# from: digits_pipeline
name: "pair"
platform: "ensemble"
max_batch_size: 8
input [{ name: "A" data_type: TYPE_FP32 dims: [16] }, { name: "B" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "SUM" data_type: TYPE_FP32 dims: [16] },
        { name: "DIFF" data_type: TYPE_FP32 dims: [16] }]
ensemble_scheduling { step [
  { model_name: "first" model_version: -1
    input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
    output_map { key: "OUTPUT0" value: "s" } output_map { key: "OUTPUT1" value: "d" } },
  { model_name: "second" model_version: -1
    input_map { key: "INPUT0" value: "s" } input_map { key: "INPUT1" value: "d" }
    output_map { key: "OUTPUT0" value: "SUM" } output_map { key: "OUTPUT1" value: "DIFF" } }
] }
"""

ACC_PIPE = """# from: digits_pipeline
name: "acc_pipe"
platform: "ensemble"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]
ensemble_scheduling { step [
  { model_name: "accumulator" model_version: -1
    input_map { key: "INPUT" value: "X" } output_map { key: "OUTPUT" value: "Y" } }
] }
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("seq_ens")
    factory: RepositoryFactory = _factory(root, BUNDLED_REPOSITORY)
    accumulator = (BUNDLED_REPOSITORY / "accumulator" / "config.pbtxt").read_text()
    repository = factory(
        {
            "accumulator": "# from: accumulator\n" + accumulator,
            "first": ADD_SUB.format(name="first"),
            "second": ADD_SUB.format(name="second"),
            "pair": PAIR,
            "acc_pipe": ACC_PIPE,
        }
    )
    running = start_server(repository, root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def _factory(root: Path, bundled: Path) -> RepositoryFactory:
    """tests.integration.conftest's make_repository, for a module-scoped server."""

    def build(models: dict[str, str]) -> Path:
        repository = root / "repository"
        repository.mkdir()
        for name, config in models.items():
            source = bundled / config.splitlines()[0].removeprefix("# from:").strip()
            shutil.copytree(source, repository / name, ignore=_version_folders_of(source))
            (repository / name / "config.pbtxt").write_text(config)
        return repository

    return build


def autotune_perf(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "from tuner.cli import main; main()", "perf", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=150)


def url(server: RunningServer, protocol: str) -> str:
    return server.grpc_url if protocol == "grpc" else server.url


def run_ok(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[Any]]:
    json_path = tmp_path / "perf.json"
    result = autotune_perf(*args, "--json", str(json_path), *QUICK)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "requests failed" not in result.stderr
    measurements = json.loads(json_path.read_text())
    assert measurements and all(m["error_count"] == 0 for m in measurements)
    return result, measurements


def requests_by_sequence(export: Path) -> dict[int, list[dict[str, Any]]]:
    document = json.loads(export.read_text())
    by_id: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for experiment in document["experiments"]:
        for request in experiment["requests"]:
            assert "error" not in request
            by_id[request["sequence_id"]].append(request)
    return by_id


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrency_mode_runs_sequences_with_ids_in_the_range(
    server: RunningServer, tmp_path: Path, protocol: str
) -> None:
    export = tmp_path / "export.json"
    run_ok(
        tmp_path,
        *("-m", "accumulator", "-u", url(server, protocol), "-i", protocol),
        *("--concurrency-range", "2", "--sequence-length", "3"),
        *("--sequence-id-range", "7:11", "--profile-export-file", str(export)),
    )
    by_id = requests_by_sequence(export)
    assert set(by_id) <= {7, 8, 9, 10}
    assert len(by_id) == 4  # sequences of ~3 requests: the ids wrapped around the range
    for requests in by_id.values():  # one request of a sequence at a time
        times = sorted((r["timestamp"], r["response_timestamps"][0]) for r in requests)
        # two slots may use an id one after the other, never while one is outstanding
        assert all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(times))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_request_rate_mode_spreads_over_the_sequences(
    server: RunningServer, tmp_path: Path, protocol: str
) -> None:
    export = tmp_path / "export.json"
    run_ok(
        tmp_path,
        *("-m", "accumulator", "-u", url(server, protocol), "-i", protocol),
        *("--request-rate-range", "60", "--num-of-sequences", "3", "--serial-sequences"),
        *("--sequence-length", "1000", "--profile-export-file", str(export)),
    )
    assert set(requests_by_sequence(export)) == {1, 2, 3}


def test_a_bad_sequence_flag_is_refused_naming_it(server: RunningServer) -> None:
    result = autotune_perf("-m", "accumulator", "-u", server.url, "--sequence-id-range", "5:2")
    assert result.returncode != 0 and "--sequence-id-range" in result.stderr
    result = autotune_perf(
        *("-m", "accumulator", "-u", server.url, "--concurrency-range", "4"),
        *("--sequence-id-range", "1:3"),
    )
    assert result.returncode != 0 and "has only 2 ids" in result.stderr


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_ensemble_reports_its_composing_models(
    server: RunningServer, tmp_path: Path, protocol: str
) -> None:
    csv_path = tmp_path / "pair.csv"
    result, measurements = run_ok(
        tmp_path,
        *("-m", "pair", "-u", url(server, protocol), "-i", protocol),
        *("--concurrency-range", "2", "-f", str(csv_path)),
    )
    assert "Composing models: " in result.stdout
    assert "  first, version: 1" in result.stdout and "  second, version: 1" in result.stdout
    (m,) = measurements
    assert list(m["composing"]) == ["first", "second"]
    for part in m["composing"].values():
        assert part["available"] and part["compute_infer_us"] > 0
        # each ensemble request runs each step once; the snapshots may split requests in flight
        assert abs(part["request_count"] - m["server"]["request_count"]) <= 2
    for name in ("first", "second"):
        lines = (tmp_path / f"{name}_v1.pair.csv").read_text().splitlines()
        assert lines[0].startswith("Concurrency,Inferences/Second,Client Send,")
        assert lines[1].startswith("2,") and len(lines) == 2


def test_an_ensemble_with_a_stateful_step_is_driven_as_a_sequence_model(
    server: RunningServer, tmp_path: Path
) -> None:
    export = tmp_path / "export.json"
    _, measurements = run_ok(
        tmp_path,
        *("-m", "acc_pipe", "-u", server.url, "--concurrency-range", "2"),
        *("--sequence-length", "4", "--profile-export-file", str(export)),
    )
    assert len(requests_by_sequence(export)) > 2  # sequences ended and new ones began
    assert list(measurements[0]["composing"]) == ["accumulator"]


def perf_analyzer(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(perf_analyzer_path()), *args, *QUICK]
    return subprocess.run(command, capture_output=True, text=True, timeout=150)


def test_perf_analyzer_with_the_same_flags_on_the_same_server(
    server: RunningServer, tmp_path: Path
) -> None:
    sequences = perf_analyzer(
        *("-m", "accumulator", "-u", server.url, "--concurrency-range", "2"),
        *("--sequence-length", "3", "--sequence-id-range", "7:11"),
    )
    assert sequences.returncode == 0, sequences.stdout + sequences.stderr
    ensemble = perf_analyzer("-m", "pair", "-u", server.url, "--concurrency-range", "2")
    assert ensemble.returncode == 0, ensemble.stdout + ensemble.stderr
    theirs = ensemble.stdout
    assert "Composing models: " in theirs
    assert "  first, version: 1" in theirs and "  second, version: 1" in theirs
    ours, _ = run_ok(tmp_path, "-m", "pair", "-u", server.url, "--concurrency-range", "2")
    for out in (theirs, ours.stdout):
        block = out[out.index("Composing models: ") :]
        assert block.index("first, version: 1") < block.index("second, version: 1")
        assert block.count("Successful request count: ") == 2
