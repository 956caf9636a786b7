"""The gate's outcome as a Markdown table, for a PR comment or a job summary."""

from __future__ import annotations

from pathlib import Path

from common.atomic import write_text_atomic
from gate.gating import GateOutcome


def gate_markdown(outcome: GateOutcome, baseline_path: Path) -> str:
    """The verdict, one table row per check, then the regressions and the notes spelled out."""
    regressions = outcome.regressions
    verdict = (
        f"❌ {len(regressions)} regression{'s' if len(regressions) != 1 else ''}"
        if regressions
        else "✅ passed"
    )
    lines = [
        f"## Performance gate: {verdict}",
        "",
        f"Compared with `{baseline_path}`, tolerance {outcome.tolerance.describe()} "
        "(throughput may not fall, nor p95 latency rise, by more). Both sides: "
        f"{outcome.compared()} (a re-measured load: of all its runs).",
        "",
        "| | model | concurrency | metric | baseline | now | change | runs |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for check in outcome.checks:
        label, unit, before, after = check.values()
        mark = "❌" if check.regressed else "✅"
        lines.append(
            f"| {mark} | {_cell(check.model)} | {check.concurrency} | {label} ({unit}) | "
            f"{before} | {after} | {check.change * 100:+.1f}% | {check.runs_cell()} |"
        )
    if regressions:
        lines += ["", "**Regressions**", ""]
        lines += [f"- {_cell(check.describe())}" for check in regressions]
    if outcome.notes:
        lines += ["", "**Notes**", ""]
        lines += [f"- {_cell(note)}" for note in outcome.notes]
    return "\n".join(lines) + "\n"


def write_markdown(path: Path, outcome: GateOutcome, baseline_path: Path) -> None:
    """Write `gate_markdown` to `path` atomically."""
    write_text_atomic(path, gate_markdown(outcome, baseline_path))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
