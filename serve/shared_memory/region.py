"""What every registered shared-memory region has, system or CUDA: a name, a size, range
checks, and a lifetime that outlasts an unregister while requests still write into it."""

from __future__ import annotations

import abc
from typing import Any

from serve.errors import ServeError


class HeldRegion(abc.ABC):
    """One registered region. Requests that will write into it hold it (`acquire`), so an
    unregister while they are in flight closes it only when the last one lets go."""

    kind = ""  # "system" or "cuda", as the extensions' routes name them

    def __init__(self, name: str, byte_size: int) -> None:
        self.name = name
        self.byte_size = byte_size
        self._users = 0
        self._retired = False

    @abc.abstractmethod
    def status(self) -> dict[str, Any]:
        """The region as the status call describes it."""

    @abc.abstractmethod
    def read(self, offset: int, byte_size: int, label: str) -> bytes:
        """A copy of the range (a client writing the region later cannot change it)."""

    @abc.abstractmethod
    def write(self, offset: int, data: bytes | memoryview, label: str) -> None: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    def check_range(self, offset: int, byte_size: int, label: str) -> None:
        """Raise unless [offset, offset + byte_size) lies inside the region."""
        if offset >= self.byte_size:
            raise ServeError.invalid(
                f"{label}: offset {offset} is outside shared memory region '{self.name}'"
                f" ({self.byte_size} bytes)"
            )
        if offset + byte_size > self.byte_size:
            raise ServeError.invalid(
                f"{label}: offset {offset} + byte size {byte_size} runs past the end of shared"
                f" memory region '{self.name}' ({self.byte_size} bytes)"
            )

    def acquire(self) -> None:
        self._users += 1

    def release(self) -> None:
        self._users -= 1
        if self._retired and self._users == 0:
            self._close()

    def retire(self) -> None:
        self._retired = True
        if self._users == 0:
            self._close()
