"""`LevelProfiler`: measures load levels one after another on one running driver."""

from __future__ import annotations

from analyzer.load.base import LoadDriver, LoadLevel, RequestRecord
from analyzer.profiler.level import LevelRun, Probe, profile_level
from analyzer.profiler.settings import MeasureSettings


class LevelProfiler:
    """Starts the driver at the first level, switches it for the next ones (connections stay
    open, as in a perf_analyzer sweep) and stops it on `close`."""

    def __init__(
        self,
        driver: LoadDriver,
        settings: MeasureSettings,
        probe: Probe,
        *,
        model: str,
        batch_size: int,
    ) -> None:
        self.driver = driver
        self.settings = settings
        self.probe = probe
        self.model = model
        self.batch_size = batch_size
        self._started = False

    async def measure(self, level: LoadLevel, settings: MeasureSettings | None = None) -> LevelRun:
        """Measure `level` with the profiler's settings, or with `settings` when given."""
        if self._started:
            await self.driver.change(level)
        else:
            await self.driver.start(level)
            self._started = True
        return await profile_level(
            self.driver,
            level,
            settings or self.settings,
            self.probe,
            model=self.model,
            batch_size=self.batch_size,
        )

    async def close(self) -> list[RequestRecord]:
        """Stop the driver (when started); returns the records of the last requests."""
        if not self._started:
            return []
        self._started = False
        return await self.driver.stop()
