"""What a tuning run tunes: each ensemble as a pipeline (its composing models searched
jointly, measured through it), each model no ensemble uses on its own, and what it skips with
the reason (a stateful model, whose sequence batcher the search space does not cover)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tritonclient.grpc import model_config_pb2 as mc

from serve.api import CONFIG_FILENAME, ServeError, read_config
from serve.api import model_names as repository_models
from tuner.errors import TuneUsageError

ENSEMBLE_PLATFORM = "ensemble"

TargetKind = Literal["model", "pipeline", "mix"]


@dataclass(frozen=True, slots=True)
class Target:
    """One thing to tune: a model alone, an ensemble's pipeline (`steps`: its composing
    models in step order), or a traffic mix (`steps`: the models served together, `shares`:
    each one's share of the requests). `skip` says why it is not tuned ("" when it is)."""

    name: str
    kind: TargetKind
    steps: tuple[str, ...] = ()
    skip: str = ""
    shares: tuple[float, ...] = ()


def is_ensemble(config: mc.ModelConfig) -> bool:
    """Whether `config` is an ensemble's (platform "ensemble"): tuned as a pipeline."""
    return config.platform == ENSEMBLE_PLATFORM


def pipeline_steps(config: mc.ModelConfig) -> tuple[str, ...]:
    """The distinct models an ensemble's steps call, in step order."""
    return tuple(dict.fromkeys(step.model_name for step in config.ensemble_scheduling.step))


def plan(repository: Path, models: tuple[str, ...] = ()) -> list[Target]:
    """The targets of a run over `repository` (only `models`, when given, in their order);
    TuneUsageError for a missing repository or model."""
    if not repository.is_dir():
        raise TuneUsageError(f"model repository {repository} is not a directory")
    on_disk = repository_models(repository)
    if not on_disk:
        raise TuneUsageError(f"no models in {repository}")
    unknown = [m for m in models if m not in on_disk]
    if unknown:
        raise TuneUsageError(
            f"no model {', '.join(repr(m) for m in unknown)} in {repository} "
            f"(models: {', '.join(on_disk) or 'none'})"
        )
    configs = {name: _config_as_written(repository / name) for name in on_disk}
    if models:
        return [_target(name, configs) for name in models]
    ensembles = [name for name in on_disk if _is_ensemble(configs[name])]
    used = {
        step
        for config in configs.values()
        if config is not None and is_ensemble(config)
        for step in pipeline_steps(config)
    }
    return [
        _target(name, configs)
        for name in [*ensembles, *(n for n in on_disk if n not in ensembles and n not in used)]
    ]


def plan_mix(repository: Path, shares: Mapping[str, float]) -> Target:
    """The traffic mix `shares` (model -> share) as one target; TuneUsageError naming the
    entry that is not in the repository, is an ensemble or is stateful."""
    models = tuple(shares)
    plan(repository, models)  # the repository and every model exist
    for name in models:
        config = _config_as_written(repository / name)
        if _is_ensemble(config):
            raise TuneUsageError(
                f"--traffic-mix: '{name}' is an ensemble; a traffic mix takes the models it "
                f"serves (tune the ensemble's pipeline with -m {name})"
            )
        reason = _model_skip_reason(config)
        if reason:
            raise TuneUsageError(f"--traffic-mix: '{name}' cannot be tuned: {reason}")
    name = "mix-" + "-".join(models)
    return Target(name, "mix", models, shares=tuple(shares.values()))


def _config_as_written(model_dir: Path) -> mc.ModelConfig | None:
    """The folder's config.pbtxt, or None when it has none or it cannot be read (tuning the
    model then reports why, as for any model)."""
    path = model_dir / CONFIG_FILENAME
    if not path.is_file():
        return None
    try:
        return read_config(path)
    except ServeError:
        return None


def _is_ensemble(config: mc.ModelConfig | None) -> bool:
    return config is not None and is_ensemble(config)


def _target(name: str, configs: dict[str, mc.ModelConfig | None]) -> Target:
    config = configs[name]
    if config is None or not is_ensemble(config):
        reason = _model_skip_reason(config)
        return Target(name, "model", skip=reason)
    steps = pipeline_steps(config)
    return Target(name, "pipeline", steps, _pipeline_skip_reason(steps, configs))


def _model_skip_reason(config: mc.ModelConfig | None) -> str:
    if config is not None and config.HasField("sequence_batching"):
        return (
            "a stateful model (sequence_batching): the tuner does not search the sequence "
            "batcher's settings (slots, strategy, idle time) yet"
        )
    return ""


def _pipeline_skip_reason(steps: tuple[str, ...], configs: dict[str, mc.ModelConfig | None]) -> str:
    for step in steps:
        if step not in configs:
            return f"its step model '{step}' is not in the repository"
        config = configs[step]
        if _is_ensemble(config):
            return f"its step '{step}' is itself an ensemble (nested pipelines are not tuned)"
        reason = _model_skip_reason(config)
        if reason:
            return f"its step '{step}' is {reason}"
    return ""
