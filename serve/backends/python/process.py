"""Starting, talking to and stopping a stub process."""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any, Protocol

from serve.backends.python.channel import Channel
from serve.backends.python.environment import child_env
from serve.backends.python.launcher import LOST_EXIT_CODE, LauncherGone, launch_stub

STUB_MODULE = "serve.backends.python.stub"
_POLL_S = 1.0
log = logging.getLogger(
    "serve.python"
)  # how often a blocked receive checks that the stub is still alive


class ProcessHandle(Protocol):
    """What the server needs of a stub's process: a `subprocess.Popen`, or a `ForkedProcess`."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class StubExited(Exception):
    """The stub process is gone; the message says how it ended."""


class StubTimeout(TimeoutError):
    """The stub did not answer in time."""


def exit_description(pid: int, code: int) -> str:
    """How stub `pid` ended, in words, from its exit code as subprocess reports it (negative: the
    signal that killed it; LOST_EXIT_CODE: unknown, its launcher died first)."""
    if code == LOST_EXIT_CODE:
        return (
            f"stub process (pid {pid}) has ended; how is unknown (the launcher that forked it "
            "ended first)"
        )
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"stub process (pid {pid}) was killed by {name} (exit code {code})"
    return f"stub process (pid {pid}) exited with code {code}"


class StubProcess:
    """A running stub and the connection to it. Any thread may send; one thread at a time
    may receive."""

    def __init__(self, proc: ProcessHandle, channel: Channel) -> None:
        self._proc = proc
        self._channel = channel

    @classmethod
    def start(cls, import_paths: Sequence[str] = ()) -> StubProcess:
        """Start a stub; `import_paths` come first on its import path. A stub without paths of
        its own is forked from the warm launcher (`launcher.py`); one with them (a model's own
        environment, whose packages must win over the launcher's imports) starts a Python of
        its own, as does any stub when the launcher cannot fork it."""
        if not import_paths:
            try:
                return cls._forked()
            except (LauncherGone, OSError, TimeoutError) as exc:
                log.warning("stub launcher unavailable (%s): starting the stub on its own", exc)
        return cls._spawned(import_paths)

    @classmethod
    def _forked(cls) -> StubProcess:
        ours, theirs = socket.socketpair()
        try:
            proc = launch_stub(theirs)
        except BaseException:
            ours.close()  # a stub forked late finds its server gone and ends
            raise
        finally:
            theirs.close()
        return cls(proc, Channel(ours.detach()))

    @classmethod
    def _spawned(cls, import_paths: Sequence[str]) -> StubProcess:
        ours, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-m", STUB_MODULE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=child_env(import_paths),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        return cls(proc, Channel(ours.detach()))

    @property
    def pid(self) -> int:
        return self._proc.pid

    def send(self, message: Any) -> None:
        try:
            self._channel.send(message)
        except OSError:
            raise StubExited(self._exit_reason()) from None

    def recv(self, timeout_s: float | None = None) -> Any:
        """The stub's next message; StubExited if it dies first, StubTimeout after timeout_s."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
            if wait <= 0:
                raise StubTimeout(f"stub process (pid {self.pid}) did not answer in time")
            try:
                if self._channel.poll(wait):
                    return self._channel.recv()
            except (EOFError, OSError):
                raise StubExited(self._exit_reason()) from None
            # A child of the model holding the socket would hide the stub's death from poll().
            if self._proc.poll() is not None:
                raise StubExited(self._exit_reason())

    def fileno(self) -> int:
        """The socket to the stub (readable when it has written)."""
        return self._channel.fileno()

    @property
    def pending(self) -> bool:
        """Whether a whole message is already read in (`recv_ready` returns it at once)."""
        return self._channel.pending

    def recv_ready(self) -> Any:
        """The next message, when the socket is known to be readable; StubExited if it died."""
        try:
            return self._channel.recv()
        except (EOFError, OSError):
            raise StubExited(self._exit_reason()) from None

    def kill(self) -> None:
        """Kill the process without waiting (it unblocks a caller stuck in recv)."""
        if self._proc.poll() is None:
            self._proc.kill()

    def stop(self, grace_s: float, ask_first: bool = True) -> None:
        """Close the connection (a stub in its loop exits then), terminate, then kill.

        Each step waits up to grace_s; `ask_first=False` skips the first wait for a stub known
        to be busy. Always reaps the process.
        """
        self._channel.close()
        steps = (None, self._proc.terminate, self._proc.kill)
        for action in steps if ask_first else steps[1:]:
            if action is not None:
                action()
            try:
                self._proc.wait(timeout=grace_s)
                return
            except subprocess.TimeoutExpired:
                continue
        self._proc.wait()

    def _exit_reason(self) -> str:
        try:
            code = self._proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
        return exit_description(self.pid, code)
