"""Child processes that end with the process that started them, even one killed by SIGKILL:
Linux sends such a child SIGTERM when its parent dies (prctl PR_SET_PDEATHSIG).

The child sets this up itself. Doing it in a `preexec_fn` instead makes subprocess fork() the
whole parent and run Python between fork and exec; when the parent is a gRPC client, gRPC's
threads are copied half-way and the child now and then aborts before its exec ("epoll_wait
error: Bad file descriptor"). Without a preexec_fn, subprocess starts the child with vfork and
nothing of ours runs in between.

- A Python command of this project (`python -m serve`) is started with `tied_env()`, which
  names the parent in its environment, and calls `tie_to_parent()` first thing.
- Any other command goes through `tied_command()`: this file runs as a script, ties itself and
  execs the command in the same process (same pid), for about 50 ms of Python start-up.

This file imports only the standard library: it runs as a script under `python -I -S`.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Mapping, Sequence

PARENT_ENV = "AUTOTUNE_PARENT_PID"
_PR_SET_PDEATHSIG = 1


def tied_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) naming this process as the parent that a
    child calling `tie_to_parent` ends with."""
    env = dict(os.environ if base is None else base)
    env[PARENT_ENV] = str(os.getpid())
    return env


def tie_to_parent() -> None:
    """In a child started with `tied_env`: end (SIGTERM) when the parent does; at once if it
    already has. The variable is removed, so this process's own children are not tied to it
    by mistake."""
    parent = os.environ.pop(PARENT_ENV, None)
    if parent is not None and parent.isdigit():
        _tie(int(parent))


def tied_command(command: Sequence[str]) -> list[str]:
    """`command` run so that it ends with this process (unchanged where Linux is not)."""
    if not sys.platform.startswith("linux"):
        return list(command)
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), *command]


def _tie(parent: int) -> None:
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # it died before the signal was set up: nothing would send it
        os.kill(os.getpid(), signal.SIGTERM)


def _exec_tied(argv: Sequence[str]) -> None:
    if len(argv) < 2 or not argv[0].isdigit():
        raise SystemExit("usage: tied_child.py PARENT_PID COMMAND [ARG...]")
    _tie(int(argv[0]))
    os.execvp(argv[1], list(argv[1:]))  # the death signal setting survives exec


if __name__ == "__main__":
    _exec_tied(sys.argv[1:])
