"""A self-contained HTML page: sections, plotly figures and tables, no external resource.

plotly.js is embedded once in the page's head (only when the page has a figure); each figure
is a div plus a small script calling it. No CDN, no web fonts, no images: the file opens
offline. Tables with `sortable=True` sort by a click on a header (a few lines of inline JS);
a cell's `sort` value, when given, is what it sorts by.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

FIGURE_CONFIG = {"displaylogo": False, "responsive": True}

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
  color: #1f2933; background: #f5f7fa; }
header { background: #1f2933; color: #fff; padding: 16px 32px; }
header h1 { margin: 0; font-size: 22px; }
header p { margin: 4px 0 0; color: #cbd2d9; font-size: 13px; }
nav { padding: 8px 32px; background: #e4e7eb; font-size: 13px; }
nav a { margin-right: 16px; color: #1f2933; }
main { padding: 8px 32px 32px; }
section { background: #fff; border: 1px solid #d9e2ec; border-radius: 6px; margin: 16px 0;
  padding: 12px 20px; }
section.group { background: none; border: none; padding: 0; }
h2 { font-size: 20px; margin: 24px 0 4px; }
h3 { font-size: 16px; margin: 4px 0 8px; }
p.note { color: #52606d; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border-bottom: 1px solid #e4e7eb; padding: 4px 10px; text-align: left;
  vertical-align: top; max-width: 36em; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort=ascending]::after { content: " \\25B2"; }
table.sortable th[aria-sort=descending]::after { content: " \\25BC"; }
tr.highlight td { background: #fffbea; }
.old { color: #ab091e; background: #ffe3e3; text-decoration: line-through; padding: 0 4px; }
.new { color: #05606e; background: #c6f7e2; font-weight: 600; padding: 0 4px; }
.ok { color: #0c6b58; font-weight: 600; }
.bad { color: #ab091e; font-weight: 600; }
code { font-size: 12px; }
"""

_SORT_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach((th) => {
  th.addEventListener("click", () => {
    const body = th.closest("table").tBodies[0];
    const ascending = th.getAttribute("aria-sort") !== "ascending";
    th.parentElement.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    const key = (row) => {
      const cell = row.cells[th.cellIndex];
      return cell.dataset.sort ?? cell.textContent.trim();
    };
    const compare = (a, b) => {
      const x = parseFloat(a), y = parseFloat(b);
      if (!isNaN(x) && !isNaN(y)) return x - y;
      if (!isNaN(x)) return -1;  // numbers before blanks, whichever the direction
      if (!isNaN(y)) return 1;
      return a.localeCompare(b);
    };
    const rows = Array.from(body.rows);
    rows.sort((r, s) => (ascending ? 1 : -1) * compare(key(r), key(s)));
    rows.forEach((row) => body.appendChild(row));
  });
});
"""


@dataclass(frozen=True, slots=True)
class Cell:
    """A table cell: `text` is shown (escaped unless `raw`), `sort` is what it sorts by."""

    text: str
    sort: float | str | None = None
    numeric: bool = False
    raw: bool = False  # `text` is already HTML


def number(value: float | None, digits: int = 1, scale: float = 1.0) -> Cell:
    """A right-aligned number (`value / scale`), sorted by its value; '-' when missing."""
    if value is None:
        return Cell("-", "", numeric=True)
    return Cell(f"{value / scale:,.{digits}f}", value, numeric=True)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Cell | str]],
    *,
    sortable: bool = False,
    css_id: str = "",
    highlight: Iterable[int] = (),
) -> str:
    """An HTML table; rows whose index is in `highlight` are marked."""
    marked = set(highlight)
    body: list[str] = []
    numeric_columns: set[int] = set()
    for index, row in enumerate(rows):
        cells = [c if isinstance(c, Cell) else Cell(c) for c in row]
        numeric_columns.update(i for i, c in enumerate(cells) if c.numeric)
        css = ' class="highlight"' if index in marked else ""
        body.append(f"<tr{css}>" + "".join(_cell(c) for c in cells) + "</tr>")
    head = "".join(
        f'<th class="num">{html.escape(h)}</th>'
        if i in numeric_columns
        else f"<th>{html.escape(h)}</th>"
        for i, h in enumerate(headers)
    )
    classes = ' class="sortable"' if sortable else ""
    ident = f' id="{html.escape(css_id)}"' if css_id else ""
    return (
        f"<table{ident}{classes}><thead><tr>{head}</tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table>"
    )


def _cell(cell: Cell) -> str:
    attributes = ' class="num"' if cell.numeric else ""
    if cell.sort is not None:
        attributes += f' data-sort="{html.escape(str(cell.sort))}"'
    text = cell.text if cell.raw else html.escape(cell.text)
    return f"<td{attributes}>{text}</td>"


def note(text: str) -> str:
    """A muted paragraph (e.g. why a plot is missing)."""
    return f'<p class="note">{html.escape(text)}</p>'


def definition_list(items: Iterable[tuple[str, str]]) -> str:
    """Label / value pairs as a two-column table (values escaped)."""
    rows = "".join(
        f"<tr><th>{html.escape(label)}</th><td>{html.escape(value)}</td></tr>"
        for label, value in items
    )
    return f"<table>{rows}</table>"


def section(anchor: str, title: str, body: str) -> str:
    """A titled block; `anchor` is its id (for links within the page)."""
    return f'<section id="{html.escape(anchor)}"><h3>{html.escape(title)}</h3>{body}</section>'


class HtmlPage:
    """Collects sections and figures, then renders one self-contained HTML document."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self._blocks: list[str] = []
        self._toc: list[tuple[str, str]] = []
        self._figures = 0

    def figure(self, fig: go.Figure, height: int = 420) -> str:
        """The figure's div and script (plotly.js itself is added once, in the head)."""
        self._figures += 1
        fig.update_layout(height=height, template="plotly_white", margin={"t": 48, "b": 48})
        return pio.to_html(
            fig,
            config=FIGURE_CONFIG,
            include_plotlyjs=False,
            include_mathjax=False,
            full_html=False,
            div_id=f"figure-{self._figures}",
            default_height=f"{height}px",
        )

    def add_section(self, anchor: str, title: str, body: str) -> None:
        """A top-level section, listed in the page's navigation bar."""
        self._toc.append((anchor, title))
        self._blocks.append(section(anchor, title, body))

    def add_group(self, anchor: str, title: str, sections: Iterable[str]) -> None:
        """A heading (listed in the navigation bar) over several sections."""
        self._toc.append((anchor, title))
        self._blocks.append(
            f'<section class="group" id="{html.escape(anchor)}">'
            f"<h2>{html.escape(title)}</h2>{''.join(sections)}</section>"
        )

    def render(self) -> str:
        plotly_js = f"<script>{get_plotlyjs()}</script>" if self._figures else ""
        toc = "".join(
            f'<a href="#{html.escape(anchor)}">{html.escape(title)}</a>'
            for anchor, title in self._toc
        )
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(self.title)}</title><style>{_STYLE}</style>{plotly_js}</head>"
            f"<body><header><h1>{html.escape(self.title)}</h1>"
            f"<p>{html.escape(self.subtitle)}</p></header>"
            f"<nav>{toc}</nav><main>{''.join(self._blocks)}</main>"
            f"<script>{_SORT_SCRIPT}</script></body></html>\n"
        )
