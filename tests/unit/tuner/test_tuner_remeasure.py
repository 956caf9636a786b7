"""Re-measuring the top candidates: which are picked, how they are interleaved, the loads they
are measured at (lowered when over the budget, raised when there is headroom), and the rule
that picks the winner (the best median throughput whose median percentile is in budget, the
config as written kept when the gain is within the range of its repeats)."""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from analyzer.api import AnalyzerError, Measurement
from tuner.budget import LatencyBudget
from tuner.candidate import Candidate
from tuner.duration import Duration
from tuner.remeasure import (
    RemeasureSettings,
    choose_winner,
    highest_load,
    judge,
    pick_top,
    remeasure,
    with_remeasure,
)
from tuner.remeasure_result import RemeasuredCandidate, RemeasureResult
from tuner.report.console import print_summary
from tuner.report.remeasure import headline
from tuner.run import TuneOptions, search_time_left
from tuner.run_schema import PlatformInfo, RunSummary
from tuner.search_types import TrialOutcome, TrialRecord
from tuner.server_control import ServerError

BUDGET = LatencyBudget(95, Duration.from_ms(20))
SETTINGS = RemeasureSettings(top=3, repeats=3)


def _trial(
    number: int,
    throughput: float,
    *,
    instances: int | None = None,
    feasible: bool = True,
    as_written: bool = False,
    concurrency: int = 4,
) -> TrialRecord:
    candidate = Candidate({"instance_count": instances if instances is not None else number})
    outcome = TrialOutcome(
        "ok",
        throughput=throughput,
        latency_us=10_000.0,
        metrics={"concurrency": float(concurrency), "p95_us": 10_000.0},
    )
    return TrialRecord(number, "COMPLETE", candidate, outcome, feasible, 1.0, as_written=as_written)


def _measurement(concurrency: int, throughput: float, p95_ms: float) -> Measurement:
    p95_us = p95_ms * 1000
    return Measurement(
        model="m",
        concurrency=concurrency,
        request_rate=0.0,
        batch_size=1,
        throughput=throughput,
        request_throughput=throughput,
        request_count=100,
        error_count=0,
        errors={},
        latency_avg_us=p95_us / 2,
        latency_p50_us=p95_us / 2,
        latency_p90_us=p95_us,
        latency_p95_us=p95_us,
        latency_p99_us=p95_us,
    )


def _remeasured(
    trial: int, throughputs: Sequence[float], p95_ms: Sequence[float], as_written: bool = False
) -> RemeasuredCandidate:
    return RemeasuredCandidate(
        trial=trial,
        key=f"inst={trial}",
        as_written=as_written,
        concurrency=4,
        search_throughput=1000.0,
        search_latency_us=10_000.0,
        throughputs=tuple(throughputs),
        latencies_us=tuple(ms * 1000 for ms in p95_ms),
    )


def test_the_top_distinct_feasible_configurations_are_picked_best_first() -> None:
    trials = [
        _trial(0, 500.0, as_written=True),
        _trial(1, 900.0, instances=2),
        _trial(2, 950.0, instances=2),  # the same configuration as trial 1, measured again
        _trial(3, 2000.0, feasible=False),
        _trial(4, 800.0),
        _trial(5, 700.0),
    ]
    assert [t.number for t in pick_top(trials, 1)] == [2]
    # The config as written, feasible, takes the last place: its comparison is re-measured.
    assert [t.number for t in pick_top(trials, 3)] == [2, 4, 0]
    assert [t.number for t in pick_top(trials, 10)] == [2, 4, 5, 0]
    assert pick_top(trials, 0) == []


def test_one_slow_repeat_does_not_drop_a_candidate_but_a_median_over_budget_does() -> None:
    noisy = judge(_remeasured(1, [1000, 990, 1010], [12.0, 35.0, 13.0]), BUDGET)
    assert noisy.held, noisy.message
    over = judge(_remeasured(2, [1200, 1190, 1210], [21.0, 35.0, 13.0]), BUDGET)
    assert not over.held and "median p95 21.00 ms is over 20 ms" in over.message
    slow = judge(_remeasured(3, [90, 95, 100], [1.0, 1.0, 1.0]), BUDGET, min_throughput=200.0)
    assert not slow.held and "minimum" in slow.message


