"""Several threads reading one channel: whichever thread waits for a message reads.

The server's execute thread waits for its batch's reply while the stub may also send streamed
responses and calls; the stub's main thread waits for the next batch while the model's threads
wait for their calls' answers. Rather than a reader thread that hands every message over (a
thread switch per batch), the thread that waits reads ("leader / follower"): a message for
another waiter is left in the box and that waiter woken; a message for no waiter (a streamed
response, a call) is handled by `route` on the spot. Only while one thread reads do the others
sleep.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Hashable
from typing import Any

# route(message) -> the key of the waiter it is for, or None when route handled it itself.
Route = Callable[[Any], Hashable | None]
# receive(timeout_s) -> the next message; raises TimeoutError when none came in time, any
# other exception when the channel is broken (every waiter then gets that exception).
Receive = Callable[[float | None], Any]


class Inbox:
    """Messages of one channel, by key, to the threads that wait for them; whichever thread waits
    reads (see above). `route` handles what no one waits for, on the reading thread."""

    def __init__(self, receive: Receive, route: Route) -> None:
        self._receive = receive
        self._route = route
        self._cond = threading.Condition()
        self._boxes: defaultdict[Hashable, deque[Any]] = defaultdict(deque)
        self._reading = False
        self._broken: BaseException | None = None

    @property
    def broken(self) -> BaseException | None:
        """The error that ended the channel, once it has."""
        return self._broken

    def wait(self, key: Hashable, timeout_s: float | None = None) -> Any:
        """The next message for `key`; TimeoutError after `timeout_s`, or the channel's error."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while True:
                box = self._boxes.get(key)
                if box:
                    return box.popleft()
                if self._broken is not None:
                    raise self._broken
                if not self._reading:
                    self._reading = True
                    break
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("no message in time")
                self._cond.wait(remaining)
        return self._lead(key, deadline)

    def pump(self, timeout_s: float) -> None:
        """Read and route messages for up to `timeout_s` when no other thread reads (for a
        thread that keeps the channel drained while nobody waits); return at once otherwise."""
        with self._cond:
            if self._reading or self._broken is not None:
                self._cond.wait(timeout_s)
                return
            self._reading = True
        with contextlib.suppress(TimeoutError):
            self._lead(None, time.monotonic() + timeout_s)

    def try_lead(self) -> bool:
        """Become the reader without waiting, for a caller that reads the channel its own way
        (the event loop, when the socket is readable); False when another thread reads."""
        with self._cond:
            if self._reading or self._broken is not None:
                return False
            self._reading = True
            return True

    def step_down(self) -> None:
        """End the reading `try_lead` began."""
        with self._cond:
            self._reading = False
            self._cond.notify_all()

    def route(self, message: Any, key: Hashable) -> bool:
        """For a leader that read `message` its own way: True when it is for `key` (the
        caller's), else it was handled or left for its waiter."""
        target = self._route(message)
        if target is None:
            return False
        if target == key:
            return True
        with self._cond:
            self._boxes[target].append(message)
            self._cond.notify_all()
        return False

    def fail(self, error: BaseException) -> None:
        """Mark the channel broken: every waiter, now and later, gets `error`."""
        with self._cond:
            if self._broken is None:
                self._broken = error
            self._cond.notify_all()

    def _lead(self, key: Hashable | None, deadline: float | None) -> Any:
        """Read until a message for `key` comes (routing the others), as the one reader."""
        try:
            while True:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError("no message in time")
                try:
                    message = self._receive(remaining)
                except TimeoutError:
                    raise
                except BaseException as exc:
                    self.fail(exc)
                    raise
                target = self._route(message)
                if target is None:
                    continue
                if target == key:
                    return message
                with self._cond:
                    self._boxes[target].append(message)
                    self._cond.notify_all()
        finally:
            with self._cond:
                self._reading = False
                self._cond.notify_all()
