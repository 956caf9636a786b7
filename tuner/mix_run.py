"""Tuning a traffic mix: models served together on one machine (`--traffic-mix
digits=0.7,resnet18=0.3`), their configs searched jointly (one study over `MixSpace`, whose
candidates keep instances x threads across the models within the cores), each trial measured
under the mixed load (every model at its share of a total request rate, each within the
budget), and the best configs written back all or none."""

from __future__ import annotations

import hashlib
from dataclasses import replace

from tuner.duration import Duration
from tuner.group_run import Group, tune_group
from tuner.mix_evaluate import MixMeasure
from tuner.mix_space import MixSpace
from tuner.plan import Target
from tuner.run import Hooks, TuneOptions
from tuner.run_schema import RunSummary
from tuner.space import Platform


def tune_mix(
    options: TuneOptions, target: Target, time_budget: Duration | None, hooks: Hooks
) -> RunSummary:
    """Tune the models of the mix `target` (`steps` and their `shares`) jointly and (unless
    dry-run) write their best configs back, all or none. `time_budget` bounds the whole."""
    name = target.name
    shares = dict(zip(target.steps, target.shares, strict=True))
    mix_text = ", ".join(f"{model} {100 * share:.4g}%" for model, share in shares.items())
    cores = Platform.detect().cpu_count
    mix = repr(sorted((model, round(share, 6)) for model, share in shares.items()))
    group = Group(
        name=name,
        models=tuple(target.steps),
        intro=f"{name}: {mix_text} served together: their configs are searched jointly, each "
        f"trial measured under the mixed load, each model within {options.budget.describe()}",
        compose=lambda spaces, platform: MixSpace(name, spaces, cores=platform.cpu_count),
        measure=MixMeasure(shares, options.budget),
        fingerprint={
            "traffic_mix": hashlib.sha256(mix.encode()).hexdigest()[:16],
            "cores": str(cores),
        },
        summary_extra=lambda summary: replace(summary, traffic_mix=tuple(shares.items())),
    )
    return tune_group(options, group, time_budget, hooks)
