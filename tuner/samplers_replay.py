"""A search method replayed against a table of measurements (a tabular benchmark).

The evaluation looks each candidate up in the table (the exhaustive grid's outcomes), so a
method can be run over many seeds at no cost, and every method sees the same measurements.
The wall time a run would have taken is estimated from the table's trial seconds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from tuner.candidate import Candidate
from tuner.search import run_search
from tuner.search_types import SearchSettings, TrialContext, TrialOutcome
from tuner.space import Space


@dataclass(frozen=True, slots=True)
class Measured:
    """One candidate's outcome in the table, and the seconds its trial took."""

    outcome: TrialOutcome
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ReplayRun:
    """What one replay found (`best_key` None when nothing feasible) and what it would have
    cost: the trials measured and their seconds in the table."""

    method: str
    seed: int
    best_key: str | None
    best_throughput: float  # 0 when nothing feasible was found
    trials: int  # measurements the search made (the table's trials it looked up)
    seconds: float  # the sum of those trials' seconds in the table
    stop_reason: str


def table_optimum(table: Mapping[str, Measured], settings: SearchSettings) -> tuple[str, float]:
    """The table's best feasible candidate key and throughput (("", 0.0) when none)."""
    feasible = [
        (m.outcome.throughput, key) for key, m in table.items() if settings.feasible(m.outcome)
    ]
    best = max(feasible, default=(0.0, ""))
    return best[1], best[0]


def replay(
    space: Space,
    table: Mapping[str, Measured],
    settings: SearchSettings,
    method: str,
    seed: int,
) -> ReplayRun:
    """Run `method` with `seed` over `space` (an in-memory study), each evaluation answered
    from `table` by the candidate's key (a key it lacks: a failed trial)."""

    def evaluate(candidate: Candidate, _context: TrialContext) -> TrialOutcome:
        found = table.get(candidate.key)
        if found is None:
            return TrialOutcome.failed(f"{candidate.key} is not in the table")
        return found.outcome

    run_settings = replace(
        settings,
        storage=None,
        study_name=f"{settings.study_name}-{method}-{seed}",
        mode="grid" if method == "grid" else "optuna",
        method=method,
        seed=seed,
    )
    result = run_search(space, evaluate, run_settings)
    measured = [t for t in result.trials if t.outcome is not None and t.reused_from is None]
    keys = [t.candidate.key if t.candidate is not None else "" for t in measured]
    best = result.best
    return ReplayRun(
        method=method,
        seed=seed,
        best_key=best.candidate.key if best is not None and best.candidate is not None else None,
        best_throughput=best.outcome.throughput if best and best.outcome else 0.0,
        trials=len(measured),
        seconds=sum(table[k].seconds for k in keys if k in table),
        stop_reason=result.stop_reason,
    )
