"""A process writing a config with `write_text_atomic` over and over, SIGKILLed at many
moments (seeded, spread over its write cycle): after every kill the file is whole, the old
content or the new, never a mix or a truncation; the kills that landed inside a write leave
only the writer's temporary file beside it (named so Triton's repository ignores it)."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

from common.atomic import write_text_atomic

KILLS = 120
OLD = 'name: "m"\nmax_batch_size: 8\n' + "# old\n" * 40_000
NEW = 'name: "m"\nmax_batch_size: 16\n' + "# new\n" * 40_000


def _writer(path: Path) -> None:
    """The child: write the two contents in turn until killed."""
    try:
        while True:
            write_text_atomic(path, NEW)
            write_text_atomic(path, OLD)
    finally:
        os._exit(0)


def test_a_config_written_atomically_survives_sigkill_at_any_moment(tmp_path: Path) -> None:
    path = tmp_path / "config.pbtxt"
    write_text_atomic(path, OLD)
    rng = random.Random(7)
    torn_writes = 0
    for _ in range(KILLS):
        pid = os.fork()
        if pid == 0:
            _writer(path)
        time.sleep(rng.uniform(0.0, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        content = path.read_text()
        assert content in (OLD, NEW), f"a torn config: {len(content)} characters"
        leftovers = [p for p in tmp_path.iterdir() if p != path]
        assert all(p.name.startswith(".config.pbtxt.") for p in leftovers), leftovers
        torn_writes += len(leftovers)
        for leftover in leftovers:
            leftover.unlink()
    # the kills did land inside writes (else this test would prove nothing)
    assert torn_writes > 0
