"""Stubs forked from the warm launcher: what the server sees of them is what it saw of a stub
it started itself (pid, exit codes, signals), the launcher lives exactly as long as its stubs,
and its death loses nothing but exit codes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import psutil
import pytest

import serve.backends.python.launcher as launcher
import serve.backends.python.process as process
from serve.backends.python.process import StubExited, StubProcess, exit_description
from serve.backends.python.protocol import Probe, ProbeResult


def _launcher_pids() -> set[int]:
    return {p.pid for p in psutil.Process().children() if "launcher_main" in " ".join(_cmdline(p))}


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _parent(pid: int) -> int:
    return psutil.Process(pid).ppid()


@pytest.fixture(autouse=True)
def nothing_left() -> Iterator[None]:
    yield
    deadline = time.monotonic() + 10
    while _launcher_pids() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _launcher_pids() == set()
    assert launcher._shared is None


def test_stubs_are_forked_by_one_launcher_that_ends_with_the_last() -> None:
    first, second = StubProcess.start(), StubProcess.start()
    (warm,) = _launcher_pids()
    assert _parent(first.pid) == _parent(second.pid) == warm
    first.stop(5)
    assert _launcher_pids() == {warm}  # one stub still runs
    second.stop(5)
    assert _launcher_pids() == set()


def test_a_stub_with_paths_of_its_own_starts_a_python_of_its_own(tmp_path: object) -> None:
    stub = StubProcess.start([str(tmp_path)])
    try:
        assert _parent(stub.pid) == os.getpid()
        assert _launcher_pids() == set()
    finally:
        stub.stop(5)


def test_a_killed_stub_is_reported_as_killed() -> None:
    stub = StubProcess.start()
    os.kill(stub.pid, signal.SIGKILL)
    with pytest.raises(StubExited, match="killed by SIGKILL"):
        stub.recv(timeout_s=30)
    stub.stop(5)


def test_the_server_signals_its_stubs_through_the_launcher_s_children() -> None:
    stub = StubProcess.start()
    stub.kill()
    with pytest.raises(StubExited, match="killed by SIGKILL"):
        stub.recv(timeout_s=30)
    stub.stop(5)


def test_when_the_launcher_dies_its_stubs_still_stop_and_the_next_stub_gets_a_new_one() -> None:
    stub = StubProcess.start()
    (warm,) = _launcher_pids()
    os.kill(warm, signal.SIGKILL)
    psutil.Process(warm).wait(timeout=10)
    deadline = time.monotonic() + 10
    while launcher._shared is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    # The stub lives on (now a child of init); stopping it still works, its exit code is lost.
    assert psutil.pid_exists(stub.pid)
    stub.stop(5)
    assert not psutil.pid_exists(stub.pid) or psutil.Process(stub.pid).status() == "zombie"
    fresh = StubProcess.start()
    try:
        (new,) = _launcher_pids()
        assert new != warm and _parent(fresh.pid) == new
    finally:
        fresh.stop(5)


def test_a_lost_exit_code_is_said_plainly() -> None:
    text = exit_description(42, launcher.LOST_EXIT_CODE)
    assert text.startswith("stub process (pid 42) has ended; how is unknown")


def test_without_a_launcher_the_stub_starts_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(_socket: object) -> None:
        raise launcher.LauncherGone("the stub launcher has ended")

    monkeypatch.setattr(process, "launch_stub", unavailable)
    stub = StubProcess.start()
    try:
        assert _parent(stub.pid) == os.getpid()
        stub.send(Probe(1))  # before any model: answered, as not ready
        answer = stub.recv(timeout_s=30)
        assert isinstance(answer, ProbeResult) and answer.probe_id == 1
    finally:
        stub.stop(5)
