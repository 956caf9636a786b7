"""The HTML (text and tables) sections of a model's tuning report: summary with the config
diff, the precision variants' accuracy check, and every trial."""

from __future__ import annotations

import html

from common.html_page import Cell, definition_list, note, number, table
from tuner.report.group import group_html
from tuner.report.group_view import group_table
from tuner.report.remeasure import latency_text, remeasure_html, throughput_text
from tuner.report.summary import ModelSummary, TrialView
from tuner.run_schema import VariantResult


def summary_section(summary: ModelSummary) -> str:
    """Model, budget, platform, the outcome in a sentence, as written vs best, the diff."""
    trials = summary.trials
    feasible = sum(t.feasible for t in trials)
    facts = [
        ("Model", summary.model),
        ("Budget", summary.budget),
        ("Platform", summary.platform),
        ("Server", summary.server),
        ("Study", summary.study),
        ("Trials", f"{len(trials)} ({feasible} feasible); {summary.run.stop_reason}"),
    ]
    parts = [definition_list(facts), f"<p>{_verdict(summary)}</p>"]
    parts.append(
        table(
            ["", "Infer/s", "p50 ms", "p95 ms", "p99 ms", "Concurrency", "Trial", "Config"],
            [
                _compare_row(summary, label, t)
                for label, t in (("as written", summary.as_written), ("best", summary.best))
            ],
            highlight=[1],
        )
    )
    parts.append(remeasure_html(summary.run, summary.anchor))
    parts.append(group_html(group_table(summary.run), summary.anchor))
    parts.append("<h3>Configuration changes</h3>" + _diff(summary))
    written = summary.written
    if written is not None and written.config:
        text = f"Written to {written.config}"
        if written.backup:
            text += f"; the previous config is kept as {written.backup}"
        parts.append(note(text + "."))
    elif summary.best is not None and summary.changes:
        parts.append(note("Nothing was written back (dry run)."))
    return "".join(parts)


def _verdict(summary: ModelSummary) -> str:
    best, as_written = summary.best, summary.as_written
    if best is None or best.throughput is None:
        lowest = summary.lowest_latency
        reached = (
            f"the lowest p{summary.percentile} latency reached was "
            f"{lowest.latency_us / 1000:.2f} ms (trial {lowest.number})"
            if lowest is not None and lowest.latency_us is not None
            else "no trial could be measured"
        )
        return (
            f'<span class="bad">No configuration meets {html.escape(summary.budget)}</span>: '
            f"{html.escape(reached)}; nothing was written."
            + (
                " The search found some, but none held the budget re-measured."
                if summary.run.remeasure is not None
                else ""
            )
        )
    remeasured = " (re-measured medians)" if summary.run.remeasure is not None else ""
    text = (
        f'<span class="ok">Best: {best.throughput:,.1f} infer/s</span> at '
        f"p{summary.percentile} {_ms(best.latency_us)} (trial {best.number}){remeasured}"
    )
    if as_written is not None and as_written.throughput:
        ratio = best.throughput / as_written.throughput
        text += (
            f", against {as_written.throughput:,.1f} infer/s at {_ms(as_written.latency_us)} "
            f"for the configuration as written: <strong>{ratio:.2f}x</strong> the throughput"
        )
    return text + "."


def _ms(value_us: float | None) -> str:
    return "-" if value_us is None else f"{value_us / 1000:.2f} ms"


def _compare_row(summary: ModelSummary, label: str, trial: TrialView | None) -> list[Cell | str]:
    """The trial's figures; a re-measured one's throughput and budget percentile with their
    range over the repeats."""
    if trial is None:
        return [label, *(["-"] * 6), "not measured"]
    run, budget_key = summary.run, f"p{summary.percentile}_us"
    throughput = trial.throughput or 0.0
    return [
        label,
        Cell(throughput_text(run, trial.number, throughput), throughput, numeric=True),
        *(
            Cell(latency_text(run, trial.number, trial.metric(k)), trial.metric(k), numeric=True)
            if k == budget_key
            else number(trial.metric(k), 2, 1000)
            for k in ("p50_us", "p95_us", "p99_us")
        ),
        number(trial.metric("concurrency"), 0),
        number(trial.number, 0),
        Cell(trial.label),
    ]


def _diff(summary: ModelSummary) -> str:
    changes = summary.changes
    if not changes:
        if summary.best is None:
            return note("No change: no configuration met the budget.")
        return note("No change: the configuration as written was the best found.")
    rows = [
        [
            Cell(f"<code>{html.escape(change.field)}</code>", raw=True),
            Cell(f'<span class="old">{html.escape(change.old)}</span>', raw=True),
            Cell(f'<span class="new">{html.escape(change.new)}</span>', raw=True),
        ]
        for change in changes
    ]
    return table(["Field", "Old", "New"], rows, css_id=f"{summary.anchor}-diff")


def accuracy_section(summary: ModelSummary) -> str:
    """One row per precision variant: metric, value, drop, limit and the verdict."""
    variants = summary.variants
    if not variants:
        return note("No precision variant was prepared.")
    rows = [_variant_row(v) for v in variants]
    headers = ["Precision", "Method", "Metric", "Value", "Drop", "Limit", "Verdict"]
    source = summary.run.validation_source
    text = note(f"Checked on {source}.") if source else ""
    return table(headers, rows) + text


def _variant_row(variant: VariantResult) -> list[Cell | str]:
    accuracy = variant.accuracy
    method = variant.method
    if variant.error:
        verdict = Cell(f'<span class="bad">unusable: {html.escape(variant.error)}</span>', raw=True)
    elif accuracy is None:
        verdict = Cell("reference" if variant.usable else "not checked")
    elif accuracy.passed:
        verdict = Cell('<span class="ok">passed</span>', raw=True)
    else:
        reason = html.escape(accuracy.reason)
        verdict = Cell(f'<span class="bad">failed</span> {reason}', raw=True)
    if accuracy is None:
        return [variant.precision, method, "-", "-", "-", "-", verdict]
    return [
        variant.precision,
        method,
        accuracy.metric,
        number(accuracy.value, 4),
        number(accuracy.drop, 4),
        number(accuracy.limit, 4),
        verdict,
    ]


def trials_section(summary: ModelSummary) -> str:
    """Every trial, sortable by any column; the best one highlighted."""
    headers = ["#", "State", "Feasible", "Config", "Infer/s", "p50 ms", "p95 ms", "p99 ms"]
    headers += ["Concurrency", "Duration s", "Reused from", "Message"]
    best = summary.best.number if summary.best is not None else None
    trials = sorted(summary.trials, key=lambda t: t.number)
    rows = [_trial_row(t) for t in trials]
    highlight = [i for i, t in enumerate(trials) if t.number == best]
    table_id = f"{summary.anchor}-trials-table"
    return table(headers, rows, sortable=True, css_id=table_id, highlight=highlight) + note(
        "Click a column header to sort."
    )


def _trial_row(trial: TrialView) -> list[Cell | str]:
    outcome = trial.outcome
    return [
        number(trial.number, 0),
        trial.state,
        Cell("yes", 1) if trial.feasible else Cell("no", 0),
        Cell(trial.label),
        number(trial.throughput),
        *(number(trial.metric(k), 2, 1000) for k in ("p50_us", "p95_us", "p99_us")),
        number(trial.metric("concurrency"), 0),
        number(trial.duration_s, 1),
        number(trial.reused_from, 0),
        outcome.message if outcome is not None else "",
    ]
