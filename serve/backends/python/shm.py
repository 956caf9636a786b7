"""Shared-memory arenas: the server owns and grows them, the stub attaches to them."""

from __future__ import annotations

import secrets
import weakref
from multiprocessing.shared_memory import SharedMemory

import numpy as np

from serve.backends.python.protocol import ArenaRef
from serve.shared_memory.segment import Mapping, attach, segment_prefix

MIN_ARENA_BYTES = 64 * 1024


class Arena:
    """A server-owned segment, reused across calls and replaced by a bigger one when needed."""

    def __init__(self) -> None:
        self._stem = f"{segment_prefix()}{secrets.token_hex(3)}_"
        self._count = 0
        self._shm: SharedMemory | None = None
        self._ref: ArenaRef | None = None

    @property
    def ref(self) -> ArenaRef:
        if self._ref is None:
            raise RuntimeError("shared-memory arena is closed")
        return self._ref

    @property
    def buf(self) -> memoryview:
        return _buffer(self._require())

    def ensure(self, nbytes: int) -> None:
        """Make the arena at least `nbytes` long (its content is not kept when it grows)."""
        if self._shm is not None and self._shm.size >= nbytes:
            return
        size = MIN_ARENA_BYTES
        while size < nbytes:
            size *= 2
        self.close()
        self._count += 1
        self._shm = SharedMemory(name=f"{self._stem}{self._count}", create=True, size=size)
        self._ref = ArenaRef(self._shm.name, self._shm.size)

    def close(self) -> None:
        """Unmap and remove the segment; the arena can grow again afterwards."""
        shm, self._shm, self._ref = self._shm, None, None
        if shm is not None:
            shm.close()
            shm.unlink()

    def _require(self) -> SharedMemory:
        if self._shm is None:
            raise RuntimeError("shared-memory arena is closed")
        return self._shm


class Attachment:
    """The stub's mapping of one server arena, re-attached when the server replaces it.

    Closing a segment unmaps it even while numpy arrays still view it (numpy does not hold a
    buffer export), so a replaced segment stays mapped while arrays the model kept are alive.
    """

    def __init__(self) -> None:
        self._shm: Mapping | None = None
        self._name = ""  # the attached segment's name (SharedMemory.name costs a call)
        self._buf: memoryview | None = None
        self._kept: list[weakref.ref[np.ndarray]] = []
        self._retired: list[tuple[Mapping, list[weakref.ref[np.ndarray]]]] = []

    def buf(self, ref: ArenaRef) -> memoryview:
        if self._buf is not None and self._name == ref.name:
            return self._buf
        if self._shm is not None:
            self._retired.append((self._shm, self._kept))
        self._shm = attach(ref.name)
        self._name = ref.name
        self._buf = _buffer(self._shm)
        self._kept = []
        self._close_retired()
        return self._buf

    def keep(self, views: list[weakref.ref[np.ndarray]]) -> None:
        """Arrays viewing the current segment that the model still holds."""
        self._kept.extend(view for view in views if view() is not None)

    def _close_retired(self) -> None:
        still_viewed = []
        for shm, kept in self._retired:
            if any(view() is not None for view in kept):
                still_viewed.append((shm, kept))
            else:
                shm.close()
        self._retired = still_viewed


def _buffer(shm: SharedMemory | Mapping) -> memoryview:
    buf = shm.buf
    if buf is None:  # typeshed allows it; only after close()
        raise RuntimeError(f"shared-memory segment {shm.name} is closed")
    return buf
