"""`MeasureSettings`: how a load level is measured (perf_analyzer's measurement flags)."""

from __future__ import annotations

from dataclasses import dataclass, replace

TIME_WINDOWS = "time_windows"
COUNT_WINDOWS = "count_windows"

# A first pass's windows (`MeasureSettings.for_first_pass`): a fifth of the full window, but
# at least this many requests each, so that a slow model's percentile still means something.
FIRST_PASS_SHARE = 5
FIRST_PASS_MIN_REQUESTS = 20


@dataclass(frozen=True, slots=True)
class MeasureSettings:
    """Measurement windows, stability and thresholds, with perf_analyzer's defaults.

    - `measurement_mode`: `time_windows` (each window lasts `measurement_interval_ms`) or
      `count_windows` (each window holds at least `measurement_request_count` completed
      requests and lasts at least `min_count_window_s`).
    - A level is stable when, over the last `stability_window` (3) windows, max/min of the
      throughput and of the latency (the average, or the `percentile` value when given) are
      each within `1 + stability_percentage / 100`. At most `max_trials` windows are taken.
    - `latency_threshold_ms` (0 = none) stops the windows of a level, and a sweep, as soon as
      the latency reaches it.
    - `warmup_request_count` requests complete (and are discarded) before the first window.
    """

    measurement_mode: str = TIME_WINDOWS
    measurement_interval_ms: int = 5000
    measurement_request_count: int = 50
    stability_percentage: float = 10.0
    max_trials: int = 10
    percentile: int | None = None
    warmup_request_count: int = 0
    latency_threshold_ms: float = 0.0
    stability_window: int = 3
    min_count_window_s: float = 1.0
    overhead_warning_pct: float = 50.0
    # perf_analyzer in --async mode accepts a level whose throughput is stable but whose
    # latency keeps moving, with a warning; off by default (the tuner wants both stable).
    relax_latency_stability: bool = False
    keep_records: bool = False  # keep every request record (for --profile-export-file)

    def __post_init__(self) -> None:
        if self.measurement_mode not in (TIME_WINDOWS, COUNT_WINDOWS):
            raise ValueError(
                f"measurement mode must be {TIME_WINDOWS} or {COUNT_WINDOWS}, "
                f"not {self.measurement_mode!r}"
            )
        if self.measurement_interval_ms <= 0:
            raise ValueError("the measurement interval must be a positive number of ms")
        if self.measurement_request_count <= 0:
            raise ValueError("the measurement request count must be positive")
        if self.stability_percentage <= 0:
            raise ValueError("the stability percentage must be positive")
        if self.max_trials < 1:
            raise ValueError("max trials must be at least 1")
        if self.stability_window < 1:
            raise ValueError("the stability window must be at least 1")
        if self.percentile is not None and not 1 <= self.percentile <= 99:
            raise ValueError(f"the percentile must be within 1..99, not {self.percentile}")
        if self.warmup_request_count < 0:
            raise ValueError("the warmup request count cannot be negative")
        if self.latency_threshold_ms < 0:
            raise ValueError("the latency threshold cannot be negative")

    @property
    def latency_threshold_us(self) -> float:
        return self.latency_threshold_ms * 1000.0

    def with_longer_windows(self) -> MeasureSettings:
        """These settings with windows twice as long (in time, or in requests)."""
        return replace(
            self,
            measurement_interval_ms=self.measurement_interval_ms * 2,
            measurement_request_count=self.measurement_request_count * 2,
        )

    def for_first_pass(self) -> MeasureSettings:
        """Short windows for a rough first pass over load levels: windows of a fifth of these
        (at least `FIRST_PASS_MIN_REQUESTS` requests each), two in a row within the stability
        percentage (at most four windows), a quarter of the warm-up."""
        full_s = (
            self.measurement_interval_ms / 1000.0
            if self.measurement_mode == TIME_WINDOWS
            else self.min_count_window_s
        )
        return replace(
            self,
            measurement_mode=COUNT_WINDOWS,
            min_count_window_s=full_s / FIRST_PASS_SHARE,
            measurement_request_count=min(FIRST_PASS_MIN_REQUESTS, self.measurement_request_count),
            stability_window=min(2, self.stability_window),
            max_trials=min(4, self.max_trials),
            warmup_request_count=self.warmup_request_count // 4,
        )
