"""Running the analyzer's event loop: uvloop when it is installed."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a uvloop loop when uvloop is importable (it halves the loop's
    per-request cost); the analyzer's CLI and its load worker processes run through here.
    SIGINT (Ctrl-C) cancels `main` and raises KeyboardInterrupt, as with asyncio.run."""
    try:
        import uvloop
    except ImportError:
        runner: Any = asyncio.run
    else:
        runner = uvloop.run
    try:
        result: T = runner(_interruptible(main))
    except _Interrupted:
        raise KeyboardInterrupt from None
    return result


class _Interrupted(Exception):
    """`main` was cancelled by SIGINT (KeyboardInterrupt once the loop is closed)."""


async def _interruptible(main: Coroutine[Any, Any, T]) -> T:
    """`main`, cancelled by SIGINT through the loop's own signal handling (the signal is read
    by the loop and the task cancelled there, whatever the main thread is doing), unless the
    process ignores SIGINT (load workers leave the interrupt to their parent)."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return await task
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGINT, interrupt)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
        return await task
    try:
        return await task
    except asyncio.CancelledError:
        if interrupted:
            raise _Interrupted from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
