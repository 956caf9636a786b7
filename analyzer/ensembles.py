"""An ensemble's composing models, read from the configs the server gives, as perf_analyzer
finds them (ModelParser::AddEnsembleComposingModels): every step's model, and within a step
that is itself an ensemble, its steps too. A step's model_version -1 means the latest ("").

A model is driven as a sequence model when its config has `sequence_batching`, or, for an
ensemble, when any composing model has (an ensemble with a stateful step is stateful).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from analyzer.errors import AnalyzerError
from protocol.errors import ClientError

ENSEMBLE_PLATFORM = "ensemble"


@dataclass(frozen=True, slots=True)
class ComposingModel:
    """One model an ensemble's steps use, with the config the server gave for it."""

    name: str
    version: str  # "" = the latest the server has
    parent: str  # the ensemble one of whose steps it is
    config: Mapping[str, Any]

    @property
    def is_ensemble(self) -> bool:
        return is_ensemble(self.config)


class ConfigClient(Protocol):
    """What reading the composing models needs of a client: a model's config as JSON."""

    async def model_config(self, model: str, version: str = "") -> dict[str, Any]: ...


def is_ensemble(config: Mapping[str, Any]) -> bool:
    """Whether `config` (the server's JSON) is an ensemble's: its platform is "ensemble"."""
    return config.get("platform") == ENSEMBLE_PLATFORM


def is_sequence_model(config: Mapping[str, Any], composing: tuple[ComposingModel, ...]) -> bool:
    """Whether the load must be sent as sequences: the model, or any of its composing
    models, has `sequence_batching`."""
    return "sequence_batching" in config or any(
        "sequence_batching" in model.config for model in composing
    )


async def composing_models(
    client: ConfigClient, config: Mapping[str, Any]
) -> tuple[ComposingModel, ...]:
    """Depth first, in step order; a model that several steps use is listed once."""
    found: list[ComposingModel] = []
    seen: set[tuple[str, str]] = set()

    async def walk(ensemble: Mapping[str, Any], chain: tuple[str, ...]) -> None:
        name = str(ensemble.get("name", ""))
        for number, step in enumerate(_steps(ensemble)):
            model = step.get("model_name")
            if not isinstance(model, str) or not model:
                raise AnalyzerError(f"ensemble '{name}' step {number} has no model_name")
            version = _step_version(step.get("model_version", -1), name, number)
            if (model, version) in seen:
                continue
            if model in chain:
                raise AnalyzerError(f"ensemble '{name}' step {number} uses '{model}' in a cycle")
            seen.add((model, version))
            try:
                child = await client.model_config(model, version)
            except ClientError as exc:
                raise AnalyzerError(
                    f"cannot read the config of '{model}', step {number} of ensemble '{name}':"
                    f" {exc}"
                ) from None
            found.append(ComposingModel(model, version, name, child))
            if is_ensemble(child):
                await walk(child, (*chain, model))

    if is_ensemble(config):
        await walk(config, (str(config.get("name", "")),))
    return tuple(found)


def _steps(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    scheduling = config.get("ensemble_scheduling") or {}
    steps = scheduling.get("step") or []
    return [step for step in steps if isinstance(step, Mapping)]


def _step_version(value: Any, ensemble: str, number: int) -> str:
    try:
        version = int(value)  # the JSON form of the config prints int64 as a string
    except (TypeError, ValueError):
        raise AnalyzerError(
            f"ensemble '{ensemble}' step {number}: model_version '{value}' is not a number"
        ) from None
    return "" if version == -1 else str(version)
