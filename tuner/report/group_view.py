"""Which group table a run's summary has: a traffic mix's, a pipeline's, or none (a model)."""

from __future__ import annotations

from tuner.report.group import GroupTable
from tuner.report.mix import mix_table
from tuner.report.pipeline import pipeline_table
from tuner.run_schema import RunSummary


def group_table(summary: RunSummary) -> GroupTable | None:
    """The summary's group table: a traffic mix's or a pipeline's; None for a single model."""
    return mix_table(summary) or pipeline_table(summary)
