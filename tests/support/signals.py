"""Child processes that get SIGINT as a terminal's Ctrl-C gives it, however the tests were started.

A shell starts a background job with SIGINT ignored, and an ignored signal stays ignored across
exec: Python then installs no KeyboardInterrupt handler, and a test that interrupts a child would
see it run on. `interruptible` restores the default in the child before it starts.
"""

from __future__ import annotations

import signal


def interruptible() -> None:
    """Popen's preexec_fn: SIGINT back to its default disposition in the child."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
