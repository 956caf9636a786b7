"""Stubs forked from a warm launcher process instead of each starting a Python of its own.

A stub started from scratch spends about a quarter of a second of CPU importing numpy and
the stub before it can load its model; the bundled repository has five. The launcher
(`launcher_main`) pays that once and forks each stub from there. It starts with the first stub
and ends once its last stub has ended, so a server without python models never has one.

A forked stub is a child of the launcher, not of the server: `ForkedProcess` gives the server
what `subprocess.Popen` gave it (pid, poll, wait, terminate, kill), its signals sent through a
pidfd (no pid reuse race), its exit code reported by the launcher, which reaps it. Should the
launcher die, its stubs' exit codes are lost (`LOST_EXIT_CODE`) and the next stub starts a
new launcher.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future

from common.invariant import present
from serve.backends.python.environment import child_env
from serve.backends.python.launcher_main import EXITED, FORKED, REPLY, REQUEST

LAUNCHER_MODULE = "serve.backends.python.launcher_main"
_START_TIMEOUT_S = 60.0
_WAIT_SLICE_S = 0.5  # how often a waiter checks that the launcher still reports ends
LOST_EXIT_CODE = -1000  # no process ends so: how the stub ended went with its launcher
log = logging.getLogger("serve.python")


class LauncherGone(Exception):
    """The launcher process is not there to fork a stub."""


class ForkedProcess:
    """A stub forked by the launcher, with the part of Popen's interface the server uses."""

    def __init__(self, pid: int, launcher: StubLauncher) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._launcher = launcher
        self._lock = threading.Lock()
        self._ended = threading.Event()
        self._released = False
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # already ended and reaped: the launcher reports it
            self._pidfd = None

    def poll(self) -> int | None:
        if not self._ended.is_set() and self._launcher.gone and self._has_exited(0):
            self.ended(LOST_EXIT_CODE)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._ended.is_set():
            left = None if deadline is None else deadline - time.monotonic()
            if self._launcher.gone:
                # Its stubs' ends are no longer reported: wait on the pidfd itself.
                if not self._has_exited(None if left is None else max(left, 0.0)):
                    raise subprocess.TimeoutExpired(f"stub (pid {self.pid})", timeout or 0.0)
                self.ended(LOST_EXIT_CODE)
                break
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"stub (pid {self.pid})", timeout or 0.0)
            self._ended.wait(_WAIT_SLICE_S if left is None else min(left, _WAIT_SLICE_S))
        with self._lock:
            release, self._released = not self._released, True
            if release and self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
        if release:
            self._launcher.release(self)
        return present(self.returncode, "a reaped stub has an exit code")

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        with self._lock:
            if self._pidfd is None:
                return
            with contextlib.suppress(OSError):  # ended meanwhile
                signal.pidfd_send_signal(self._pidfd, signum)

    def ended(self, code: int) -> None:
        """How the stub ended, as subprocess reports it (`LOST_EXIT_CODE`: unknown)."""
        with self._lock:
            if self._ended.is_set():
                return
            self.returncode = code
            self._ended.set()

    def _has_exited(self, timeout: float | None) -> bool:
        pidfd = self._pidfd  # open until the wait that sees the end releases it
        if pidfd is None:
            return True
        # A pidfd turns readable once its process has ended, whoever reaps it.
        readable, _, _ = select.select([pidfd], [], [], timeout)
        return bool(readable)


class StubLauncher:
    """The launcher process and the thread reading its replies."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", LAUNCHER_MODULE, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=child_env(),
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._pending: dict[int, Future[int]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self._early_exits: dict[int, int] = {}  # reported before their FORKED was handled
        self.gone = False
        self._reader = threading.Thread(target=self._read, name="stub-launcher", daemon=True)
        self._reader.start()

    def launch(self, stub_socket: socket.socket) -> ForkedProcess:
        """Fork a stub serving `stub_socket` (the launcher gets its own copy of it)."""
        request_id = next(self._ids)
        forked: Future[int] = Future()
        with self._lock:
            if self.gone:
                raise LauncherGone("the stub launcher has ended")
            self._pending[request_id] = forked
        try:
            socket.send_fds(self._control, [REQUEST.pack(request_id)], [stub_socket.fileno()])
        except OSError as exc:
            with self._lock:
                self._pending.pop(request_id, None)
            raise LauncherGone(f"the stub launcher is not answering: {exc}") from None
        try:
            pid = forked.result(timeout=_START_TIMEOUT_S)  # LauncherGone if it died meanwhile
        except BaseException:
            with self._lock:
                self._pending.pop(request_id, None)
            raise
        with self._lock:
            # Still pending until registered: the launcher does not end under a launch.
            self._pending.pop(request_id, None)
            child = ForkedProcess(pid, self)
            self._children[pid] = child
            code = self._early_exits.pop(pid, None)
        if code is not None:
            child.ended(code)
        return child

    def release(self, child: ForkedProcess) -> None:
        """A stub's end has been seen: drop it; the launcher ends with its last stub."""
        with self._lock:
            self._children.pop(child.pid, None)
            last = not self._children and not self._pending
            if last:
                _forget(self)
        if last:
            self.close()

    def close(self) -> None:
        """End the launcher (its stubs, if any, keep running) and reap it."""
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_RDWR)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        if threading.current_thread() is not self._reader:
            self._reader.join(timeout=10)
        self._control.close()

    def _read(self) -> None:
        try:
            while True:
                message = self._control.recv(REPLY.size)
                if len(message) != REPLY.size:
                    break
                kind, first, second = REPLY.unpack(message)
                if kind == FORKED:
                    with self._lock:
                        future = self._pending.get(first)
                    if future is not None and not future.done():
                        future.set_result(second)
                elif kind == EXITED:
                    self._exited(first, second)
        except OSError:
            pass
        self._lost()

    def _exited(self, pid: int, code: int) -> None:
        with self._lock:
            child = self._children.get(pid)
            if child is None:
                self._early_exits[pid] = code
        if child is not None:
            child.ended(code)

    def _lost(self) -> None:
        with self._lock:
            self.gone = True
            _forget(self)
            pending = list(self._pending.values())
            self._pending.clear()
        for future in pending:
            if not future.done():
                future.set_exception(LauncherGone("the stub launcher ended before forking it"))


_shared: StubLauncher | None = None
_shared_lock = threading.Lock()


def launch_stub(stub_socket: socket.socket) -> ForkedProcess:
    """A stub forked from the shared launcher (started when there is none); LauncherGone or
    OSError when no launcher could fork it."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared.gone:
            _shared = StubLauncher()
            log.debug("stub launcher started (pid %d)", _shared._process.pid)
        launcher = _shared
    return launcher.launch(stub_socket)


def _forget(launcher: StubLauncher) -> None:
    global _shared
    with _shared_lock:
        if _shared is launcher:
            _shared = None