def test_the_winner_is_the_best_median_among_those_that_held() -> None:
    candidates = [
        judge(_remeasured(1, [3000, 900, 950], [10, 25, 21]), BUDGET),  # lucky once, over budget
        judge(_remeasured(2, [1000, 1100, 400], [10, 11, 12]), BUDGET),  # median 1000
        judge(_remeasured(3, [1050, 1040, 1060], [10, 11, 12]), BUDGET),  # median 1050
    ]
    winner = choose_winner(candidates)
    assert winner is not None and winner.trial == 3
    assert choose_winner([c for c in candidates if c.trial == 1]) is None


def test_candidates_are_measured_interleaved_each_at_its_own_load() -> None:
    trials = [_trial(1, 1000.0, concurrency=8), _trial(2, 900.0, concurrency=2)]
    order: list[tuple[str, object]] = []
    figures = {8: iter([950.0, 1200.0, 1000.0]), 2: iter([1100.0, 1150.0, 1120.0])}

    def load(candidate: Candidate) -> None:
        order.append(("load", candidate["instance_count"]))

    def measure(concurrency: int) -> Measurement:
        order.append(("measure", concurrency))
        # Near the 20 ms limit: no headroom for a higher load.
        return _measurement(concurrency, next(figures[concurrency]), 18.0)

    result = remeasure(trials, load, measure, BUDGET, SETTINGS, search_best=1).result
    assert order == [("load", 1), ("measure", 8), ("load", 2), ("measure", 2)] * 3
    assert result.rounds == 3
    # The search ranked trial 1 first; re-measured, trial 2's median is higher.
    assert result.winner == 2 and result.changed_winner
    by_trial = {c.trial: c for c in result.candidates}
    assert by_trial[1].throughputs == (950.0, 1200.0, 1000.0)
    spread = by_trial[2].throughput
    assert spread is not None and (spread.median, spread.low, spread.high) == (1120, 1100, 1150)


def test_a_candidate_that_does_not_load_is_dropped_and_the_next_one_wins() -> None:
    trials = [_trial(1, 1000.0), _trial(2, 900.0)]

    def load(candidate: Candidate) -> None:
        if candidate["instance_count"] == 1:
            raise ServerError("out of memory")

    def measure(concurrency: int) -> Measurement:
        return _measurement(concurrency, 800.0, 5.0)

    result = remeasure(trials, load, measure, BUDGET, SETTINGS, search_best=1).result
    dropped = result.candidate(1)
    assert dropped is not None and not dropped.held and "out of memory" in dropped.message
    assert result.winner == 2


def test_the_deadline_cuts_the_rounds_after_the_first() -> None:
    trials = [_trial(1, 1000.0)]
    result = remeasure(
        trials,
        lambda _c: None,
        lambda c: _measurement(c, 1000.0, 5.0),
        BUDGET,
        SETTINGS,
        search_best=1,
        deadline=0.0,  # long past
    ).result
    assert result.rounds == 1 and "1 of 3 rounds" in result.note
    assert result.winner == 1


def _summary(trials: Sequence[TrialRecord]) -> RunSummary:
    return RunSummary(
        model="m",
        budget=BUDGET,
        platform=PlatformInfo(2),
        study="s",
        stop_reason="done",
        trials=tuple(trials),
        as_written=trials[0],
        best=max(trials, key=lambda t: t.outcome.throughput if t.outcome else 0.0),
        lowest_latency=trials[0],
    )


def _remeasured_summary(trials: list[TrialRecord], figures: list[float]) -> RunSummary:
    """Every trial re-measured (trial 1 the search's best) with `figures` in measuring order
    at 10 ms, and the summary that results."""
    readings = iter(figures)
    remeasured = remeasure(
        pick_top(trials, len(trials)),
        lambda _c: None,
        lambda c: _measurement(c, next(readings), 10.0),
        BUDGET,
        SETTINGS,
        search_best=1,
    )
    return with_remeasure(_summary(trials), remeasured)


