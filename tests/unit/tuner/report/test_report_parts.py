"""The report's pure parts: Pareto front, importances of small studies, the page."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from analyzer.errors import AnalyzerError
from analyzer.perf_config import PerfFlags, build_config
from common.html_page import HtmlPage, table
from tuner.report.figures import pareto_front
from tuner.report.importance import MIN_COMPLETED_TRIALS, importances, study_importances
from tuner.report.summary import TrialView
from tuner.search_types import TrialOutcome


def trial(number: int, throughput: float, latency_us: float | None) -> TrialView:
    outcome = TrialOutcome("ok", throughput=throughput, latency_us=latency_us)
    return TrialView(number, "COMPLETE", True, f"t{number}", outcome, latency_us, 1.0, None)


def test_pareto_front_keeps_the_undominated_trials_by_latency() -> None:
    trials = [
        trial(0, 100.0, 1_000.0),
        trial(1, 90.0, 2_000.0),  # slower and less throughput than 0: dominated
        trial(2, 300.0, 5_000.0),
        trial(3, 300.0, 6_000.0),  # same throughput, more latency: dominated
        trial(4, 0.0, None),  # not measured
        trial(5, 50.0, 500.0),
    ]
    assert [t.number for t in pareto_front(trials)] == [5, 0, 2]


def test_too_few_completed_trials_give_a_sentence_not_numbers() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    for value in range(MIN_COMPLETED_TRIALS - 1):
        asked = study.ask()
        asked.suggest_categorical("instances", [1, 2])
        study.tell(asked, float(value))
    found = importances(study)
    assert found.values == {}
    assert f"at least {MIN_COMPLETED_TRIALS} completed trials" in found.reason


def test_a_missing_study_file_gives_a_sentence(tmp_path: Path) -> None:
    found = study_importances(tmp_path, "digits")
    assert found.values == {} and "No study.db" in found.reason


def test_a_page_without_figures_carries_no_plotly_and_escapes_text() -> None:
    page = HtmlPage("<model>")
    page.add_section("t", "Table", table(["a"], [["<b>"]], sortable=True))
    text = page.render()
    assert "plotly.js" not in text
    assert "<title>&lt;model&gt;</title>" in text and "<td>&lt;b&gt;</td>" in text


def test_perf_html_in_a_missing_folder_is_refused(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "perf.html"
    with pytest.raises(AnalyzerError, match=f"--html {missing}: the folder"):
        build_config(PerfFlags(model="digits", html=str(missing)))
    config = build_config(PerfFlags(model="digits", html=str(tmp_path / "perf.html")))
    assert config.outputs.html == tmp_path / "perf.html"
