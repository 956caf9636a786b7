"""GPU memory as a tuning constraint (`--max-gpu-memory`): the size flag, the constraint the
search is told, the figure recorded per trial, and the flag refused where there is no GPU."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

import serve.api
import tuner.evaluate as evaluate
from serve.api import ServingPlatform
from tuner.budget import LatencyBudget
from tuner.cli import main
from tuner.cli_params import parse_size
from tuner.duration import Duration
from tuner.search_study import objective_of
from tuner.search_types import GPU_MEMORY_METRIC, SearchSettings, TrialOutcome

BUDGET = LatencyBudget(95, Duration.from_ms(20))
GIB = 2**30


@pytest.mark.parametrize(
    ("text", "size"),
    [("8GiB", 8 * GIB), ("512 MiB", 512 * 2**20), ("2GB", 2 * 10**9), ("1.5GiB", 3 * GIB // 2)],
)
def test_sizes_take_binary_and_decimal_units(text: str, size: int) -> None:
    assert parse_size(text) == size
    assert parse_size(str(size)) == size


@pytest.mark.parametrize("text", ["8XB", "GiB", "-1GiB", "0", "eight"])
def test_a_bad_size_names_itself_and_the_units(text: str) -> None:
    with pytest.raises(ValueError, match=f"'{text}'"):
        parse_size(text)


def _ok(metrics: dict[str, float]) -> TrialOutcome:
    return TrialOutcome("ok", throughput=100.0, latency_us=10_000.0, metrics=metrics)


def test_gpu_memory_over_the_limit_makes_a_trial_infeasible() -> None:
    settings = SearchSettings(BUDGET, "s", max_gpu_memory_bytes=4 * GIB)
    assert settings.constraints(_ok({GPU_MEMORY_METRIC: 3 * GIB}))["gpu_memory"] == -0.25
    assert settings.feasible(_ok({GPU_MEMORY_METRIC: 3 * GIB}))
    assert not settings.feasible(_ok({GPU_MEMORY_METRIC: 5 * GIB}))
    # No figure (the trial never loaded): not held against the limit.
    assert settings.feasible(_ok({}))
    # Without the flag, no such constraint, and a study made with another limit is not resumed.
    assert "gpu_memory" not in SearchSettings(BUDGET, "s").constraints(_ok({}))
    assert objective_of(settings)["max_gpu_memory_bytes"] == str(4 * GIB)
    with pytest.raises(ValueError, match="max_gpu_memory_bytes"):
        SearchSettings(BUDGET, "s", max_gpu_memory_bytes=0)


class _Server:
    def process_ids(self) -> set[int]:
        return {100, 101}


def test_a_trial_records_the_gpu_memory_of_the_server_processes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[set[int]] = []

    def reading(pids: set[int]) -> int | None:
        asked.append(pids)
        return 3 * GIB

    monkeypatch.setattr(evaluate, "process_gpu_memory_bytes", reading)
    outcome = evaluate.with_gpu_memory(_ok({"concurrency": 4.0}), _Server())  # type: ignore[arg-type]
    assert outcome.metrics == {"concurrency": 4.0, GPU_MEMORY_METRIC: float(3 * GIB)}
    assert asked == [{100, 101}]
    monkeypatch.setattr(evaluate, "process_gpu_memory_bytes", lambda _pids: None)
    assert evaluate.with_gpu_memory(_ok({}), _Server()).metrics == {}  # type: ignore[arg-type]


def test_the_flag_is_refused_where_there_is_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    no_gpu = ServingPlatform(2, (), ("CPUExecutionProvider",), ("onnxruntime",), None)
    monkeypatch.setattr(serve.api, "detect_platform", lambda: no_gpu)
    result = CliRunner().invoke(main, ["--latency-p95", "10ms", "--max-gpu-memory", "8GiB"])
    assert result.exit_code == click.UsageError.exit_code
    assert "--max-gpu-memory needs a GPU" in result.output