def test_the_summary_reports_the_winner_with_the_re_measured_medians() -> None:
    trials = [_trial(0, 500.0, as_written=True), _trial(1, 1000.0), _trial(2, 900.0)]
    # Measured in the order 1, 2, 0 (the config as written last), three rounds.
    figures = [700.0, 650.0, 400.0, 720.0, 640.0, 410.0, 710.0, 660.0, 420.0]
    summary = _remeasured_summary(trials, figures)
    assert summary.best is not None and summary.best.number == 1
    # Reported: the median of its repeats, the statistic that chose it.
    assert summary.best.outcome is not None and summary.best.outcome.throughput == 710.0
    assert summary.as_written is not None and summary.as_written.outcome is not None
    assert summary.as_written.outcome.throughput == 410.0
    # The trials keep the search's own figures.
    assert summary.trials[1].outcome is not None and summary.trials[1].outcome.throughput == 1000
    again = RunSummary.from_json(summary.to_json())
    assert again.remeasure == summary.remeasure
    out = io.StringIO()
    print_summary(again, Console(file=out, width=200))
    text = out.getvalue()
    assert "710.0 [700.0-720.0]" in text and "re-measured" in text


def test_a_winner_on_medians_is_reported_ahead_of_the_config_as_written() -> None:
    # The winner's rounds spread wider than the as-written's: better median, worse lowest
    # round. What is reported must be what chose it, so best / as written is not under 1
    # while the winner is written (it was 0.90x when the lowest round was reported).
    trials = [_trial(0, 500.0, as_written=True), _trial(1, 1000.0)]
    # Measured in the order 1, 0, three rounds.
    summary = _remeasured_summary(trials, [2604.0, 2535.0, 2242.0, 2504.0, 2681.0, 2540.0])
    assert summary.best is not None and summary.best.number == 1
    assert summary.best.outcome is not None and summary.as_written is not None
    assert summary.as_written.outcome is not None
    assert summary.best.outcome.throughput > summary.as_written.outcome.throughput
    out = io.StringIO()
    print_summary(summary, Console(file=out, width=200))
    assert "best / as written throughput: 1.03x" in out.getvalue()


def test_no_candidate_holding_the_budget_leaves_no_best() -> None:
    trials = [_trial(0, 500.0, as_written=True), _trial(1, 1000.0)]
    remeasured = remeasure(
        trials,
        lambda _c: None,
        lambda c: _measurement(c, 900.0, 30.0),
        BUDGET,
        SETTINGS,
        search_best=1,
    )
    summary = with_remeasure(_summary(trials), remeasured)
    assert summary.best is None and summary.exit_code == 3
    assert isinstance(summary.remeasure, RemeasureResult) and summary.remeasure.winner is None


def test_the_search_leaves_the_re_measure_its_time_at_most_a_third() -> None:
    started = time.monotonic()
    on = TuneOptions(Path("repo"), BUDGET, remeasure=RemeasureSettings(top=3, repeats=3))
    off = TuneOptions(Path("repo"), BUDGET, remeasure=RemeasureSettings(top=0))
    # (3 candidates + one measured again at another load) x 3 x (4 one-second windows + a load)
    reserve = on.remeasure.reserve_s()
    assert reserve == 4 * 3 * 4.5
    long_left = search_time_left(on, Duration.from_s(600), started)
    assert long_left is not None and 600 - reserve - 1 < long_left.s <= 600 - reserve
    short_left = search_time_left(on, Duration.from_s(30), started)
    assert short_left is not None and 19 < short_left.s <= 20
    off_left = search_time_left(off, Duration.from_s(30), started)
    assert off_left is not None and off_left.s > 29
    assert search_time_left(on, None, started) is None


def test_bad_settings_name_their_flag() -> None:
    with pytest.raises(ValueError, match="--remeasure-repeats"):
        RemeasureSettings(top=1, repeats=0)
    with pytest.raises(ValueError, match="--remeasure-top"):
        RemeasureSettings(top=-1)


