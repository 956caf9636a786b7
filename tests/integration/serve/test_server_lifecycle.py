"""SIGTERM / SIGINT: the server stops accepting, answers requests in flight and exits 0."""

from __future__ import annotations

import concurrent.futures as cf
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.support.server_process import start_server, stop_server

CONFIG = """name: "slow_py"
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }]
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "MARKER" value { string_value: "%s" } }
"""

# Marks that execute() has begun, then takes its time: the signal arrives mid-request.
MODEL = """
import json
import pathlib
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.marker = pathlib.Path(config["parameters"]["MARKER"]["string_value"])

    def execute(self, requests):
        self.marker.touch()
        time.sleep(1.0)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return responses
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_drains_requests_in_flight(tmp_path: Path, sig: int) -> None:
    marker = tmp_path / "execute-started"
    model_dir = tmp_path / "repository" / "slow_py"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(CONFIG % marker)
    (model_dir / "1" / "model.py").write_text(MODEL)
    server = start_server(tmp_path / "repository", tmp_path / "server.log")
    body = {
        "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}]
    }
    try:
        with cf.ThreadPoolExecutor(1) as pool:
            pending = pool.submit(
                httpx.post, f"{server.base}/v2/models/slow_py/infer", json=body, timeout=60
            )
            deadline = time.monotonic() + 30
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert marker.exists(), "the request never reached the model"
            server.process.send_signal(sig)
            response = pending.result(timeout=60)
        assert response.status_code == 200, response.text
        assert response.json()["outputs"][0]["data"] == [2.0] * 16
        assert server.process.wait(timeout=60) == 0
    finally:
        stop_server(server)
