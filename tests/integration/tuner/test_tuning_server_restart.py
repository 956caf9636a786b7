"""The tuner's private server, killed under it (as the kernel's OOM killer or a crash would):
`restart_if_exited` says how it ended and starts it again, and candidates load on it as
before; while it runs, nothing is restarted."""

from __future__ import annotations

import signal
from pathlib import Path

from serve.api import open_model_directory
from tests.conftest import BUNDLED_REPOSITORY
from tuner.server_control import tuning_server


def test_a_killed_tuning_server_is_restarted_and_serves_again(tmp_path: Path) -> None:
    model_dir = BUNDLED_REPOSITORY / "simple"
    config = open_model_directory(model_dir).config
    with tuning_server(model_dir, tmp_path) as server:
        server.load(config)
        assert server.restart_if_exited() is None  # running: left alone
        process = server._process
        assert process is not None
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        said = server.restart_if_exited()
        assert said is not None and "killed by signal 9" in said and "restarted" in said
        assert server._process is not None and server._process.pid != process.pid
        server.load(config)  # the new server takes candidates
        assert server.restart_if_exited() is None
