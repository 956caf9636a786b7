"""The metrics endpoint of a real server: known traffic through tritonclient, then the
counters read back from /metrics equal that traffic and the statistics extension's numbers."""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

WAIT_S = 30.0  # bound of every wait; a test that needs it has already failed

# Fails every request whose INPUT0 sums below zero: a failure inside the model (BACKEND).
JUDGE_CONFIG = """name: "judge_py"
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""
JUDGE_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            if x.sum() < 0:
                error = pb_utils.TritonError("INPUT0 sums below zero")
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]))
        return responses
"""

# Holds its instance until the test creates the release file, so requests sent meanwhile wait
# in the queue; a request's own timeout may shorten the queue policy's (REJECTED on expiry).
GATED_CONFIG = """name: "gated_py"
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [4] }]
dynamic_batching {
  default_queue_policy {
    timeout_action: REJECT default_timeout_microseconds: 60000000 allow_timeout_override: true
  }
}
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "GATE" value { string_value: "%s" } }
"""
GATED_MODEL = """
import json
import pathlib
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        gate = json.loads(args["model_config"])["parameters"]["GATE"]["string_value"]
        self.started = pathlib.Path(gate + ".started")
        self.release = pathlib.Path(gate + ".release")

    def execute(self, requests):
        self.started.touch()
        deadline = time.monotonic() + 30
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x)]) for x in inputs]
"""

Labels = tuple[tuple[str, str], ...]
Scrape = dict[str, dict[Labels, float]]


def _model(root: Path, name: str, config: str, model: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(config)
    (root / name / "1" / "model.py").write_text(model)


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gate") / "gate"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, gate: Path) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("metrics") / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "simple", root / "simple")
    _model(root, "judge_py", JUDGE_CONFIG, JUDGE_MODEL)
    _model(root, "gated_py", GATED_CONFIG % gate, GATED_MODEL)
    running = start_server(root, root.parent / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def scrape(server: RunningServer) -> Scrape:
    response = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {
        family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        for family in text_string_to_metric_families(response.text)
    }


def of(model: str, **extra: str) -> Labels:
    return tuple(sorted({"model": model, "version": "1", **extra}.items()))


def failures(metrics: Scrape, model: str) -> dict[str, float]:
    found = metrics["nv_inference_request_failure"]
    return {reason: found[of(model, reason=reason)] for reason in _REASONS}


_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")


def simple_inputs(rows: int, width: int = 16) -> list[httpclient.InferInput]:
    data = np.arange(rows * width, dtype=np.int32).reshape(rows, width)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, list(data.shape), "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return inputs


def vector_input(value: float) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, dtype=np.float32))
    return [tensor]


def infer_apart(server: RunningServer, model: str, value: float) -> dict[str, object]:
    """One request on a client of its own (tritonclient's HTTP clients are bound to the
    thread that made them), for a worker thread."""
    result = httpclient.InferenceServerClient(server.url).infer(model, vector_input(value))
    return result.get_response()


def until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def assert_agrees_with_statistics(
    metrics: Scrape, client: httpclient.InferenceServerClient, model: str
) -> None:
    """Triton's metrics and its statistics extension count the same things."""
    (stats,) = client.get_inference_statistics(model)["model_stats"]
    inference = stats["inference_stats"]
    labels = of(model)
    assert metrics["nv_inference_request_success"][labels] == inference["success"]["count"]
    assert sum(failures(metrics, model).values()) == inference["fail"]["count"]
    assert metrics["nv_inference_count"][labels] == stats["inference_count"]
    assert metrics["nv_inference_exec_count"][labels] == stats["execution_count"]
    for family, field in [
        ("nv_inference_request_duration_us", "success"),
        ("nv_inference_queue_duration_us", "queue"),
        ("nv_inference_compute_input_duration_us", "compute_input"),
        ("nv_inference_compute_infer_duration_us", "compute_infer"),
        ("nv_inference_compute_output_duration_us", "compute_output"),
    ]:
        assert metrics[family][labels] == inference[field]["ns"] // 1000, family


