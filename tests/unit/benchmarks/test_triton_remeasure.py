"""benchmarks/triton_remeasure.py: the concurrency sweep a point at a time, contenders' sweeps
advancing together within a round, and autotune's ratios taken round by round."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture
def remeasure(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    # The benchmarks import their siblings by plain name, as `python benchmarks/x.py` runs them.
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import triton_remeasure

    return triton_remeasure


def run(peer_run: Any, concurrency: int, p95_ms: float, rate: float = 100.0) -> Any:
    return peer_run("triton", "remeasure", concurrency, rate, int(p95_ms * 1000))


def walk(module: ModuleType, p95_of: Any, budget_ms: float = 10.0, cap: int = 256) -> list[int]:
    """The points a sweep asks for when a point's p95 is `p95_of(concurrency)` (None: no
    stable windows)."""
    from peer import Run

    sweep = module.Sweep(budget_ms, cap)
    asked = []
    while (point := sweep.next_concurrency()) is not None:
        asked.append(point)
        p95 = p95_of(point)
        sweep.record(None if p95 is None else run(Run, point, p95))
    return asked


def test_the_sweep_doubles_until_over_the_budget_then_bisects(remeasure: ModuleType) -> None:
    # p95 = 0.3 ms x concurrency: within 10 ms up to 33
    assert walk(remeasure, lambda c: 0.3 * c) == [1, 2, 4, 8, 16, 32, 64, 48, 40]


def test_the_sweep_stops_at_the_cap_when_every_point_is_within(remeasure: ModuleType) -> None:
    assert walk(remeasure, lambda c: 1.0, cap=8) == [1, 2, 4, 8]


def test_the_first_point_over_the_budget_ends_the_sweep(remeasure: ModuleType) -> None:
    assert walk(remeasure, lambda c: 50.0) == [1]


def test_an_unstable_point_is_passed_while_doubling_and_ends_the_bisection(
    remeasure: ModuleType,
) -> None:
    assert walk(remeasure, lambda c: None if c == 4 else 0.3 * c) == [
        1,
        2,
        4,
        8,
        16,
        32,
        64,
        48,
        40,
    ]
    assert walk(remeasure, lambda c: None if c == 48 else 0.3 * c) == [1, 2, 4, 8, 16, 32, 64, 48]


def test_a_round_advances_the_contenders_sweeps_together(
    remeasure: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from peer import Run

    calls: list[tuple[str, int]] = []
    # A over the budget from concurrency 4, B from 2: B's sweep ends first and drops out.
    limits = {"a": 3, "b": 1}

    def fake_measure(*args: Any) -> Any:
        model, concurrency = args[4], args[6]
        calls.append((model, concurrency))
        p95 = 5.0 if concurrency <= limits[model] else 20.0
        return run(Run, concurrency, p95, rate=10.0 * concurrency)

    monkeypatch.setattr(remeasure, "measure", fake_measure)
    served = [
        remeasure.Served(name, (name.upper(),), remeasure.mc.ModelConfig(), ())
        for name in ("a", "b")
    ]
    client = remeasure.RemeasureClient("fake", ("fake",), "http")
    settings = remeasure.SweepSettings(10.0, 64, 100, client)
    results = remeasure.measure_round(object(), served, settings, tmp_path)
    assert calls == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 4), ("a", 3)]
    assert results["a"]["best"]["concurrency"] == 3
    assert results["b"]["best"]["concurrency"] == 1


def entry(labels: list[str], bests: list[float | None]) -> dict[str, Any]:
    rounds = [{"best": None if b is None else {"infer_per_s": b}} for b in bests]
    return {"labels": labels, "rounds": rounds}


def test_ratios_are_taken_within_each_round(remeasure: ModuleType) -> None:
    measured = [
        entry(["as written", "autotune"], [100.0, 60.0, 120.0]),
        entry(["Model Analyzer quick"], [80.0, 50.0, None]),
    ]
    ratios = remeasure.paired_ratios(measured, "autotune")
    assert ratios["as written"]["values"] == [1.0, 1.0, 1.0]
    # round 3 has no figure for quick: left out, not counted as 0
    assert ratios["Model Analyzer quick"]["values"] == [1.25, 1.2]
    assert ratios["Model Analyzer quick"]["median"] == pytest.approx(1.225)


def test_no_ratios_without_an_autotune_winner(remeasure: ModuleType) -> None:
    assert remeasure.paired_ratios([entry(["as written"], [1.0])], "autotune") == {}
