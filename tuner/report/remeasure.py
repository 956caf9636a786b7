"""The re-measure in the reports: each re-measured candidate with its median and [min-max]
throughput and latency over the interleaved repeats, the search's own figure beside it, its
verdict, and which one won (and whether that differs from the search's best)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from common.html_page import Cell, note, number, table
from tuner.remeasure_result import (
    MIN_WINNING_REPEATS,
    RemeasuredCandidate,
    RemeasureResult,
    Spread,
    rounds_above,
)
from tuner.run_schema import RunSummary

HEADERS = ("trial", "config", "concurrency", "infer/s", "p{p} ms", "search infer/s", "verdict")


def spread_of(summary: RunSummary, trial: int | None) -> RemeasuredCandidate | None:
    """The re-measure of `trial` (None when it was not re-measured)."""
    remeasure = summary.remeasure
    return None if remeasure is None else remeasure.candidate(trial)


def throughput_text(summary: RunSummary, trial: int, value: float) -> str:
    """'1,234.5 [1,200.1-1,260.3]' for a re-measured trial, else the value alone."""
    candidate = spread_of(summary, trial)
    spread = candidate.throughput if candidate is not None else None
    return spread.describe() if spread is not None else f"{value:,.1f}"


def latency_text(summary: RunSummary, trial: int, value_us: float | None) -> str:
    """The budget's percentile in ms, with its range for a re-measured trial."""
    candidate = spread_of(summary, trial)
    spread = candidate.latency if candidate is not None else None
    if spread is not None:
        return spread.describe(1000, 2)
    return "-" if value_us is None else f"{value_us / 1000:.2f}"


def headline(result: RemeasureResult) -> str:
    """How the re-measure went, in a sentence."""
    count = len(result.candidates)
    text = (
        f"The top {count} configuration(s) re-measured interleaved, {result.rounds} round(s) "
        f"of {result.repeats}, each at its own load ({result.windows}); figures are medians "
        f"[min-max]. The winner: {result.rule}."
    )
    if result.note:
        text += f" ({result.note}.)"
    turned_down = result.kept_as_written_over
    if turned_down is not None and turned_down.throughput is not None:
        text += (
            f" The config as written is kept: trial {turned_down.trial}'s median "
            f"{turned_down.throughput.median:,.1f} infer/s {why_kept(result, turned_down)}."
        )
    if result.winner is None:
        text += " No candidate held the budget re-measured: nothing was written."
    elif result.changed_winner:
        text += (
            f" The re-measure chose trial {result.winner}, not the search's best "
            f"(trial {result.search_best})."
        )
    else:
        text += f" The search's best (trial {result.winner}) won."
    return text


def why_kept(result: RemeasureResult, challenger: RemeasuredCandidate) -> str:
    """Why `challenger`'s better median did not replace the config as written."""
    as_written = next((c for c in result.candidates if c.as_written), None)
    noise = as_written.throughput if as_written is not None else None
    if noise is None or challenger.throughput is None or challenger.throughput.median <= noise.high:
        return "is within the range of its repeats"
    above = rounds_above(challenger, noise.high)
    return (
        f"is above every one of its repeats but in {above} round(s) only (a gain must show "
        f"in {MIN_WINNING_REPEATS})"
    )


def verdict(result: RemeasureResult, candidate: RemeasuredCandidate) -> str:
    """ "winner", "held the budget" or why it was dropped; and how many repeats settled when
    some did not (their figure is then their last windows merged)."""
    text = "winner" if candidate.trial == result.winner else candidate.message or "held the budget"
    settled, repeats = sum(candidate.stable), len(candidate.stable)
    if settled < repeats:
        text += f" ({settled} of {repeats} repeats settled)"
    return text


def print_remeasure(summary: RunSummary, console: Console) -> None:
    """The re-measure's table in the terminal (nothing when there was none)."""
    result = summary.remeasure
    if result is None:
        return
    percentile = summary.budget.percentile
    table_ = Table(
        title=f"re-measured: {result.rounds} interleaved round(s), median [min-max]",
        title_justify="left",
    )
    for column in HEADERS:
        left = column in ("config", "verdict")
        table_.add_column(column.format(p=percentile), justify="left" if left else "right")
    for candidate in result.candidates:
        table_.add_row(
            str(candidate.trial),
            escape(candidate.label),
            str(candidate.concurrency),
            _describe(candidate.throughput),
            _describe(candidate.latency, 1000, 2),
            f"{candidate.search_throughput:,.1f}",
            escape(verdict(result, candidate)),
            style="bold" if candidate.trial == result.winner else None,
        )
    console.print(table_)
    console.print(f"  {escape(headline(result))}", soft_wrap=True)


def remeasure_html(summary: RunSummary, anchor: str) -> str:
    """The re-measure's table for the HTML report ("" when there was none)."""
    result = summary.remeasure
    if result is None:
        return ""
    headers = [(h[0].upper() + h[1:]).format(p=summary.budget.percentile) for h in HEADERS]
    rows: list[list[Cell | str]] = []
    for candidate in result.candidates:
        throughput, latency = candidate.throughput, candidate.latency
        rows.append(
            [
                number(candidate.trial, 0),
                Cell(candidate.label),
                number(candidate.concurrency, 0),
                Cell(_describe(throughput), _median(throughput), numeric=True),
                Cell(_describe(latency, 1000, 2), _median(latency), numeric=True),
                number(candidate.search_throughput),
                Cell(verdict(result, candidate)),
            ]
        )
    winner = [i for i, c in enumerate(result.candidates) if c.trial == result.winner]
    return (
        "<h3>Re-measured before the write</h3>"
        + table(headers, rows, css_id=f"{anchor}-remeasure", highlight=winner)
        + note(headline(result))
    )


def _describe(spread: Spread | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if spread is None else spread.describe(scale, digits)


def _median(spread: Spread | None) -> float | None:
    return None if spread is None else spread.median
