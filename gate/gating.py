"""`autotune gate`'s work: measure each load as the baseline did, compare the same statistic,
and re-measure a regressed load before believing it (the machine is noisy; a real regression
persists). The verdict on one load is judging.py's."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from common.invariant import present
from gate.baseline_file import MEDIAN, Baseline, GateSettings, LoadPoint
from gate.compare import Check, Tolerance
from gate.judging import Verdict, judge_load
from gate.machine import describe_machine, machine_differences
from gate.measuring import measure_point
from gate.server import ServedModel
from gate.statistic import describe_runs

# A re-measurement waits this long first, so that a short burst of other work on the machine
# is over rather than measured again.
RETRY_PAUSE_S = 1.0


@dataclass(slots=True)
class GateOutcome:
    """Every check, what the reader should know besides (notes), and how long it took.
    Each value on both sides is `statistic` of its runs (`repeats` a set)."""

    tolerance: Tolerance
    statistic: str = MEDIAN
    repeats: int = 1
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: dict[tuple[str, int], float] = field(default_factory=dict)  # per model and load
    elapsed_s: float = 0.0

    @property
    def regressions(self) -> list[Check]:
        return [c for c in self.checks if c.regressed]

    @property
    def passed(self) -> bool:
        return not self.regressions

    def compared(self) -> str:
        """'median of 3 runs per load': what each side of every check is."""
        return f"{describe_runs(self.statistic, self.repeats)} per load"


def run_gate(
    url: str,
    baseline: Baseline,
    models: Sequence[ServedModel],
    tolerance: Tolerance,
    retries: int,
    say: Callable[[str], None] = lambda _text: None,
) -> GateOutcome:
    """Measure each model at each of its baseline's loads as the baseline did (its repeats,
    its statistic) and compare; a regressed load is measured again, a whole set at a time, up
    to `retries` more times and judged on the statistic of all its runs."""
    started = time.monotonic()
    settings = baseline.settings
    outcome = GateOutcome(tolerance, settings.statistic, settings.repeats)
    differences = machine_differences(baseline.machine, describe_machine())
    if differences:
        outcome.notes.append(
            "this machine differs from the baseline's ("
            + "; ".join(differences)
            + "): the comparison may not be meaningful"
        )
    for model in models:
        recorded = present(baseline.model(model.name), "the caller selects models of the baseline")
        if recorded.config_sha256 and recorded.config_sha256 != model.config_sha256:
            outcome.notes.append(f"{model.name}: the served config differs from the baseline's")
        for load in recorded.loads:
            load_started = time.monotonic()
            verdict = _judge(url, model.name, load, settings, tolerance, retries, say)
            outcome.checks.extend(verdict.checks)
            if verdict.point.error_count:
                outcome.notes.append(
                    f"{model.name} @ concurrency {load.concurrency}: {verdict.point.error_count} "
                    f"requests failed (over {len(verdict.runs)} runs)"
                )
            outcome.seconds[(model.name, load.concurrency)] = time.monotonic() - load_started
            for check in verdict.checks:
                say(("REGRESSION " if check.regressed else "ok ") + check.describe())
    outcome.elapsed_s = time.monotonic() - started
    return outcome


def _judge(
    url: str,
    model: str,
    load: LoadPoint,
    settings: GateSettings,
    tolerance: Tolerance,
    retries: int,
    say: Callable[[str], None],
) -> Verdict:
    return judge_load(
        model,
        load,
        settings,
        tolerance,
        retries,
        measure=lambda: measure_point(url, model, load.concurrency, settings),
        pause=lambda: time.sleep(RETRY_PAUSE_S),
        say=say,
    )
