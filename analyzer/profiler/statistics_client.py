"""`ServerStatistics`: server counters read through the analyzer's control client."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from analyzer.errors import AnalyzerError
from analyzer.profiler.server_stats import ServerCounters, select_model_stats
from protocol.errors import ClientError


class StatisticsClient(Protocol):
    """What `ServerStatistics` needs of a client: the statistics extension's JSON document
    (every model when `model` is "")."""

    async def statistics(self, model: str = "", version: str = "") -> dict[str, Any]: ...


class ServerStatistics:
    """Snapshots of one model version's counters (and of an ensemble's composing models:
    `composing`, (name, version) with version "" for the latest); after the first failure
    (a server without the statistics extension) it answers None and `problem` says why.
    `versions` holds the version each composing model's counters were read from."""

    def __init__(
        self,
        client: StatisticsClient,
        model: str,
        version: str,
        composing: Sequence[tuple[str, str]] = (),
    ) -> None:
        self._client = client
        self._model = model
        self._version = version
        self._composing = list(composing)
        self.versions: dict[str, str] = {}
        self.problem = ""

    async def snapshot(self) -> ServerCounters | None:
        if self.problem:
            return None
        try:
            if self._composing:
                document = await self._client.statistics()  # every model, in one call
            else:
                document = await self._client.statistics(self._model, self._version)
        except (AnalyzerError, ClientError) as exc:
            self.problem = f"the server's statistics are not available: {exc}"
            return None
        entry = self._entry(document, self._model, self._version)
        if entry is None:
            return None
        composing: list[tuple[str, ServerCounters]] = []
        for name, version in self._composing:
            child = self._entry(document, name, version)
            if child is None:
                return None
            self.versions[name] = str(child.get("version", version))
            composing.append((name, ServerCounters.from_model_stats(child)))
        counters = ServerCounters.from_model_stats(entry)
        return replace(counters, composing=tuple(composing)) if composing else counters

    def _entry(self, document: Mapping[str, Any], model: str, version: str) -> Any:
        entry = select_model_stats(document, model, version)
        if entry is None:
            self.problem = f"the server's statistics have no entry for model '{model}'" + (
                f" version {version}" if version else ""
            )
        return entry
