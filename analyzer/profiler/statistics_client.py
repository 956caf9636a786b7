"""`ServerStatistics`: server counters read through the analyzer's control client."""

from __future__ import annotations

from typing import Any, Protocol

from analyzer.errors import AnalyzerError
from analyzer.profiler.server_stats import ServerCounters, select_model_stats
from protocol.errors import ClientError


class StatisticsClient(Protocol):
    async def statistics(self, model: str = "", version: str = "") -> dict[str, Any]: ...


class ServerStatistics:
    """Snapshots of one model version's counters; after the first failure (a server without
    the statistics extension) it answers None and `problem` says why."""

    def __init__(self, client: StatisticsClient, model: str, version: str) -> None:
        self._client = client
        self._model = model
        self._version = version
        self.problem = ""

    async def snapshot(self) -> ServerCounters | None:
        if self.problem:
            return None
        try:
            document = await self._client.statistics(self._model, self._version)
        except (AnalyzerError, ClientError) as exc:
            self.problem = f"the server's statistics are not available: {exc}"
            return None
        entry = select_model_stats(document, self._model, self._version)
        if entry is None:
            self.problem = f"the server's statistics have no entry for model '{self._model}'" + (
                f" version {self._version}" if self._version else ""
            )
            return None
        return ServerCounters.from_model_stats(entry)
