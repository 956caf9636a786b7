"""Poll mode: an ensemble that appears with a composing model it needs loads after that model,
whether the poll sees them together (ensembles load after models) or one at a time (the
ensemble is retried when its model appears)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.integration.serve.ensemble.repository import (
    composing_configs,
    good_ensembles,
    write_repository,
)
from tests.support.server_process import start_server, stop_server

pytestmark = pytest.mark.timeout(180)


def test_an_ensemble_added_with_its_model_loads_after_it(tmp_path: Path) -> None:
    models = composing_configs(tmp_path)
    pipeline = good_ensembles()["pipeline"].replace('name: "pipeline"', 'name: "a_pipe"')
    repository = write_repository(tmp_path / "served", {"offset": models["offset"]})
    staged = write_repository(tmp_path / "staged", {"a_pipe": pipeline, "scale": models["scale"]})
    server = start_server(
        repository,
        tmp_path / "server.log",
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "0.2",
    )
    try:
        # "a_pipe" sorts before "scale" and arrives first
        shutil.move(staged / "a_pipe", repository / "a_pipe")
        shutil.move(staged / "scale", repository / "scale")
        client = httpclient.InferenceServerClient(server.url)
        deadline = time.monotonic() + 30
        while not client.is_model_ready("a_pipe"):
            assert time.monotonic() < deadline, client.get_model_repository_index()
            time.sleep(0.2)
        tensor = httpclient.InferInput("INPUT", [1, 4], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 4), dtype=np.float32))
        output = client.infer("a_pipe", [tensor]).as_numpy("OUTPUT")
        np.testing.assert_allclose(output, np.full((1, 4), 3))
    finally:
        stop_server(server)
