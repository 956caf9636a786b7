"""Loading as Triton does: warmup before ready, version policies, auto-complete, polling,
GPU kinds on a CPU machine, and the pytorch backend over HTTP."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import numpy as np
import tritonclient.http as httpclient

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import SERVE_BROKEN, start_server, stop_server

COUNTING_MODEL = """
import json
import pathlib

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.log = pathlib.Path(config["parameters"]["LOG"]["string_value"])

    def execute(self, requests):
        with self.log.open("a") as log:
            log.write(f"{len(requests)} {requests[0].request_id()}\\n")
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)]))
        return out
"""

COUNTING_CONFIG = """name: "counting"
backend: "python"
max_batch_size: 4
input [{ name: "X" data_type: TYPE_FP32 dims: [2] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [2] }]
parameters { key: "LOG" value { string_value: "%s" } }
model_warmup [{ name: "zeros" batch_size: 3 count: 2
  inputs { key: "X" value { data_type: TYPE_FP32 dims: [2] zero_data: true } } }]
"""


def _server(tmp_path: Path, repository: Path, *extra: str):
    return start_server(repository, tmp_path / "server.log", *SERVE_BROKEN, *extra)


def _simple_request(value: int) -> dict[str, object]:
    return {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "INT32", "data": [value] * 16}
            for n in ("INPUT0", "INPUT1")
        ]
    }


def test_warmup_runs_before_ready_and_bad_warmup_is_unavailable(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    log = tmp_path / "executions.log"
    for name, extra in (("counting", ""), ("bad_warmup", "")):
        model_dir = repository / name
        (model_dir / "1").mkdir(parents=True)
        (model_dir / "1" / "model.py").write_text(COUNTING_MODEL)
        config = COUNTING_CONFIG % log
        if name == "bad_warmup":
            config = config.replace('"counting"', '"bad_warmup"').replace(
                "dims: [2] zero", "dims: [5] zero"
            )
        (model_dir / "config.pbtxt").write_text(config + extra)
    # bad_warmup never loads: only a server without strict readiness becomes ready
    server = _server(tmp_path, repository, "--strict-readiness", "false")
    try:
        assert log.read_text().splitlines() == ["1 warmup:zeros", "1 warmup:zeros"]
        client = httpclient.InferenceServerClient(server.url)
        stats = client.get_inference_statistics("counting")["model_stats"][0]
        assert stats["inference_count"] == 0  # warmup is not client traffic
        index = {e["name"]: e for e in client.get_model_repository_index()}
        assert index["bad_warmup"]["state"] == "UNAVAILABLE"
        assert "warmup 'zeros'" in index["bad_warmup"]["reason"]
        assert index["counting"]["state"] == "READY"
    finally:
        stop_server(server)


def _copy_simple(target: Path, versions: list[int], config_extra: str = "") -> None:
    target.mkdir(parents=True)
    for version in versions:
        shutil.copytree(BUNDLED_REPOSITORY / "simple" / "1", target / str(version))
    config = (BUNDLED_REPOSITORY / "simple" / "config.pbtxt").read_text()
    (target / "config.pbtxt").write_text(
        config.replace('"simple"', f'"{target.name}"') + config_extra
    )


def test_version_policies(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    _copy_simple(repository / "latest", [1, 2, 3])
    _copy_simple(repository / "every", [1, 2, 3], "version_policy { all {} }")
    _copy_simple(
        repository / "chosen", [1, 2, 3], "version_policy { specific { versions: [1, 3] } }"
    )
    server = _server(tmp_path, repository)
    try:
        client = httpclient.InferenceServerClient(server.url)
        assert client.get_model_metadata("latest")["versions"] == ["3"]
        assert client.get_model_metadata("every")["versions"] == ["1", "2", "3"]
        assert client.get_model_metadata("chosen")["versions"] == ["1", "3"]
        assert not client.is_model_ready("chosen", "2")
        for version in ("1", "3"):
            response = httpx.post(
                f"{server.base}/v2/models/chosen/versions/{version}/infer", json=_simple_request(2)
            )
            assert response.status_code == 200
            assert response.json()["model_version"] == version
        response = httpx.post(f"{server.base}/v2/models/latest/infer", json=_simple_request(2))
        assert response.json()["model_version"] == "3"
        stats = client.get_inference_statistics("every")["model_stats"]
        assert [s["version"] for s in stats] == ["1", "2", "3"]
    finally:
        stop_server(server)


def test_missing_config_is_auto_completed_and_gpu_kind_is_never_run_on_the_cpu(
    tmp_path: Path,
) -> None:
    repository = tmp_path / "repository"
    (repository / "bare" / "1").mkdir(parents=True)
    shutil.copy(BUNDLED_REPOSITORY / "digits" / "1" / "model.onnx", repository / "bare" / "1")
    _copy_simple(repository / "gpu", [1], "")
    _copy_simple(repository / "auto", [1], "")
    config = (repository / "gpu" / "config.pbtxt").read_text()
    (repository / "gpu" / "config.pbtxt").write_text(config.replace("KIND_CPU", "KIND_GPU"))
    auto = (repository / "auto" / "config.pbtxt").read_text()
    (repository / "auto" / "config.pbtxt").write_text(auto.replace("KIND_CPU", "KIND_AUTO"))
    # This machine has no GPU: the KIND_GPU model fails to load, naming its instance group.
    server = _server(tmp_path, repository, "--strict-readiness", "false")
    try:
        client = httpclient.InferenceServerClient(server.url)
        bare = client.get_model_config("bare")
        assert bare["backend"] == "onnxruntime"
        assert bare["max_batch_size"] == 4
        assert bare["input"][0]["name"] == "input" and bare["input"][0]["dims"] == [1, 8, 8]
        images = np.zeros((2, 1, 8, 8), dtype=np.float32)
        tensor = httpclient.InferInput("input", [2, 1, 8, 8], "FP32")
        tensor.set_data_from_numpy(images)
        assert client.infer("bare", [tensor]).as_numpy("logits").shape == (2, 10)
        index = {e["name"]: e for e in client.get_model_repository_index()}
        assert index["gpu"]["state"] == "UNAVAILABLE"
        assert "gpu: instance_group[0] is KIND_GPU but" in index["gpu"]["reason"]
        response = httpx.post(f"{server.base}/v2/models/gpu/infer", json=_simple_request(1))
        assert response.status_code != 200
        # KIND_AUTO is the CPU where the backend cannot use a GPU.
        response = httpx.post(f"{server.base}/v2/models/auto/infer", json=_simple_request(1))
        assert response.status_code == 200, index["auto"]
    finally:
        stop_server(server)


def test_poll_mode_reloads_a_changed_config(tmp_path: Path) -> None:
    repository = tmp_path / "repository"
    _copy_simple(repository / "polled", [1])
    server = _server(
        tmp_path, repository, "--model-control-mode", "poll", "--repository-poll-secs", "0.2"
    )
    try:
        client = httpclient.InferenceServerClient(server.url)
        assert client.get_model_config("polled")["max_batch_size"] == 8
        config_path = repository / "polled" / "config.pbtxt"
        config_path.write_text(
            config_path.read_text().replace("max_batch_size: 8", "max_batch_size: 4")
        )
        deadline = time.monotonic() + 30
        while client.get_model_config("polled")["max_batch_size"] != 4:
            assert time.monotonic() < deadline, "the changed config was never reloaded"
            time.sleep(0.1)
        _copy_simple(repository / "added", [1])
        while not client.is_model_ready("added"):
            assert time.monotonic() < deadline, "the new model was never loaded"
            time.sleep(0.1)
    finally:
        stop_server(server)


def test_pytorch_model_over_http(tmp_path: Path) -> None:
    import torch  # the test extra installs it

    class AddSub(torch.nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

    model_dir = tmp_path / "repository" / "addsub_pt"
    (model_dir / "1").mkdir(parents=True)
    torch.jit.script(AddSub()).save(str(model_dir / "1" / "model.pt"))
    (model_dir / "config.pbtxt").write_text("""name: "addsub_pt"
platform: "pytorch_libtorch"
max_batch_size: 8
input [{ name: "INPUT__0" data_type: TYPE_FP32 dims: [4] },
       { name: "INPUT__1" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT__0" data_type: TYPE_FP32 dims: [4] },
        { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [4] }]
dynamic_batching {}
""")
    server = _server(tmp_path, tmp_path / "repository")
    try:
        client = httpclient.InferenceServerClient(server.url)
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        b = np.ones((2, 4), dtype=np.float32)
        inputs = []
        for name, array in (("INPUT__0", a), ("INPUT__1", b)):
            tensor = httpclient.InferInput(name, [2, 4], "FP32")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        result = client.infer("addsub_pt", inputs)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), a - b)
    finally:
        stop_server(server)
