"""One HTML file per tuning run, one group of sections per model (opens offline)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from common.atomic import write_text_atomic
from common.html_page import HtmlPage, note, section
from tuner.report.figures import (
    history_figure,
    importance_figure,
    model_breakdown_figure,
    tradeoff_figure,
)
from tuner.report.importance import study_importances
from tuner.report.sections import accuracy_section, summary_section, trials_section
from tuner.report.summary import ModelSummary, load_run

REPORT_FILE = "report.html"

# Section anchors: `<model>-<name>`; the tests look for them.
SECTIONS = ("summary", "tradeoff", "history", "importance", "breakdown", "accuracy", "trials")


def render_run_report(report_dir: Path, output: Path | None = None) -> Path:
    """Write the run's HTML report (default: `report_dir`/report.html) and return its path.

    `report_dir` is a tuning run's --report-dir (one folder per model) or one model's folder.
    Raises ReportError when it holds no readable summary.
    """
    return write_run_report(load_run(report_dir), report_dir, output)


def write_run_report(
    summaries: Sequence[ModelSummary], report_dir: Path, output: Path | None = None
) -> Path:
    """Write the page for `summaries` to `output` (default `report_dir`/report.html)
    atomically, readable by all, and return its path."""
    path = output if output is not None else report_dir / REPORT_FILE
    write_text_atomic(path, run_page(summaries, report_dir))
    path.chmod(0o644)  # a file to share; the atomic write's temporary file is private
    return path


def run_page(summaries: Sequence[ModelSummary], report_dir: Path) -> str:
    """The report's HTML: one group of sections per model, under the models' names, the
    run's folder and when the page was made."""
    models = ", ".join(s.model for s in summaries)
    page = HtmlPage(
        f"autotune report: {models}",
        f"{report_dir.resolve()} - generated {datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
    )
    for summary in summaries:
        page.add_group(summary.anchor, summary.model, model_sections(page, summary))
    return page.render()


def model_sections(page: HtmlPage, summary: ModelSummary) -> list[str]:
    """The sections of one model, in SECTIONS order."""
    anchor = summary.anchor
    measured = sum(t.measured for t in summary.trials)
    unmeasured = len(summary.trials) - measured
    tradeoff = page.figure(tradeoff_figure(summary), height=460)
    if unmeasured:
        tradeoff += note(f"{unmeasured} trial(s) without a measurement are not shown.")
    importances = study_importances(summary.folder, summary.study)
    if importances.values:
        importance = page.figure(
            importance_figure(importances.values), height=120 + 36 * len(importances.values)
        ) + note(
            f"optuna.importance over {importances.completed} completed trials of the study "
            f"'{summary.study}' (objective: throughput)."
        )
    else:
        importance = note(importances.reason)
    breakdown_fig = model_breakdown_figure(summary)
    breakdown = (
        page.figure(breakdown_fig, height=380)
        if breakdown_fig is not None
        else note("No server-side breakdown was measured for the config as written or the best.")
    )
    bodies = {
        "summary": ("Summary", summary_section(summary)),
        "tradeoff": (
            f"Throughput vs p{summary.percentile} latency",
            tradeoff,
        ),
        "history": ("Optimization history", page.figure(history_figure(summary), height=380)),
        "importance": ("Parameter importances", importance),
        "breakdown": ("Latency breakdown: as written vs best", breakdown),
        "accuracy": ("Accuracy of the precision variants", accuracy_section(summary)),
        "trials": ("All trials", trials_section(summary)),
    }
    return [section(f"{anchor}-{name}", *bodies[name]) for name in SECTIONS]
