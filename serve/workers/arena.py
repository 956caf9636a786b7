"""Shared-memory arenas that carry tensors between the core and its front-end processes.

The process that writes a message's tensors owns the arena they go in: it takes a block, copies
the tensors into it once and sends the block's place with the message; the reader maps the
arena's segments by name and views the tensors where they lie. The writer frees the block when
the reader is done with it (a request's inputs: when its final answer comes back; an answer's
outputs: when the front end says it has copied them). Segments are made as needed and kept for
the arena's life, so a steady load maps each once.
"""

from __future__ import annotations

import bisect
import secrets
import threading
from multiprocessing.shared_memory import SharedMemory
from typing import NamedTuple

import numpy as np

from serve.shared_memory.segment import Mapping, attach, segment_prefix

ALIGN = 64  # each tensor starts on a cache line
SHAPE_ONLY = -1  # a TensorPlace offset: no data travels (the tensor went to a client's region)
SEGMENT_BYTES = 32 << 20  # a segment's size, unless one block needs more


def aligned(nbytes: int) -> int:
    """`nbytes` rounded up to a whole number of ALIGN-byte lines."""
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


class Block(NamedTuple):
    """A range of an arena's segment, as it travels in a message."""

    segment: str
    offset: int
    size: int


class _Segment:
    """One segment and its free ranges (offset -> size, kept sorted and merged)."""

    def __init__(self, name: str, size: int) -> None:
        self.shm = SharedMemory(name=name, create=True, size=size)
        self.offsets = [0]
        self.sizes = [size]

    def take(self, size: int) -> int | None:
        """The offset of a free range of `size` bytes, first fit; None when none is that big."""
        for index, free in enumerate(self.sizes):
            if free >= size:
                offset = self.offsets[index]
                if free == size:
                    del self.offsets[index], self.sizes[index]
                else:
                    self.offsets[index] += size
                    self.sizes[index] -= size
                return offset
        return None

    def give(self, offset: int, size: int) -> None:
        """Return a range, merged with its free neighbours."""
        index = bisect.bisect_left(self.offsets, offset)
        if index < len(self.offsets) and offset + size == self.offsets[index]:
            self.offsets[index] = offset
            self.sizes[index] += size
        else:
            self.offsets.insert(index, offset)
            self.sizes.insert(index, size)
        if index > 0 and self.offsets[index - 1] + self.sizes[index - 1] == offset:
            self.sizes[index - 1] += self.sizes[index]
            del self.offsets[index], self.sizes[index]

    def free_bytes(self) -> int:
        return sum(self.sizes)


class TensorArena:
    """The writer's side: blocks taken and freed from segments this process creates (and
    unlinks on `close`). Any thread may use it."""

    def __init__(self, segment_bytes: int = SEGMENT_BYTES) -> None:
        self._segment_bytes = segment_bytes
        self._stem = f"{segment_prefix()}w{secrets.token_hex(3)}_"
        self._segments: dict[str, _Segment] = {}
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> Block:
        size = aligned(max(nbytes, 1))
        with self._lock:
            for name, segment in self._segments.items():
                offset = segment.take(size)
                if offset is not None:
                    return Block(name, offset, size)
            name = f"{self._stem}{len(self._segments)}"
            segment = _Segment(name, max(self._segment_bytes, size))
            self._segments[name] = segment
            offset = segment.take(size)
            if offset is None:  # cannot happen: the segment is at least `size` long
                raise RuntimeError(f"a new {segment.shm.size}-byte segment has no {size} bytes")
            return Block(name, offset, size)

    def view(self, block: Block) -> memoryview:
        buf = self._segments[block.segment].shm.buf
        if buf is None:
            raise RuntimeError(f"shared-memory segment {block.segment} is closed")
        return buf[block.offset : block.offset + block.size]

    def free(self, block: Block) -> None:
        with self._lock:
            segment = self._segments.get(block.segment)
            if segment is not None:
                segment.give(block.offset, block.size)

    def in_use(self) -> int:
        """Bytes taken and not yet freed."""
        with self._lock:
            return sum(s.shm.size - s.free_bytes() for s in self._segments.values())

    def close(self) -> None:
        with self._lock:
            segments, self._segments = self._segments, {}
        for segment in segments.values():
            segment.shm.close()
            segment.shm.unlink()


class ArenaReader:
    """The reader's side: the other process's segments, mapped once each. A mapping is never
    closed while arrays view it: forgetting the reader leaves each mapping to the last array."""

    def __init__(self) -> None:
        self.mappings: dict[str, Mapping] = {}

    def buffer(self, block: Block) -> memoryview:
        mapping = self.mappings.get(block.segment)
        if mapping is None:
            mapping = self.mappings[block.segment] = attach(block.segment)
        if mapping.buf is None:
            raise RuntimeError(f"shared-memory segment {block.segment} is closed")
        return mapping.buf


class TensorPlace(NamedTuple):
    """One tensor of a message: where it lies in the message's block, or (BYTES tensors, which
    are object arrays) its values themselves."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    values: np.ndarray | None = None


def write_tensors(
    arrays: dict[str, np.ndarray], arena: TensorArena
) -> tuple[list[TensorPlace], Block | None]:
    """Copy `arrays` into one block of `arena` (object arrays travel in the message)."""
    places: list[TensorPlace] = []
    offsets: dict[str, int] = {}
    total = 0
    for name, array in arrays.items():
        if array.dtype.hasobject:
            places.append(TensorPlace(name, "O", array.shape, 0, array))
            continue
        offsets[name] = total
        total += aligned(array.nbytes)
    if not offsets:
        return places, None
    block = arena.take(total)
    buf = arena.view(block)
    for name, offset in offsets.items():
        array = arrays[name]
        target = np.ndarray(array.shape, array.dtype, buffer=buf, offset=offset)
        target[...] = array
        places.append(TensorPlace(name, array.dtype.str, array.shape, offset))
    return places, block


def read_tensors(
    places: list[TensorPlace], block: Block | None, reader: ArenaReader, *, copy: bool
) -> dict[str, np.ndarray]:
    """The tensors of a message: read-only views of the block (`copy`: arrays of their own, so
    the block can be freed at once)."""
    arrays: dict[str, np.ndarray] = {}
    buf = reader.buffer(block) if block is not None else None
    for place in places:
        if place.values is not None:
            arrays[place.name] = place.values
            continue
        if place.offset == SHAPE_ONLY:  # a stand-in of its shape; no memory is touched
            arrays[place.name] = np.empty(place.shape, np.dtype(place.dtype))
            continue
        if buf is None or block is None:
            raise RuntimeError(f"tensor '{place.name}' has no block")
        array = np.ndarray(
            place.shape, np.dtype(place.dtype), buffer=buf, offset=block.offset + place.offset
        )
        if copy:
            array = array.copy()
        else:
            array.flags.writeable = False
        arrays[place.name] = array
    return arrays
