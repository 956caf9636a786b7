"""Scheduling seen through HTTP: batching in the statistics, queue limits, broken configs."""

from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.conftest import RepositoryFactory
from tests.support.server_process import SERVE_BROKEN, RunningServer, start_server, stop_server

SIMPLE_WITH_DELAY = """# from: simple
name: "batched"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [16] },
       { name: "INPUT1" data_type: TYPE_INT32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] },
        { name: "OUTPUT1" data_type: TYPE_INT32 dims: [16] }]
dynamic_batching { max_queue_delay_microseconds: 300000 }
instance_group [{ count: 1 kind: KIND_CPU }]
"""

SLOW_PYTHON_SMALL_QUEUE = """# from: add_sub_py
name: "slow_py"
backend: "python"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] },
       { name: "INPUT1" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] },
        { name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }]
dynamic_batching { max_queue_delay_microseconds: 0 default_queue_policy { max_queue_size: 1 } }
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "EXECUTE_DELAY_MS" value { string_value: "1500" } }
"""

BROKEN = """# from: simple
name: "broken"
platform: "onnxruntime_onnx"
max_batch_size: 4
dynamic_batching { preferred_batch_size: [16] }
"""


@pytest.fixture
def scheduling_server(make_repository: RepositoryFactory, tmp_path: Path):
    repository = make_repository(
        {"batched": SIMPLE_WITH_DELAY, "slow_py": SLOW_PYTHON_SMALL_QUEUE, "broken": BROKEN}
    )
    # "broken" never loads: with strict readiness (the default) the server would never be ready
    running = start_server(
        repository, tmp_path / "server.log", "--strict-readiness", "false", *SERVE_BROKEN
    )
    try:
        yield running
    finally:
        stop_server(running)


def _send(url: str, model: str, value: int, dtype: type = np.int32) -> np.ndarray:
    client = httpclient.InferenceServerClient(url)
    datatype = "INT32" if dtype is np.int32 else "FP32"
    a = np.full((1, 16), value, dtype=dtype)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], datatype)
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)
    result = client.infer(model, inputs, request_id=str(value))
    assert result.get_response()["id"] == str(value)
    return result.as_numpy("OUTPUT0")


def test_concurrent_requests_are_batched(scheduling_server: RunningServer) -> None:
    count = 8
    with cf.ThreadPoolExecutor(count) as pool:
        futures = {v: pool.submit(_send, scheduling_server.url, "batched", v) for v in range(count)}
        results = {v: f.result(timeout=60) for v, f in futures.items()}
    for value, output in results.items():
        np.testing.assert_array_equal(output, np.full((1, 16), 2 * value))
    client = httpclient.InferenceServerClient(scheduling_server.url)
    stats = client.get_inference_statistics("batched")["model_stats"][0]
    assert stats["inference_count"] == count
    assert stats["execution_count"] < count
    assert max(b["batch_size"] for b in stats["batch_stats"]) > 1


def test_queue_over_max_queue_size_is_rejected(scheduling_server: RunningServer) -> None:
    outcomes: list[str] = []
    with cf.ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(_send, scheduling_server.url, "slow_py", v, np.float32) for v in range(4)
        ]
        for future in futures:
            try:
                future.result(timeout=60)
                outcomes.append("ok")
            except InferenceServerException as exc:
                assert "Exceeds maximum queue size" in str(exc)
                outcomes.append("rejected")
    assert "rejected" in outcomes and "ok" in outcomes
    stats = httpclient.InferenceServerClient(scheduling_server.url).get_inference_statistics(
        "slow_py"
    )["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] == outcomes.count("rejected")


def test_queue_full_is_503(scheduling_server: RunningServer) -> None:
    body = {
        "inputs": [
            {"name": n, "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}
            for n in ("INPUT0", "INPUT1")
        ]
    }
    url = f"{scheduling_server.base}/v2/models/slow_py/infer"
    with cf.ThreadPoolExecutor(4) as pool:
        codes = list(
            pool.map(lambda _: httpx.post(url, json=body, timeout=60).status_code, range(4))
        )
    assert 503 in codes and 200 in codes


def test_broken_config_leaves_other_models_serving(scheduling_server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(scheduling_server.url)
    assert client.is_server_ready()  # --strict-readiness false: ready while live
    assert not client.is_model_ready("broken")
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["broken"]["state"] == "UNAVAILABLE"
    assert "preferred_batch_size" in index["broken"]["reason"]
    assert "config.pbtxt" in index["broken"]["reason"]
    assert index["batched"]["state"] == "READY"
    response = httpx.post(f"{scheduling_server.base}/v2/models/broken/infer", json={"inputs": []})
    assert response.status_code == 503
    assert "preferred_batch_size" in response.json()["error"]
    np.testing.assert_array_equal(_send(scheduling_server.url, "batched", 5), np.full((1, 16), 10))