def test_a_candidate_over_the_budget_at_its_load_is_measured_again_below_it() -> None:
    # Trial 1 won the search at concurrency 8 with a p95 near the limit; re-measured there it is
    # over the 20 ms budget (30 ms), but at the load its figures say fits (8 * 20 * 0.9 / 30 =
    # 4) it holds and still beats trial 2.
    trials = [_trial(1, 1000.0, concurrency=8), _trial(2, 600.0, concurrency=2)]
    loads: list[int] = []

    def measure(concurrency: int) -> Measurement:
        loads.append(concurrency)
        if concurrency == 8:
            return _measurement(8, 1000.0, 30.0)
        if concurrency == 4:
            return _measurement(4, 950.0, 15.0)
        return _measurement(concurrency, 600.0, 18.0)  # no headroom at 2

    remeasured = remeasure(trials, lambda _c: None, measure, BUDGET, SETTINGS, search_best=1)
    assert loads == [8, 2, 8, 2, 8, 2, 4, 4, 4]
    winner = next(c for c in remeasured.result.candidates if c.trial == 1)
    assert winner.held and winner.concurrency == 4 and winner.throughput is not None
    assert winner.throughput.median == 950.0
    assert remeasured.result.winner == 1
    assert "at concurrency 8, measured again at 4" in remeasured.result.note
    assert remeasured.outcomes[1].metrics["concurrency"] == 4.0


def test_a_candidate_over_the_budget_at_concurrency_1_is_dropped() -> None:
    trials = [_trial(1, 1000.0, concurrency=2)]
    loads: list[int] = []

    def measure(concurrency: int) -> Measurement:
        loads.append(concurrency)
        return _measurement(concurrency, 100.0, 40.0)

    remeasured = remeasure(trials, lambda _c: None, measure, BUDGET, SETTINGS, search_best=1)
    assert loads == [2, 2, 2, 1, 1, 1]
    assert remeasured.result.winner is None
    assert "over 20 ms" in remeasured.result.candidates[0].message


class _FakeServer:
    """Serves fixed figures (infer/s, p95 ms) per loaded candidate (its instance_count) and
    concurrency, and records what was measured, in order, as (instance_count, concurrency)."""

    def __init__(self, figures: dict[tuple[int, int], tuple[float, float]]) -> None:
        self.figures = figures
        self.loaded = 0
        self.measured: list[tuple[int, int]] = []

    def load(self, candidate: Candidate) -> None:
        self.loaded = int(candidate["instance_count"])

    def measure(self, concurrency: int) -> Measurement:
        self.measured.append((self.loaded, concurrency))
        figure = self.figures.get((self.loaded, concurrency))
        if figure is None:
            raise AnalyzerError(f"no figures at concurrency {concurrency}")
        return _measurement(concurrency, *figure)


def _remeasure_on(
    server: _FakeServer, trials: Sequence[TrialRecord], **options: Any
) -> RemeasureResult:
    return remeasure(
        trials, server.load, server.measure, BUDGET, SETTINGS, search_best=1, **options
    ).result


def test_a_candidate_with_headroom_is_measured_again_at_a_higher_load_and_judged_there() -> None:
    # As on resnet18 (2026-12): the config as written's search stopped at concurrency 4 with
    # lots of headroom (8 ms of the 20 ms budget), and a challenger was measured at 8. Its
    # figures say at least one more client fits (8 x 5 / 4 = 10 ms <= 18 ms), up to
    # 4 x 18 / 8 = 9, capped at twice its load: 8. There it serves more than the challenger.
    trials = [_trial(1, 1000.0, concurrency=8), _trial(0, 950.0, as_written=True, concurrency=4)]
    server = _FakeServer({(1, 8): (1000.0, 17.0), (0, 4): (900.0, 8.0), (0, 8): (1010.0, 15.0)})
    remeasured = remeasure(
        trials, server.load, server.measure, BUDGET, SETTINGS, search_best=1, load_ceiling=16
    )
    result = remeasured.result
    # Three interleaved rounds, then the climb's as many rounds at 8.
    assert server.measured == [(1, 8), (0, 4)] * 3 + [(0, 8)] * 3
    as_written = result.candidate(0)
    assert as_written is not None and as_written.held and as_written.concurrency == 8
    assert as_written.throughputs == (1010.0, 1010.0, 1010.0)
    assert result.winner == 0
    assert remeasured.outcomes[0].metrics["concurrency"] == 8.0
    assert (
        "trial 0: median p95 8.00 ms at concurrency 4 (headroom), measured again at 8: "
        "judged at 8" in result.note
    )
    # The report says so: the concurrency it was judged at, and the climb.
    summary = with_remeasure(_summary([trials[1], trials[0]]), remeasured)
    out = io.StringIO()
    print_summary(RunSummary.from_json(summary.to_json()), Console(file=out, width=300))
    assert "measured again at 8: judged at 8" in out.getvalue()


