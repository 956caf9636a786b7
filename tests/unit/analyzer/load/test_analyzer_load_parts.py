"""The load generator's pure parts: schedules, flag parsing, request framing, model info."""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest

from analyzer.errors import AnalyzerError
from analyzer.load.base import LoadLevel
from analyzer.load.factory import (
    check_options,
    model_info,
    parse_header_flag,
    parse_shape_flag,
    worker_count,
)
from analyzer.load.options import LoadOptions
from analyzer.load.process import split_concurrency
from analyzer.load.schedule import (
    ScheduleSpec,
    intervals_rate,
    read_intervals_file,
    send_delays_ns,
)
from common.gpu import list_gpus


def take(iterator: itertools.Iterator[int] | object, count: int) -> list[int]:
    return list(itertools.islice(iterator, count))  # type: ignore[call-overload]


def send_times(rate: float, spec: ScheduleSpec, count: int) -> list[int]:
    return list(itertools.accumulate(take(send_delays_ns(rate, spec), count)))


# schedules


def test_constant_schedule_is_evenly_spaced_from_zero() -> None:
    assert take(send_delays_ns(400.0, ScheduleSpec()), 4) == [0, 2_500_000, 2_500_000, 2_500_000]
    times = send_times(3.0, ScheduleSpec(), 4)
    assert times == [0, 333_333_333, 666_666_667, 1_000_000_000]  # no drift from rounding


def test_poisson_schedule_is_seeded_with_the_right_mean() -> None:
    delays = take(send_delays_ns(1000.0, ScheduleSpec("poisson", seed=3)), 20_000)
    assert delays == take(send_delays_ns(1000.0, ScheduleSpec("poisson", seed=3)), 20_000)
    assert delays != take(send_delays_ns(1000.0, ScheduleSpec("poisson", seed=4)), 20_000)
    assert statistics.mean(delays[1:]) == pytest.approx(1e6, rel=0.05)
    assert statistics.stdev(delays[1:]) == pytest.approx(1e6, rel=0.1)  # exponential gaps


def test_custom_intervals_loop_and_override_the_rate() -> None:
    spec = ScheduleSpec(intervals_us=(100, 300))
    assert take(send_delays_ns(1.0, spec), 5) == [0, 100_000, 300_000, 100_000, 300_000]
    assert intervals_rate([100, 300]) == pytest.approx(5000.0)


@pytest.mark.parametrize(
    "spec", [ScheduleSpec(), ScheduleSpec("poisson", 1), ScheduleSpec(intervals_us=(5, 1, 9))]
)
def test_shares_together_are_the_whole_schedule(spec: ScheduleSpec) -> None:
    whole = send_times(700.0, spec, 300)
    shares = [
        send_times(700.0, ScheduleSpec(spec.distribution, spec.seed, spec.intervals_us, i, 3), 100)
        for i in range(3)
    ]
    assert sorted(itertools.chain(*shares)) == whole


def test_intervals_file(tmp_path: Path) -> None:
    path = tmp_path / "intervals.txt"
    path.write_text("1000\n\n 2500 \n0\n")
    assert read_intervals_file(path) == [1000, 2500, 0]
    path.write_text("1000\n1.5\n")
    with pytest.raises(AnalyzerError, match=r"line 2: '1.5' is not a whole number"):
        read_intervals_file(path)
    path.write_text("0\n")
    with pytest.raises(AnalyzerError, match="at least one interval above 0"):
        read_intervals_file(path)
    with pytest.raises(AnalyzerError, match="cannot read --request-intervals file"):
        read_intervals_file(tmp_path / "missing")


def test_split_concurrency() -> None:
    assert split_concurrency(7, 3) == [3, 2, 2]
    assert split_concurrency(1, 2) == [1, 0]
    assert split_concurrency(0, 2) == [0, 0]


