"""Children tied to their parent end with it, even when it is killed by SIGKILL, and starting
one runs no Python in the forked child (a fork under live gRPC threads aborts now and then)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from common.tied_child import PARENT_ENV, tied_command, tied_env

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's"),
]
ROOT = Path(__file__).resolve().parents[3]
SLEEPER = (
    "from common.tied_child import tie_to_parent; tie_to_parent(); import time; time.sleep(60)"
)


def _ends_within(pid: int, seconds: float) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], seconds)
        return bool(readable)
    finally:
        os.close(pidfd)


def _grandchild_of_killed_parent(start_child: str) -> int:
    """Run a parent that starts a child with `start_child` (Python, `child` bound to its
    Popen), SIGKILL the parent once the child runs, and return the child's pid."""
    parent_code = textwrap.dedent(
        """
        import subprocess, sys, time
        from common.tied_child import tied_command, tied_env
        {start_child}
        time.sleep(0.3)  # the child is running (and tied) by now
        print(child.pid, flush=True)
        time.sleep(60)
        """
    ).format(start_child=start_child)
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
    return child_pid


def test_a_tied_command_ends_when_its_parent_is_killed() -> None:
    child = _grandchild_of_killed_parent('child = subprocess.Popen(tied_command(["sleep", "60"]))')
    assert _ends_within(child, 10.0), f"the sleep (pid {child}) outlived its killed parent"


def test_a_tied_python_child_ends_when_its_parent_is_killed() -> None:
    child = _grandchild_of_killed_parent(
        f"child = subprocess.Popen([sys.executable, '-c', {SLEEPER!r}], env=tied_env())"
    )
    assert _ends_within(child, 10.0), f"the child (pid {child}) outlived its killed parent"


def test_an_untied_child_outlives_its_parent() -> None:
    """The two tests above can fail: without the tie the same child lives on."""
    child = _grandchild_of_killed_parent("child = subprocess.Popen(['sleep', '60'])")
    try:
        assert not _ends_within(child, 1.0)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_child_whose_parent_is_already_gone_ends_at_once() -> None:
    # The parent it names is not its parent: as if that one had died before the tie was made.
    env = dict(os.environ, **{PARENT_ENV: "1"})
    done = subprocess.run([sys.executable, "-c", SLEEPER], cwd=ROOT, env=env, timeout=30)
    assert done.returncode == -signal.SIGTERM


def test_a_tied_command_keeps_its_arguments_exit_code_and_pid() -> None:
    child = subprocess.Popen(
        tied_command([sys.executable, "-c", "import os, sys; print(os.getpid()); sys.exit(7)"]),
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = child.communicate(timeout=30)
    assert child.returncode == 7
    assert int(out) == child.pid  # exec'd in place: signals to the Popen reach the command


def test_the_tie_is_not_passed_on_to_the_childs_own_children() -> None:
    code = (
        "import os; from common.tied_child import tie_to_parent, PARENT_ENV; "
        "tie_to_parent(); print(os.environ.get(PARENT_ENV, 'absent'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=tied_env(), capture_output=True, text=True
    )
    assert done.stdout.strip() == "absent", done.stderr


def test_starting_a_server_runs_no_python_in_the_forked_child(tmp_path: Path) -> None:
    """A preexec_fn would run Python between fork and exec (the fork hooks with it); a gRPC
    client's threads copied into that child made it abort in CI."""
    repository = tmp_path / "repository"
    repository.mkdir()
    marker = tmp_path / "forked-python"
    code = textwrap.dedent(
        f"""
        import os
        from pathlib import Path
        from common.serve_process import start_serve_process, stop_serve_process
        os.register_at_fork(after_in_child=lambda: Path({str(marker)!r}).touch())
        process, _ = start_serve_process(Path({str(repository)!r}), Path({str(tmp_path)!r}) / "log")
        stop_serve_process(process)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "Python ran in the child between fork and exec"