def test_a_climb_that_breaks_the_budget_is_not_taken() -> None:
    # At 8 the candidate serves more but its median p95 (22 ms) breaks the 20 ms budget: it
    # is judged at 4, where it held, and the other candidate wins.
    trials = [_trial(1, 1000.0, concurrency=8), _trial(2, 950.0, concurrency=4)]
    server = _FakeServer({(1, 8): (1000.0, 17.0), (2, 4): (900.0, 8.0), (2, 8): (1500.0, 22.0)})
    result = _remeasure_on(server, trials, load_ceiling=16)
    assert server.measured[-3:] == [(2, 8)] * 3
    climber = result.candidate(2)
    assert climber is not None and climber.held and climber.concurrency == 4
    assert climber.throughputs == (900.0, 900.0, 900.0)
    assert result.winner == 1
    assert (
        "measured again at 8: judged at 4 (at 8 median 1,500.0 infer/s, p95 22.00 ms, "
        "over 20 ms)" in result.note
    )


def test_a_climb_that_serves_no_more_is_not_taken() -> None:
    trials = [_trial(2, 950.0, concurrency=4)]
    server = _FakeServer({(2, 4): (900.0, 8.0), (2, 8): (880.0, 16.0)})
    result = _remeasure_on(server, trials, load_ceiling=16)
    assert server.measured == [(2, 4)] * 3 + [(2, 8)] * 3
    climber = result.candidate(2)
    assert climber is not None and climber.concurrency == 4 and climber.latencies_us[0] == 8000
    assert "not more than median 900.0 infer/s" in result.note


def test_a_climb_that_fails_falls_back_to_the_load_that_held() -> None:
    trials = [_trial(2, 950.0, concurrency=4)]
    server = _FakeServer({(2, 4): (900.0, 8.0)})  # nothing served at 8
    result = _remeasure_on(server, trials, load_ceiling=16)
    assert server.measured == [(2, 4)] * 3 + [(2, 8)]  # dropped at 8 after one error
    climber = result.candidate(2)
    assert climber is not None and climber.held and climber.concurrency == 4
    assert result.winner == 2
    assert "judged at 4 (at 8: no figures at concurrency 8)" in result.note


def test_only_a_candidate_with_headroom_climbs_as_far_as_its_figures_and_the_caps_say() -> None:
    # 20 ms budget, target 18 ms. At concurrency 4 one more client fits when p95 x 5/4 <= 18.
    trials = [
        _trial(1, 1000.0, concurrency=4),  # 15 ms: 18.75 ms at 5, no headroom
        _trial(2, 900.0, concurrency=4),  # 14 ms: 17.5 ms at 5, climbs to 4 x 18 / 14 = 5
        _trial(3, 800.0, concurrency=2),  # 1 ms: fits 36, at most twice its load: 4
        _trial(4, 700.0, concurrency=6),  # 1 ms, but the highest load a trial reached is 6
    ]
    server = _FakeServer(
        {
            (1, 4): (1000.0, 15.0),
            (2, 4): (900.0, 14.0),
            (2, 5): (950.0, 17.0),
            (3, 2): (800.0, 1.0),
            (3, 4): (850.0, 2.0),
            (4, 6): (700.0, 1.0),
        }
    )
    result = _remeasure_on(server, trials, load_ceiling=6)
    assert server.measured == [(1, 4), (2, 4), (3, 2), (4, 6)] * 3 + [(2, 5), (3, 4)] * 3
    assert [c.concurrency for c in result.candidates] == [4, 5, 4, 6]


def test_the_climbs_are_interleaved_with_the_first_back_off() -> None:
    trials = [_trial(1, 1000.0, concurrency=8), _trial(2, 950.0, concurrency=4)]
    server = _FakeServer(
        {(1, 8): (1000.0, 30.0), (1, 4): (950.0, 15.0), (2, 4): (900.0, 8.0), (2, 8): (910.0, 12.0)}
    )
    result = _remeasure_on(server, trials, load_ceiling=8)
    assert server.measured == [(1, 8), (2, 4)] * 3 + [(1, 4), (2, 8)] * 3
    assert [c.concurrency for c in result.candidates] == [4, 8]
    assert result.winner == 1