def test_successes_and_requests_refused_before_the_queue(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    for _ in range(5):
        client.infer("simple", simple_inputs(rows=2))
    for _ in range(3):  # refused while checking the request: never reaches the model
        with pytest.raises(InferenceServerException, match="INPUT0"):
            client.infer("simple", simple_inputs(rows=1, width=8))

    metrics = scrape(server)
    simple = of("simple")
    assert metrics["nv_inference_request_success"][simple] == 5
    # as in Triton, a request refused before it is queued is no model failure
    assert failures(metrics, "simple") == dict.fromkeys(_REASONS, 0)
    assert metrics["nv_inference_count"][simple] == 5 * 2
    assert 1 <= metrics["nv_inference_exec_count"][simple] <= 5
    assert metrics["nv_inference_request_duration_us"][simple] > 0
    assert metrics["nv_inference_compute_infer_duration_us"][simple] > 0
    assert metrics["nv_inference_pending_request_count"][simple] == 0
    assert_agrees_with_statistics(metrics, client, "simple")


def test_a_failure_inside_the_model_is_a_backend_failure(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    client.infer("judge_py", vector_input(1.0))
    for _ in range(2):
        with pytest.raises(InferenceServerException, match="sums below zero"):
            client.infer("judge_py", vector_input(-1.0))

    metrics = scrape(server)
    assert metrics["nv_inference_request_success"][of("judge_py")] == 1
    assert failures(metrics, "judge_py") == {**dict.fromkeys(_REASONS, 0), "BACKEND": 2}
    assert_agrees_with_statistics(metrics, client, "judge_py")


def test_queue_timeouts_are_rejections_and_queued_requests_are_pending(
    server: RunningServer, gate: Path
) -> None:
    started, release = Path(f"{gate}.started"), Path(f"{gate}.release")
    client = httpclient.InferenceServerClient(server.url)
    with cf.ThreadPoolExecutor(2) as pool:
        try:
            held = pool.submit(infer_apart, server, "gated_py", 1.0)
            until(started.exists, "the first request to hold the instance")
            # queued behind it with a 1 ms timeout: rejected by the queue policy
            with pytest.raises(InferenceServerException, match="Request timeout expired"):
                client.infer("gated_py", vector_input(2.0), timeout=1000)
            waiting = pool.submit(infer_apart, server, "gated_py", 3.0)
            pending = of("gated_py")
            until(
                lambda: scrape(server)["nv_inference_pending_request_count"][pending] == 1,
                "the third request to wait in the queue",
            )
            metrics = scrape(server)
            assert metrics["nv_inference_request_success"][pending] == 0
            assert failures(metrics, "gated_py")["REJECTED"] == 1
        finally:
            release.touch()
        held.result(timeout=WAIT_S)
        waiting.result(timeout=WAIT_S)

    metrics = scrape(server)
    assert metrics["nv_inference_pending_request_count"][of("gated_py")] == 0
    assert metrics["nv_inference_request_success"][of("gated_py")] == 2
    assert failures(metrics, "gated_py") == {**dict.fromkeys(_REASONS, 0), "REJECTED": 1}
    assert metrics["nv_inference_queue_duration_us"][of("gated_py")] > 0
    assert_agrees_with_statistics(metrics, client, "gated_py")


def test_cpu_metrics_and_gpu_metrics_only_with_a_gpu(server: RunningServer) -> None:
    metrics = scrape(server)
    assert 0.0 <= metrics["nv_cpu_utilization"][()] <= 1.0
    total = metrics["nv_cpu_memory_total_bytes"][()]
    assert total == psutil.virtual_memory().total
    assert 0 < metrics["nv_cpu_memory_used_bytes"][()] < total
    if importlib.util.find_spec("pynvml") is None:
        assert not [name for name in metrics if name.startswith("nv_gpu_")]


def test_only_metrics_path_is_served(server: RunningServer) -> None:
    base = f"http://{server.metrics_url}"
    assert httpx.get(f"{base}/v2/health/ready", timeout=10).status_code == 404
    assert httpx.post(f"{base}/metrics", timeout=10).status_code == 405


def _listening_ports(server: RunningServer) -> set[int]:
    """The ports the server's processes listen on (with --workers, its front ends listen)."""
    process = psutil.Process(server.process.pid)
    connections = [c for p in (process, *process.children()) for c in p.net_connections(kind="tcp")]
    return {c.laddr.port for c in connections if c.status == psutil.CONN_LISTEN}


def test_metrics_endpoint_listens_beside_http_and_grpc(server: RunningServer) -> None:
    ports = {
        int(url.rpartition(":")[2]) for url in (server.url, server.grpc_url, server.metrics_url)
    }
    assert _listening_ports(server) == ports


def test_allow_metrics_false_serves_no_metrics(tmp_path: Path) -> None:
    root = tmp_path / "repository"
    shutil.copytree(BUNDLED_REPOSITORY / "simple", root / "simple")
    server = start_server(root, tmp_path / "server.log", "--allow-metrics", "false")
    try:
        grpc_port = int(server.grpc_url.rpartition(":")[2])
        assert _listening_ports(server) == {server.port, grpc_port}
        assert "Metrics Service" not in server.log()
        assert httpx.get(f"{server.base}/v2/health/ready", timeout=10).status_code == 200
    finally:
        stop_server(server)
