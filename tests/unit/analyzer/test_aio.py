"""analyzer.aio.run: SIGINT cancels the coroutine and surfaces as KeyboardInterrupt once the
loop is closed (its cleanup ran), unless the process ignores SIGINT (load workers)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading

from analyzer.aio import run
from tests.support.signals import interruptible

PROGRAM = """
import asyncio, signal, sys
from analyzer.aio import run

if sys.argv[1] == "ignore":
    signal.signal(signal.SIGINT, signal.SIG_IGN)

async def main():
    print("started", flush=True)
    try:
        await asyncio.sleep(float(sys.argv[2]))
    finally:
        print("cleaned up", flush=True)
    return "done"

try:
    print(run(main()), flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _interrupted(mode: str, sleep_s: float) -> tuple[int, str]:
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, mode, str(sleep_s)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "started"
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=120)
    return process.returncode, out


def test_sigint_cancels_the_run_after_its_cleanup() -> None:
    code, out = _interrupted("default", 50)
    assert code == 130 and out.split() == ["cleaned", "up", "interrupted"]


def test_a_process_that_ignores_sigint_runs_on() -> None:
    code, out = _interrupted("ignore", 1)
    assert code == 0 and out.split() == ["cleaned", "up", "done"]


def test_a_run_outside_the_main_thread_has_no_signal_handling_and_still_runs() -> None:
    # The tuner measures from worker threads: only the main thread may handle signals.
    async def main() -> str:
        await asyncio.sleep(0)
        return "done"

    handler = signal.getsignal(signal.SIGINT)
    results: list[str] = []
    thread = threading.Thread(target=lambda: results.append(run(main())))
    thread.start()
    thread.join(timeout=30)
    assert results == ["done"]
    assert signal.getsignal(signal.SIGINT) is handler
