"""Triton's response cache (`--cache-config local,size=N`, per model `response_cache {enable}`).

One cache for the whole server, bounded in bytes, least recently used entries evicted first.
A request's key hashes what Triton's does: the model's name and version and each input's name,
datatype, shape and bytes (not its parameters or requested outputs). An entry holds what the
model produced, so a hit is answered through the model's own response making: the requested
outputs only, classification as asked (Triton 2.51 answers a hit with every cached output). Only
inputs in host memory are hashed (a request with a GPU input is neither looked up nor stored),
and only successful responses are stored. Sequence-batched and decoupled models refuse the
cache at load, with Triton's messages (`serve.config.validate`).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from serve.backends.base import ProducedOutputs, RequestResult
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.scheduler.statistics import ModelStatistics

LOCAL = "local"
_ENTRY_OVERHEAD = 64  # bytes counted per entry and per tensor besides the data


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """The server's response cache as `--cache-config` asks for it (`parse_cache_config`)."""

    size_bytes: int  # the local cache's capacity


def parse_cache_config(values: Sequence[str]) -> CacheSettings | None:
    """`--cache-config` values (`local,size=1048576`, repeatable: keys accumulate) as
    tritonserver reads them; None when none is given or the size is 0. ServeError naming the
    flag for another cache, an unknown key or a bad size."""
    settings: dict[str, str] = {}
    for value in values:
        name, _, setting = value.partition(",")
        key, equals, text = setting.partition("=")
        if not equals or not key:
            raise ServeError.invalid(
                f"--cache-config {value!r}: expected <cache>,<key>=<value>, e.g. local,size=1048576"
            )
        if name != LOCAL:
            raise ServeError.invalid(
                f"--cache-config {value!r}: cache '{name}' is not available here (only 'local')"
            )
        settings[key] = text
    if not settings:
        return None
    unknown = sorted(set(settings) - {"size"})
    if unknown:
        raise ServeError.invalid(
            f"--cache-config: the local cache takes 'size' only, not {', '.join(unknown)}"
        )
    try:
        size = int(settings.get("size", "0"))
    except ValueError:
        raise ServeError.invalid(
            f"--cache-config local,size={settings['size']}: the size is a number of bytes"
        ) from None
    if size < 0:
        raise ServeError.invalid(f"--cache-config local,size={size}: the size cannot be negative")
    return CacheSettings(size) if size else None


def request_key(model: str, version: str, request: InferRequest) -> bytes | None:
    """The request's cache key; None when an input is not a host (numpy) array."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (model, version):
        digest.update(part.encode())
        digest.update(b"\0")
    for name in sorted(request.inputs):
        array = request.inputs[name]
        if not isinstance(array, np.ndarray):
            return None
        datatype = request.input_datatypes.get(name, array.dtype.str)
        digest.update(f"{name}\0{datatype}\0{array.shape}\0".encode())
        if array.dtype == object:
            for item in array.reshape(-1):
                data = item if isinstance(item, bytes) else str(item).encode()
                digest.update(len(data).to_bytes(4, "little"))
                digest.update(data)
        else:
            digest.update(np.ascontiguousarray(array).data)
    return digest.digest()


def _entry_size(outputs: Mapping[str, np.ndarray]) -> int:
    size = _ENTRY_OVERHEAD
    for name, array in outputs.items():
        size += _ENTRY_OVERHEAD + len(name)
        if array.dtype == object:
            size += sum(len(item) if isinstance(item, bytes) else 8 for item in array.flat)
        else:
            size += array.nbytes
    return size


@dataclass(slots=True)
class CacheCounters:
    """The cache's own totals (Triton's nv_cache_* gauges)."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    lookup_ns: int = 0
    insertion_ns: int = 0


class ResponseCache:
    """What models produced, by request key; safe to use from any thread."""

    def __init__(self, settings: CacheSettings) -> None:
        self.capacity = settings.size_bytes
        self.counters = CacheCounters()
        self._entries: OrderedDict[bytes, tuple[ProducedOutputs, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    @property
    def entries(self) -> int:
        return len(self._entries)

    @property
    def utilization(self) -> float:
        """The share of the capacity in use, 0 to 1."""
        return self._used / self.capacity if self.capacity else 0.0

    def lookup(self, key: bytes) -> ProducedOutputs | None:
        """What was produced for `key` (outputs and response parameters), or None."""
        began = time.perf_counter_ns()
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            counters = self.counters
            counters.lookups += 1
            if found is None:
                counters.misses += 1
            else:
                counters.hits += 1
            counters.lookup_ns += time.perf_counter_ns() - began
        if found is None:
            return None
        outputs = found[0]
        return ProducedOutputs(dict(outputs), outputs.parameters)

    def insert(self, key: bytes, outputs: Mapping[str, np.ndarray]) -> None:
        """Keep a copy of `outputs` (and its response parameters) under `key`, evicting the
        least recently used entries to make room; one larger than the cache is not kept."""
        began = time.perf_counter_ns()
        parameters = outputs.parameters if isinstance(outputs, ProducedOutputs) else {}
        kept = ProducedOutputs(
            {name: _frozen_copy(array) for name, array in outputs.items()}, parameters
        )
        size = _entry_size(kept)
        with self._lock:
            if size <= self.capacity:
                replaced = self._entries.pop(key, None)
                if replaced is not None:
                    self._used -= replaced[1]
                while self._used + size > self.capacity:
                    _, (_, evicted) = self._entries.popitem(last=False)
                    self._used -= evicted
                    self.counters.evictions += 1
                self._entries[key] = (kept, size)
                self._used += size
            self.counters.insertion_ns += time.perf_counter_ns() - began


def _frozen_copy(array: np.ndarray) -> np.ndarray:
    copy = np.array(array, copy=True)
    copy.flags.writeable = False
    return copy


class CachedModel:
    """The response cache in front of one model version (a backend model or an ensemble): a
    hit is answered at once and counted as Triton counts it; a miss runs and, when it
    succeeds, is stored. An entry lacking an output the request wants counts as a miss."""

    def __init__(self, cache: ResponseCache, name: str, version: str, stats: ModelStatistics):
        self._cache, self._name, self._version, self._stats = cache, name, version, stats

    def submit(
        self,
        request: InferRequest,
        wanted: Collection[str],
        respond: Callable[[RequestResult], None],
        run: Callable[[Callable[[RequestResult], None]], None],
    ) -> None:
        """Answer `request` from the cache, or `run` it with a completion that stores what it
        produced before passing it on to `respond` (both on the event loop's thread)."""
        key = request_key(self._name, self._version, request)
        if key is None:
            run(respond)
            return
        began = time.perf_counter_ns()
        cached = self._cache.lookup(key)
        lookup_ns = time.perf_counter_ns() - began
        if cached is not None and all(name in cached for name in wanted):
            self._stats.record_cache_hit(time.monotonic_ns() - request.arrival_ns, lookup_ns)
            respond(cached)
            return

        def store(result: RequestResult) -> None:
            if not isinstance(result, ServeError):
                began = time.perf_counter_ns()
                self._cache.insert(key, result)
                self._stats.cache_miss.add(lookup_ns + time.perf_counter_ns() - began)
            respond(result)

        run(store)
