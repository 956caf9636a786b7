"""A tuned group's own table in the reports (a pipeline's steps, a traffic mix's models), the
one way both are shown: each kind says what its columns and rows are (`GroupTable`); this
module prints it in the terminal and writes it into the HTML report."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from common.html_page import Cell, note, table
from tuner.run_schema import RunSummary


@dataclass(frozen=True, slots=True)
class GroupCell:
    """One cell of a group table, as the terminal and the HTML report each show it."""

    console: str  # plain text for the terminal
    html: Cell


@dataclass(frozen=True, slots=True)
class GroupTable:
    """One group's table: titles, columns (terminal header, HTML header, left-aligned),
    rows, and the note under it (None in the terminal: nothing printed)."""

    console_title: str  # plain text (escaped when printed)
    html_title: str  # HTML
    css_name: str  # the table's id is "<anchor>-<css_name>"
    columns: tuple[tuple[str, str, bool], ...]
    rows: tuple[tuple[GroupCell, ...], ...]
    console_note: str | None
    html_note: str


def print_group(group: GroupTable | None, console: Console) -> None:
    """The group's table in the terminal (nothing for a single model)."""
    if group is None:
        return
    table_ = Table(title=escape(group.console_title), title_justify="left")
    for header, _, left in group.columns:
        table_.add_column(header, justify="left" if left else "right")
    for row in group.rows:
        table_.add_row(*(escape(cell.console) for cell in row))
    console.print(table_)
    if group.console_note is not None:
        console.print(group.console_note)


def group_html(group: GroupTable | None, anchor: str) -> str:
    """The group's table for the HTML report ("" for a single model)."""
    if group is None:
        return ""
    headers = [header for _, header, _ in group.columns]
    rows: list[list[Cell | str]] = [[cell.html for cell in row] for row in group.rows]
    return (
        f"<h3>{group.html_title}</h3>"
        + table(headers, rows, css_id=f"{anchor}-{group.css_name}")
        + note(group.html_note)
    )


def code_cell(name: str) -> GroupCell:
    """A model's name: plain in the terminal, as code in HTML."""
    return GroupCell(name, Cell(f"<code>{html.escape(name)}</code>", raw=True))


def text_cell(text: str) -> GroupCell:
    """The same plain text in the terminal and in HTML."""
    return GroupCell(text, Cell(text))


def number_cell(value: float | None, digits: int, scale: float = 1.0) -> GroupCell:
    """A number (`value / scale`): '-' when missing."""
    if value is None:
        return GroupCell("-", Cell("-", "", numeric=True))
    shown = value / scale
    return GroupCell(f"{shown:.{digits}f}", Cell(f"{shown:,.{digits}f}", value, numeric=True))


def finite(value: float | None) -> float | None:
    """`value` when it is a finite number, else None (shown as missing)."""
    return value if value is not None and math.isfinite(value) else None


def best_metrics(summary: RunSummary) -> dict[str, float]:
    """The best trial's metrics (empty without a best)."""
    best = summary.best.outcome if summary.best is not None else None
    return dict(best.metrics) if best is not None else {}
