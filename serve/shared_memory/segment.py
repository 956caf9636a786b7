"""POSIX shared-memory segments of the server's own: their names, and mapping one by name.

The server's processes (the core, its python stubs, its front ends) pass tensors through
segments under /dev/shm named `atpy<creator pid>_...`; a client may not register a region under
that prefix (serve.shared_memory.registry).
"""

from __future__ import annotations

import mmap
import os

SHM_DIR = "/dev/shm"  # where POSIX shared memory segments live on Linux
SEGMENT_PREFIX = "atpy"  # segments are named atpy<creator pid>_<random>_<n>


def segment_prefix() -> str:
    """The name prefix of every segment this process creates."""
    return f"{SEGMENT_PREFIX}{os.getpid()}_"


class Mapping:
    """A segment mapped read-write by name, as `SharedMemory(name)` maps it, without the
    resource tracker: before Python 3.13 attaching registers the segment with the attaching
    process's tracker (which would unlink it when that process exits, and costs every process a
    tracker of its own). The segment's creator unlinks it."""

    def __init__(self, name: str) -> None:
        fd = os.open(f"{SHM_DIR}/{name}", os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            self._mmap = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name = name
        self.size = size
        self.buf: memoryview | None = memoryview(self._mmap)

    def close(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
        self._mmap.close()


def attach(name: str) -> Mapping:
    """Map an existing segment that another process of the server created."""
    return Mapping(name)
