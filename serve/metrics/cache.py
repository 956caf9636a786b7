"""The response cache's own metrics (Triton's nv_cache_* gauges, shown when the server has a
cache); the per-model hit and miss counters are inference metrics (serve.metrics.inference)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from serve.model.response_cache import ResponseCache


class CacheCollector:
    """Reads the cache's totals at each scrape."""

    def __init__(self, cache: ResponseCache) -> None:
        self._cache = cache

    def collect(self) -> Iterator[Metric]:
        cache, counters = self._cache, self._cache.counters
        for name, documentation, value in (
            ("nv_cache_util", "Cache utilization [0.0 - 1.0]", cache.utilization),
            (
                "nv_cache_num_entries",
                "Number of responses stored in response cache",
                cache.entries,
            ),
            ("nv_cache_num_hits", "Number of cache hits in response cache", counters.hits),
            ("nv_cache_num_misses", "Number of cache misses in response cache", counters.misses),
            ("nv_cache_num_lookups", "Number of cache lookups in response cache", counters.lookups),
            (
                "nv_cache_num_evictions",
                "Number of cache evictions in response cache",
                counters.evictions,
            ),
            (
                "nv_cache_lookup_duration",
                "Total cache lookup duration (hit and miss), in microseconds",
                counters.lookup_ns // 1000,
            ),
            (
                "nv_cache_insertion_duration",
                "Total cache insertion duration, in microseconds",
                counters.insertion_ns // 1000,
            ),
        ):
            yield GaugeMetricFamily(name, documentation, value=value)