def test_worker_count() -> None:
    assert worker_count(LoadOptions("h", "m", worker_processes=3), None) == 3
    assert worker_count(LoadOptions("h", "m"), None) == 1
    assert worker_count(LoadOptions("h", "m"), LoadLevel(concurrency=8)) == 1
    assert worker_count(LoadOptions("h", "m"), LoadLevel(request_rate=100)) == 1
    assert worker_count(LoadOptions("h", "m"), LoadLevel(request_rate=1e9)) >= 1


# flags and options


def test_shape_flag() -> None:
    assert parse_shape_flag("INPUT0:3,224,224") == ("INPUT0", [3, 224, 224])
    assert parse_shape_flag("ns:name:5") == ("ns:name", [5])
    for bad in ("INPUT0", "INPUT0:", "INPUT0:3,x", ":3", "X:-1"):
        with pytest.raises(AnalyzerError, match="--shape"):
            parse_shape_flag(bad)


def test_header_flag() -> None:
    assert parse_header_flag("Authorization: Bearer abc") == ("Authorization", "Bearer abc")
    assert parse_header_flag("X-Trace:1") == ("X-Trace", "1")
    for bad in ("no colon", "bad name: x", "Content-Length: 3"):
        with pytest.raises(AnalyzerError, match="-H"):
            parse_header_flag(bad)


@pytest.mark.skipif(bool(list_gpus()), reason="shows the refusal on a machine without a GPU")
def test_cuda_shared_memory_without_a_gpu_is_refused_clearly() -> None:
    with pytest.raises(AnalyzerError, match=r"--shared-memory cuda puts .* NVML finds no GPU"):
        check_options(LoadOptions("h", "m", shared_memory="cuda"))


def test_unsupported_options_are_refused_clearly() -> None:
    with pytest.raises(AnalyzerError, match="-i must be http or grpc, got 'udp'"):
        check_options(LoadOptions("h", "m", protocol="udp"))
    with pytest.raises(AnalyzerError, match="--streaming needs -i grpc"):
        check_options(LoadOptions("h", "m", streaming=True))
    with pytest.raises(AnalyzerError, match="--output-shared-memory-size must be at least 1"):
        check_options(LoadOptions("h", "m", shared_memory="system", output_shared_memory_size=0))
    for accepted in (
        LoadOptions("h", "m", protocol="grpc"),
        LoadOptions("h", "m", protocol="grpc", streaming=True, shared_memory="system"),
        LoadOptions("h", "m", shared_memory="system"),
    ):
        check_options(accepted)
    with pytest.raises(AnalyzerError, match="--request-distribution must be constant or poisson"):
        check_options(LoadOptions("h", "m", request_distribution="uniform"))
    with pytest.raises(AnalyzerError, match="--input-tensor-format must be binary or json"):
        check_options(LoadOptions("h", "m", input_tensor_format="yaml"))


def test_model_info_from_metadata_and_config() -> None:
    metadata = {
        "name": "simple",
        "versions": ["1", "10", "2"],
        "inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]}],
    }
    info = model_info(metadata, {"max_batch_size": 8}, "")
    assert (info.name, info.version, info.max_batch_size) == ("simple", "10", 8)
    assert info.inputs[0].shape == [-1, 16]
    assert model_info(metadata, {"max_batch_size": 8}, "2").version == "2"
    with pytest.raises(AnalyzerError, match="malformed inputs entry"):
        model_info({**metadata, "inputs": [{"name": "x"}]}, {}, "")
    with pytest.raises(AnalyzerError, match="has no 'name'"):
        model_info({}, {}, "")


def test_analyzer_never_imports_serve() -> None:
    """The analyzer is a client of any KServe v2 server: it must not lean on our server's code."""
    root = Path(__file__).resolve().parents[4]
    offenders = [
        str(path.relative_to(root))
        for path in (root / "analyzer").rglob("*.py")
        if any(
            line.strip().startswith(("import serve", "from serve"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []
