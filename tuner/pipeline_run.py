"""Tuning an ensemble as a pipeline: its composing models' configs searched jointly (one study
over `PipelineSpace`), each trial measured through the ensemble so that the latency budget is
end to end, the top candidates re-measured, and the best configs written back all or none.
The ensemble's own config is never changed."""

from __future__ import annotations

import hashlib

from serve.api import CONFIG_FILENAME, ServeError, read_config
from tuner.duration import Duration
from tuner.group_evaluate import measure_served_model
from tuner.group_run import Group, tune_group
from tuner.pipeline_space import PipelineSpace
from tuner.plan import Target
from tuner.run import Hooks, TuneError, TuneOptions
from tuner.run_schema import RunSummary


def tune_pipeline(
    options: TuneOptions, target: Target, time_budget: Duration | None, hooks: Hooks
) -> RunSummary:
    """Tune the ensemble `target.name` as a pipeline and (unless dry-run) write its composing
    models' best configs back, all or none. `time_budget` bounds the whole of it."""
    name = target.name
    ensemble_dir = options.repository / name
    try:
        ensemble = read_config(ensemble_dir / CONFIG_FILENAME)
    except ServeError as exc:
        raise TuneError(str(exc)) from None
    ensemble.name = ensemble.name or name
    digest = hashlib.sha256(ensemble.SerializeToString(deterministic=True)).hexdigest()[:16]
    group = Group(
        name=name,
        models=tuple(target.steps),
        intro=f"{name}: a pipeline ({' -> '.join(target.steps)}): its steps' configs are "
        f"searched jointly and measured through '{name}', the budget end to end",
        compose=lambda spaces, _platform: PipelineSpace(name, spaces),
        measure=measure_served_model(options.budget),  # through the ensemble
        front=ensemble_dir,
        front_config=ensemble,
        fingerprint={"ensemble_config": digest},
        # A step's max_batch_size never goes below the ensemble's: the ensemble accepts
        # batches of that size and hands them to its steps whole.
        min_batch_size=ensemble.max_batch_size,
        remeasure=True,
    )
    return tune_group(options, group, time_budget, hooks)