def test_by_default_a_climb_stops_at_the_highest_load_among_the_candidates() -> None:
    trials = [_trial(1, 1000.0, concurrency=6), _trial(2, 950.0, concurrency=4)]
    server = _FakeServer({(1, 6): (1000.0, 17.0), (2, 4): (900.0, 1.0), (2, 6): (990.0, 2.0)})
    result = _remeasure_on(server, trials)
    assert server.measured[-3:] == [(2, 6)] * 3
    assert [c.concurrency for c in result.candidates] == [6, 6]
    assert highest_load(trials) == 6 and highest_load([]) == 1


def test_no_climb_when_the_time_budget_leaves_no_round_for_it() -> None:
    trials = [_trial(2, 950.0, concurrency=4)]
    server = _FakeServer({(2, 4): (900.0, 8.0), (2, 8): (1200.0, 12.0)})
    one_round = RemeasureSettings(top=1, repeats=1)
    result = remeasure(
        trials,
        server.load,
        server.measure,
        BUDGET,
        one_round,
        search_best=2,
        deadline=0.0,
        load_ceiling=8,
    ).result
    assert server.measured == [(2, 4)]
    candidate = result.candidate(2)
    assert candidate is not None and candidate.concurrency == 4
    assert "(headroom): no time left to measure it higher" in result.note


