"""Tuning a traffic mix: models served together on one machine (`--traffic-mix
digits=0.7,resnet18=0.3`), their configs searched jointly (one study over `MixSpace`, whose
candidates keep instances x threads across the models within the cores), each trial measured
under the mixed load (every model at its share of a total request rate, each within the
budget), and the best configs written back all or none."""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from tuner.defaults import DEFAULT_PIPELINE_TRIALS
from tuner.duration import Duration
from tuner.mix_evaluate import MixEvaluator
from tuner.mix_space import MixSpace
from tuner.pipeline_run import (
    StepSetup,
    add_variants,
    joint_summary,
    prepare_step,
    usable_precisions,
    with_best,
)
from tuner.plan import Target
from tuner.results import write_model_report
from tuner.run import (
    Hooks,
    TuneOptions,
    fingerprint_of,
    model_space,
    remove_tree,
    search_settings,
    time_left,
)
from tuner.run_schema import RunSummary
from tuner.search import run_search
from tuner.server_control import tuning_server
from tuner.space import Platform

# A mix's trial measures several models at several total rates: as many trials as a pipeline.
DEFAULT_MIX_TRIALS = DEFAULT_PIPELINE_TRIALS


def tune_mix(
    options: TuneOptions, target: Target, time_budget: Duration | None, hooks: Hooks
) -> RunSummary:
    """Tune the models of the mix `target` (`steps` and their `shares`) jointly and (unless
    dry-run) write their best configs back, all or none. `time_budget` bounds the whole."""
    started = time.monotonic()
    name = target.name
    shares = dict(zip(target.steps, target.shares, strict=True))
    mix_text = ", ".join(f"{model} {100 * share:.4g}%" for model, share in shares.items())
    hooks.note(
        f"{name}: {mix_text} served together: their configs are searched jointly, each trial "
        f"measured under the mixed load, each model within {options.budget.describe()}"
    )
    report_folder = options.report_dir / name
    report_folder.mkdir(parents=True, exist_ok=True)
    platform = Platform.detect()
    models = [prepare_step(options, model, hooks) for model in target.steps]
    space = MixSpace(
        name,
        tuple(
            model_space(options, m.base, m.model_path, platform, usable_precisions(m))
            for m in models
        ),
        cores=platform.cpu_count,
    )
    if options.search == "grid":
        space.grid_points()  # PipelineGridError (one line, exit 1) when too large
    fingerprint = _mix_fingerprint(options, shares, platform.cpu_count, models)
    settings = search_settings(
        options, name, fingerprint, report_folder, time_budget, DEFAULT_MIX_TRIALS
    )
    work_dir = Path(tempfile.mkdtemp(prefix="autotune-", dir=report_folder))
    try:
        folders = [m.opened.path for m in models]
        failure_log = report_folder / "server-start.log"
        with tuning_server(folders[0], work_dir, failure_log, folders[1:]) as server:
            add_variants(server, models)
            evaluator = MixEvaluator(models, shares, server, options.budget, options.evaluation)
            sizes = " x ".join(f"{s.model_name} {s.size}" for s in space.steps)
            hooks.note(
                f"{name}: {space.size} candidates in the joint search space ({sizes}, "
                f"instances x threads within {space.cores} cores)"
            )
            settings = replace(settings, time_budget=time_left(time_budget, started))
            result = run_search(space, evaluator, settings, lambda e: hooks.progress(name, e))
    finally:
        remove_tree(work_dir)
    gpu = any("KIND_GPU" in step.kinds for step in space.steps)
    summary = joint_summary(options, name, platform, result, models, space.describe(), gpu)
    summary = replace(summary, traffic_mix=tuple(shares.items()))
    best = result.best.candidate if result.best is not None else None
    summary = with_best(options, summary, models, best, None)
    write_model_report(summary, report_folder)
    return summary


def _mix_fingerprint(
    options: TuneOptions, shares: dict[str, float], cores: int, models: Sequence[StepSetup]
) -> dict[str, str]:
    """The shares, the cores and every model's fingerprint (model file, config, budget...)."""
    mix = repr(sorted((model, round(share, 6)) for model, share in shares.items()))
    fingerprint = {
        "traffic_mix": hashlib.sha256(mix.encode()).hexdigest()[:16],
        "cores": str(cores),
    }
    for setup in models:
        own = fingerprint_of(options, setup.base, setup.model_path)
        fingerprint |= {f"{setup.model}.{key}": value for key, value in own.items()}
    return fingerprint
