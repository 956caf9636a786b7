"""The request bytes all the connections of one endpoint may hold at once while their bodies
arrive (`HttpLimits.max_buffered_bytes`).

A request reserves its body's size (its Content-Length; a chunked one the size limit) when its
headers are read, and gives it back once the body is handed on. A connection that does not
get its reservation stops being read until it does, in the order they asked: a reservation is
all or nothing, so bodies already admitted always complete (or time out), and no mix of
half-received bodies can hold the budget with none able to finish. One request is admitted
whatever its size when nothing else is held. What one connection has read past its headers
before it paused (one socket read) is outside the budget.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class BudgetWaiter(Protocol):
    """A connection waiting for its reservation (see `BodyBudget.reserve`)."""

    def budget_granted(self, size: int) -> None:
        """The reservation asked for earlier is now held; reading may go on."""


class BodyBudget:
    """The budget of one endpoint: `capacity` bytes, reservations granted whole, in the order asked
    (see above). Used on the event loop's thread only."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiting: deque[tuple[BudgetWaiter, int]] = deque()

    def reserve(self, waiter: BudgetWaiter, size: int) -> bool:
        """True when `size` bytes are held for `waiter` now; False when it waits its turn
        (`waiter.budget_granted` is called then)."""
        if not self._waiting and self._fits(size):
            self.used += size
            return True
        self._waiting.append((waiter, size))
        return False

    def release(self, size: int) -> None:
        self.used -= size
        self._grant()

    def withdraw(self, waiter: BudgetWaiter) -> None:
        """`waiter` no longer waits (its connection closed, or its body came whole anyway)."""
        self._waiting = deque(entry for entry in self._waiting if entry[0] is not waiter)
        self._grant()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _fits(self, size: int) -> bool:
        return self.used == 0 or self.used + size <= self.capacity

    def _grant(self) -> None:
        while self._waiting and self._fits(self._waiting[0][1]):
            waiter, size = self._waiting.popleft()
            self.used += size
            waiter.budget_granted(size)
