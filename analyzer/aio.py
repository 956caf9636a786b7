"""Running the analyzer's event loop: uvloop when it is installed."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on a uvloop loop when uvloop is importable (it halves the loop's
    per-request cost); the analyzer's CLI and its load worker processes run through here."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
