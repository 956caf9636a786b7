"""`autotune gate`'s work: measure again, compare, and re-measure a regressed load before
believing it (the machine is noisy; a real regression persists)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tuner.gate.baseline_file import Baseline, LoadPoint
from tuner.gate.compare import Check, Tolerance, best_of, checks
from tuner.gate.machine import describe_machine, machine_differences
from tuner.gate.measuring import measure_point
from tuner.gate.server import ServedModel

# A re-measurement waits this long first, so that a short burst of other work on the machine
# is over rather than measured again.
RETRY_PAUSE_S = 1.0


@dataclass(slots=True)
class GateOutcome:
    """Every check, what the reader should know besides (notes), and how long it took."""

    tolerance: Tolerance
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


def run_gate(
    url: str,
    baseline: Baseline,
    models: Sequence[ServedModel],
    tolerance: Tolerance,
    retries: int,
    say: Callable[[str], None] = lambda _text: None,
) -> GateOutcome:
    """Measure each model at each of its baseline's loads and compare; a regressed load is
    measured up to `retries` more times and judged on the best of its attempts."""
    started = time.monotonic()
    outcome = GateOutcome(tolerance)
    differences = machine_differences(baseline.machine, describe_machine())
    if differences:
        outcome.notes.append(
            "this machine differs from the baseline's ("
            + "; ".join(differences)
            + "): the comparison may not be meaningful"
        )
    for model in models:
        recorded = baseline.model(model.name)
        assert recorded is not None, "the caller selects models of the baseline"
        if recorded.config_sha256 and recorded.config_sha256 != model.config_sha256:
            outcome.notes.append(f"{model.name}: the served config differs from the baseline's")
        for load in recorded.loads:
            load_started = time.monotonic()
            found, point = _judge(url, model.name, load, baseline, tolerance, retries, say)
            outcome.checks.extend(found)
            if point.error_count:
                outcome.notes.append(
                    f"{model.name} @ concurrency {load.concurrency}: {point.error_count} "
                    "requests failed"
                )
            outcome.seconds[(model.name, load.concurrency)] = time.monotonic() - load_started
            for check in found:
                say(("REGRESSION " if check.regressed else "ok ") + check.describe())
    outcome.elapsed_s = time.monotonic() - started
    return outcome


def _judge(
    url: str,
    model: str,
    load: LoadPoint,
    baseline: Baseline,
    tolerance: Tolerance,
    retries: int,
    say: Callable[[str], None],
) -> tuple[list[Check], LoadPoint]:
    attempts = [measure_point(url, model, load.concurrency, baseline.settings)]
    best = attempts[0]
    found = checks(model, load, best, tolerance)
    while any(c.regressed for c in found) and len(attempts) <= retries:
        first = next(c for c in found if c.regressed)
        say(f"measuring again ({len(attempts) + 1} of {retries + 1}): {first.describe()}")
        time.sleep(RETRY_PAUSE_S)
        attempts.append(measure_point(url, model, load.concurrency, baseline.settings))
        best = best_of(attempts)
        found = checks(model, load, best, tolerance, len(attempts))
    return found, best
