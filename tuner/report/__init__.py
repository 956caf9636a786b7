"""Reports of tuning runs: one self-contained HTML file per run, and a console summary."""

from tuner.report.render import render_run_report
from tuner.report.summary import ReportError

__all__ = ["ReportError", "render_run_report"]
