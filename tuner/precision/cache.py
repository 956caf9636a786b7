"""The variant cache: each variant file is built once and reused.

Layout: `<root>/<source sha256>/<precision>-<settings digest>.onnx` plus a `.json` sidecar that
says how it was built. The settings digest covers the precision, the method, the calibration
data's hash (only for methods that calibrate, so new validation data does not rebuild fp16),
this module's recipe version and the onnxruntime version (its quantizer output changes with it).

Publishing is atomic: a variant is built in a scratch folder next to its final place, fsynced
and renamed, so a reader sees the whole file or none. Builders of the same key in several
processes take an exclusive lock on `<final>.lock`; the second one finds the file built.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import onnx
import onnxruntime as ort

from common.atomic import publish, write_text_atomic

DEFAULT_CACHE_DIR = Path(".cache/autotune/variants")
RECIPE_VERSION = "1"  # bump when a builder's settings change, so old variants are not reused
_CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """SHA-256 of one file's bytes, as hex (read in chunks: model files can be large)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def model_sha256(path: Path) -> str:
    """SHA-256 of the model file, and of its external weight files when it has any."""
    external = sorted(_external_data_files(path))
    if not external:
        return file_sha256(path)
    digest = hashlib.sha256(file_sha256(path).encode())
    for file in external:
        digest.update(file.name.encode() + b"\0" + file_sha256(file).encode())
    return digest.hexdigest()


def _external_data_files(path: Path) -> set[Path]:
    model = onnx.load(str(path), load_external_data=False)
    files: set[Path] = set()
    for tensor in model.graph.initializer:
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            location = next((e.value for e in tensor.external_data if e.key == "location"), None)
            if location:
                files.add(path.parent / location)
    return files


@dataclass(frozen=True, slots=True)
class VariantKey:
    """What a variant file depends on; `calibration_sha256` is None for methods without it."""

    source_sha256: str
    precision: str
    method: str
    calibration_sha256: str | None

    def digest(self) -> str:
        fields = asdict(self) | {"recipe": RECIPE_VERSION, "onnxruntime": ort.__version__}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class CacheResult:
    """Where a variant is, and whether this call built it."""

    path: Path
    cached: bool  # True when the file existed (no build happened in this call)
    seconds: float  # time spent building (0 when cached)


class VariantCache:
    """The variant files under `root`, one per `VariantKey` (see the module docstring);
    safe to share between processes."""

    def __init__(self, root: Path = DEFAULT_CACHE_DIR) -> None:
        self.root = Path(root)

    def path_for(self, key: VariantKey, suffix: str = ".onnx") -> Path:
        return self.root / key.source_sha256 / f"{key.precision}-{key.digest()[:16]}{suffix}"

    def get_or_build(
        self, key: VariantKey, build: Callable[[Path], None], suffix: str = ".onnx"
    ) -> CacheResult:
        """The variant's path, calling `build(scratch_path)` only when it is not cached.

        `build` writes the model to the path it is given; anything it leaves beside it is
        removed. An exception from `build` leaves the cache as it was.
        """
        final = self.path_for(key, suffix)
        if final.is_file():
            return CacheResult(final, cached=True, seconds=0.0)
        final.parent.mkdir(parents=True, exist_ok=True)
        with _exclusive(final.with_suffix(".lock")):
            if final.is_file():  # built by another process while this one waited
                return CacheResult(final, cached=True, seconds=0.0)
            started = time.perf_counter()
            scratch = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
            try:
                built = scratch / final.name
                build(built)
                seconds = time.perf_counter() - started
                sidecar = asdict(key) | {
                    "recipe": RECIPE_VERSION,
                    "onnxruntime": ort.__version__,
                    "build_seconds": round(seconds, 3),
                }
                write_text_atomic(final.with_suffix(".json"), json.dumps(sidecar, indent=2))
                publish(built, final)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return CacheResult(final, cached=False, seconds=seconds)


@contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    # Lock files are left in place: removing one could let two builders hold different locks.
    with lock_path.open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