class _Clock:
    """time.monotonic for the re-measure's module; the test's measurer moves it on."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        return self.now


def test_a_short_time_budget_gives_the_last_round_to_the_climb(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As in the resnet18 run on Triton (2026-12-05): the time left held two full rounds and
    # part of a third, and the config as written, measured by its search at concurrency 4
    # with headroom, was judged there against a challenger at 8 (its third round left no time
    # to climb). Each measurement takes 10 s and 65 s are left: two rounds (40 s), then the
    # climb at 8 (two rounds of one measurement) rather than a third round at 4.
    clock = _Clock(10.0)
    monkeypatch.setattr("tuner.remeasure.time", SimpleNamespace(monotonic=clock))
    trials = [_trial(1, 1000.0, concurrency=8), _trial(0, 950.0, as_written=True, concurrency=4)]
    server = _FakeServer({(1, 8): (1000.0, 17.0), (0, 4): (900.0, 8.0), (0, 8): (1010.0, 15.0)})

    def measure(concurrency: int) -> Measurement:
        clock.now += clock.step
        return server.measure(concurrency)

    remeasured = remeasure(
        trials,
        server.load,
        measure,
        BUDGET,
        SETTINGS,
        search_best=1,
        deadline=65.0,
        load_ceiling=8,
    )
    assert server.measured == [(1, 8), (0, 4)] * 2 + [(0, 8)] * 2
    result = remeasured.result
    as_written = result.candidate(0)
    assert as_written is not None and as_written.concurrency == 8
    assert result.winner == 0
    assert "2 of 3 rounds, the rest of it kept to measure 1 candidate(s) at a higher load" in (
        result.note
    )


def test_a_cut_after_the_first_pass_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # Three full rounds fit (30 s of 45); the back-off's rounds at a lower load get one.
    clock = _Clock(10.0)
    monkeypatch.setattr("tuner.remeasure.time", SimpleNamespace(monotonic=clock))
    server = _FakeServer({(1, 8): (1000.0, 30.0), (1, 4): (950.0, 15.0)})

    def measure(concurrency: int) -> Measurement:
        clock.now += clock.step
        return server.measure(concurrency)

    one = RemeasureSettings(top=1, repeats=3)
    trials = [_trial(1, 1000.0, concurrency=8)]
    result = remeasure(
        trials, server.load, measure, BUDGET, one, search_best=1, deadline=45.0
    ).result
    assert server.measured == [(1, 8)] * 3 + [(1, 4)]
    assert result.rounds == 3
    assert "the time budget allowed 1 of 3 rounds at the lowered or raised loads" in result.note


def test_the_config_as_written_is_kept_when_the_gain_is_within_the_range_of_its_repeats() -> None:
    # As on resnet18 (2026-12): the challenger's median is higher, but inside the range the
    # config as written itself spanned over the same interleaved rounds: noise, not a gain.
    as_written = judge(_remeasured(0, [1000, 1040, 980], [10, 10, 10], as_written=True), BUDGET)
    challenger = judge(_remeasured(1, [1030, 1035, 1100], [10, 10, 10]), BUDGET)
    winner = choose_winner([challenger, as_written])
    assert winner is not None and winner.trial == 0
    # Measured: the report says why the better median lost.
    trials = [_trial(1, 1100.0, concurrency=4), _trial(0, 1000.0, as_written=True, concurrency=4)]
    rounds = {1: iter([1030.0, 1035.0, 1100.0]), 0: iter([1000.0, 1040.0, 980.0])}
    loaded = [0]

    def load(candidate: Candidate) -> None:
        loaded[0] = int(candidate["instance_count"])

    def measure(concurrency: int) -> Measurement:
        return _measurement(concurrency, next(rounds[loaded[0]]), 18.0)

    result = remeasure(trials, load, measure, BUDGET, SETTINGS, search_best=1).result
    assert result.winner == 0 and result.changed_winner
    kept_over = result.kept_as_written_over
    assert kept_over is not None and kept_over.trial == 1
    headline_text = headline(result)
    assert "The config as written is kept: trial 1's median 1,035.0 infer/s is within" in (
        headline_text
    )


def test_a_challenger_above_every_repeat_of_the_as_written_wins_despite_a_slow_repeat() -> None:
    # A guard on the rule above: the challenger's median decides on its side, so one slow
    # repeat of its own does not keep the config as written; and a config as written that did
    # not hold the budget is not kept.
    as_written = judge(_remeasured(0, [1000, 1040, 980], [10, 10, 10], as_written=True), BUDGET)
    challenger = judge(_remeasured(1, [1045, 1050, 900], [10, 10, 10]), BUDGET)
    winner = choose_winner([challenger, as_written])
    assert winner is not None and winner.trial == 1
    over = judge(_remeasured(0, [1000, 1040, 980], [25, 25, 25], as_written=True), BUDGET)
    close = judge(_remeasured(1, [1030, 1035, 1100], [10, 10, 10]), BUDGET)
    winner = choose_winner([close, over])
    assert winner is not None and winner.trial == 1


def test_a_gain_seen_in_one_round_only_keeps_the_config_as_written() -> None:
    # As in the 2026-12-06 digits run on Triton: the time budget allowed one round, and a
    # 1.6% "gain" in it was written. One round measures no noise, so it shows no gain.
    as_written = judge(_remeasured(0, [11_319], [4.4], as_written=True), BUDGET)
    one_round = judge(_remeasured(1, [11_502], [9.3]), BUDGET)
    winner = choose_winner([one_round, as_written])
    assert winner is not None and winner.trial == 0
    # Two rounds, the median above both of the as-written's but one repeat within them: kept.
    as_written = judge(_remeasured(0, [1000, 1040], [10, 10], as_written=True), BUDGET)
    once_above = judge(_remeasured(1, [1200, 1030], [10, 10]), BUDGET)
    winner = choose_winner([once_above, as_written])
    assert winner is not None and winner.trial == 0
    # Above every repeat in both rounds: the challenger wins.
    twice_above = judge(_remeasured(1, [1050, 1045], [10, 10]), BUDGET)
    winner = choose_winner([twice_above, as_written])
    assert winner is not None and winner.trial == 1
    # Without a config as written among the held, one round still picks the best median.
    over = judge(_remeasured(0, [11_319], [25], as_written=True), BUDGET)
    winner = choose_winner([one_round, over])
    assert winner is not None and winner.trial == 1


def test_the_report_says_a_one_round_gain_kept_the_config_as_written() -> None:
    trials = [_trial(1, 1100.0, concurrency=4), _trial(0, 1000.0, as_written=True, concurrency=4)]
    figures = {1: 1060.0, 0: 1000.0}
    loaded = [0]

    def load(candidate: Candidate) -> None:
        loaded[0] = int(candidate["instance_count"])

    def measure(concurrency: int) -> Measurement:
        return _measurement(concurrency, figures[loaded[0]], 18.0)

    one_round = RemeasureSettings(top=2, repeats=1)
    result = remeasure(trials, load, measure, BUDGET, one_round, search_best=1).result
    assert result.winner == 0
    assert "trial 1's median 1,060.0 infer/s is above every one of its repeats but in 1 " in (
        headline(result)
    )
