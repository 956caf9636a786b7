"""Registered shared-memory regions (Triton's system and CUDA shared memory extensions).

Both kinds share one namespace of names, as in Triton: a request names a region, whichever
kind it is. CUDA regions are in `cuda.py`.

A client creates a POSIX shared-memory object (a file under /dev/shm), then registers a named
region of it: `key` names the object, `offset` and `byte_size` the part of it that is the
region. The server maps that part until the region is unregistered. The client owns the
object: the server never creates, resizes or unlinks it.
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import threading
from pathlib import Path
from typing import Any

from serve.errors import ErrorKind, ServeError
from serve.inference import RegionSlice
from serve.shared_memory.cuda import (
    CudaRegion,
    CudaUnavailable,
    Opener,
    decode_handle,
    open_with_cupy,
)
from serve.shared_memory.region import HeldRegion
from serve.shared_memory.segment import SEGMENT_PREFIX

SHM_DIRECTORY = Path("/dev/shm")

# The python backend's own segments: a client must not map another model's tensors.
_RESERVED_KEY = re.compile(rf"{SEGMENT_PREFIX}\d+_")


class Region(HeldRegion):
    """One mapped system shared-memory region."""

    kind = "system"

    def __init__(self, name: str, key: str, offset: int, byte_size: int, fd: int) -> None:
        super().__init__(name, byte_size)
        self.key = key
        self.offset = offset
        self._fd = fd
        start = offset - offset % mmap.ALLOCATIONGRANULARITY  # mmap offsets are page-aligned
        self._skip = offset - start
        self._map = mmap.mmap(fd, self._skip + byte_size, offset=start)

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def read(self, offset: int, byte_size: int, label: str) -> bytes:
        """A copy of the range, so that a client writing the region later cannot change it."""
        self.check_range(offset, byte_size, label)
        self._check_backing(offset + byte_size, label)
        start = self._skip + offset
        return self._map[start : start + byte_size]

    def write(self, offset: int, data: bytes | memoryview, label: str) -> None:
        size = memoryview(data).nbytes
        self.check_range(offset, size, label)
        self._check_backing(offset + size, label)
        start = self._skip + offset
        self._map[start : start + size] = data

    def _check_backing(self, end: int, label: str) -> None:
        # Touching a mapped page past the end of a file the client truncated kills the
        # process with SIGBUS; refuse instead.
        available = os.fstat(self._fd).st_size - self.offset
        if end > available:
            raise ServeError.invalid(
                f"{label}: shared memory object '{self.key}' of region '{self.name}' shrank"
                f" below the registered range ({max(available, 0)} of {self.byte_size} bytes left)"
            )

    def _close(self) -> None:
        self._map.close()
        os.close(self._fd)


class SharedMemoryRegistry:
    """The registered regions by name; every method is safe to call from any thread."""

    def __init__(
        self, directory: Path = SHM_DIRECTORY, cuda_opener: Opener = open_with_cupy
    ) -> None:
        self._directory = directory
        self._open_cuda = cuda_opener
        self._regions: dict[str, HeldRegion] = {}
        self._lock = threading.Lock()

    def register(self, name: str, key: str, offset: int, byte_size: int) -> None:
        if not name:
            raise ServeError.invalid(
                "'region name' is necessary to register system shared memory region"
            )
        what = f"failed to register shared memory region '{name}'"
        path = self._object_path(name, key)
        for field, value in (("offset", offset), ("byte_size", byte_size)):
            if type(value) is not int or value < 0:
                raise ServeError.invalid(f"{what}: '{field}' must be a non-negative integer")
        if byte_size == 0:
            raise ServeError.invalid(f"{what}: 'byte_size' must be at least 1")
        with self._lock:
            if name in self._regions:
                raise ServeError(
                    ErrorKind.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
                )
            fd = _open_object(path, key, what)
            try:
                size = os.fstat(fd).st_size
                if offset + byte_size > size:
                    raise ServeError.invalid(
                        f"{what}: offset {offset} + byte_size {byte_size} exceeds the"
                        f" {size} bytes of shared memory object '{key}'"
                    )
                region = Region(name, key, offset, byte_size, fd)
            except OSError as exc:
                os.close(fd)
                raise ServeError.invalid(f"{what}: cannot map '{key}': {exc.strerror}") from None
            except BaseException:
                os.close(fd)
                raise
            self._regions[name] = region

    def register_cuda(self, name: str, handle: Any, device_id: int, byte_size: int) -> None:
        """Open a client's CUDA IPC handle (`handle`: bytes, or HTTP's {"b64": ...}) on
        `device_id` as region `name`; ServeError naming the region when it cannot be."""
        what = f"failed to register CUDA shared memory region '{name}'"
        if not name:
            raise ServeError.invalid("'region name' is necessary to register a CUDA region")
        for field, value in (("device_id", device_id), ("byte_size", byte_size)):
            if type(value) is not int or value < 0:
                raise ServeError.invalid(f"{what}: '{field}' must be a non-negative integer")
        if byte_size == 0:
            raise ServeError.invalid(f"{what}: 'byte_size' must be at least 1")
        raw = decode_handle(handle, what)
        with self._lock:
            if name in self._regions:
                raise ServeError(
                    ErrorKind.ALREADY_EXISTS, f"shared memory region '{name}' already in manager"
                )
            try:
                memory = self._open_cuda(raw, device_id)
            except CudaUnavailable as exc:
                raise ServeError(ErrorKind.UNSUPPORTED, f"{what}: {exc}") from None
            except Exception as exc:  # the CUDA runtime's own errors (a stale handle...)
                raise ServeError.invalid(f"{what}: {type(exc).__name__}: {exc}") from None
            self._regions[name] = CudaRegion(name, device_id, byte_size, memory)

    def unregister(self, name: str = "", kind: str | None = "system") -> None:
        """Unregister one region of `kind` (None: any), or every region of it when `name` is
        empty; an unknown name is not an error (as in Triton)."""
        with self._lock:
            if name:
                region = self._regions.get(name)
                retired = [region] if region is not None and kind in (None, region.kind) else []
            else:
                retired = [r for r in self._regions.values() if kind in (None, r.kind)]
            for region in retired:
                del self._regions[region.name]
                region.retire()

    def status(self, name: str = "", kind: str = "system") -> list[dict[str, Any]]:
        with self._lock:
            if not name:
                return [r.status() for r in self._regions.values() if r.kind == kind]
            region = self._regions.get(name)
            if region is None or region.kind != kind:
                raise ServeError.not_found(f"Unable to find {kind} shared memory region: '{name}'")
            return [region.status()]

    def read(self, where: RegionSlice, label: str) -> bytes:
        with self._lock:
            return self._find(where.region).read(where.offset, where.byte_size, label)

    def acquire(self, where: RegionSlice, label: str) -> HeldRegion:
        """The region holding `where`, held until `release_region` (its range checked)."""
        with self._lock:
            region = self._find(where.region)
            region.check_range(where.offset, where.byte_size, label)
            region.acquire()
            return region

    def release_region(self, region: HeldRegion) -> None:
        with self._lock:
            region.release()

    def write(self, region: HeldRegion, offset: int, data: bytes | memoryview, label: str) -> None:
        with self._lock:
            region.write(offset, data, label)

    def close(self) -> None:
        """Unregister everything (at server stop)."""
        self.unregister(kind=None)

    def _find(self, name: str) -> HeldRegion:
        region = self._regions.get(name)
        if region is None:
            raise ServeError.not_found(f"Unable to find system shared memory region: '{name}'")
        return region

    def _object_path(self, name: str, key: str) -> Path:
        """The file under the shared-memory directory that `key` names, as shm_open reads it:
        leading slashes dropped, no other slash."""
        if type(key) is not str:
            raise ServeError.invalid(
                f"cannot register shared memory region '{name}': 'key' must be a string"
            )
        stem = key.lstrip("/")
        if not stem or "/" in stem or "\0" in stem or stem in (".", ".."):
            raise ServeError.invalid(
                f"cannot register shared memory region '{name}' - invalid shm key '{key}':"
                f" a key is one name under {self._directory}, like '/my_region'"
            )
        if _RESERVED_KEY.match(stem):
            raise ServeError.invalid(
                f"cannot register shared memory region '{name}' with key '{key}': the prefix"
                f" '{SEGMENT_PREFIX}' is reserved for the server's own segments"
            )
        return self._directory / stem


def _open_object(path: Path, key: str, what: str) -> int:
    try:
        # O_NOFOLLOW: a link planted in the shared directory must not reach other files.
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ServeError.invalid(
            f"{what}: Unable to open shared memory region: '{key}' (no such object)"
        ) from None
    except OSError as exc:
        raise ServeError.invalid(
            f"{what}: Unable to open shared memory region: '{key}' ({exc.strerror})"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ServeError.invalid(f"{what}: '{key}' is not a shared memory object")
    return fd
