"""Ensembles over a real server (model control mode none), through tritonclient over HTTP and
gRPC: a linear pipeline, a diamond whose branches must run at the same time, bad ensembles
UNAVAILABLE with the step named while the rest serve, a failing step failing its request
only, and statistics showing a composing model batching across ensemble requests."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.integration.serve.ensemble.repository import (
    BAD_REASONS,
    bad_ensembles,
    composing_configs,
    good_ensembles,
    write_repository,
)
from tests.support.server_process import SERVE_BROKEN, RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(300)

Client = Any  # tritonclient.http or tritonclient.grpc module


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("ensembles")
    rendezvous = root / "rendezvous"
    rendezvous.mkdir()
    models = composing_configs(rendezvous) | good_ensembles() | bad_ensembles()
    repository = write_repository(root, models)
    running = start_server(
        repository, root / "server.log", "--strict-readiness", "false", *SERVE_BROKEN
    )
    try:
        yield running
    finally:
        stop_server(running)


def _client(module: Client, server: RunningServer) -> Any:
    url = server.url if module is httpclient else server.grpc_url
    return module.InferenceServerClient(url)


def _input(module: Client, name: str, array: np.ndarray) -> Any:
    datatype = "FP32" if array.dtype == np.float32 else "INT32"
    tensor = module.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


BOTH = pytest.mark.parametrize("module", [httpclient, grpcclient], ids=["http", "grpc"])


@BOTH
def test_a_pipeline_returns_each_steps_result(server: RunningServer, module: Client) -> None:
    x = np.array([[1, 2, 3, 4], [-1, 0, 0.5, 8]], dtype=np.float32)
    client = _client(module, server)
    result = client.infer("pipeline", [_input(module, "INPUT", x)])
    np.testing.assert_allclose(result.as_numpy("SCALED"), 2 * x)
    np.testing.assert_allclose(result.as_numpy("OUTPUT"), 2 * x + 1)
    # a requested subset of the outputs
    only = [module.InferRequestedOutput("OUTPUT")]
    result = client.infer("pipeline", [_input(module, "INPUT", x)], outputs=only)
    np.testing.assert_allclose(result.as_numpy("OUTPUT"), 2 * x + 1)
    assert result.as_numpy("SCALED") is None
    # the classification extension on an ensemble output
    top = [module.InferRequestedOutput("OUTPUT", class_count=2)]
    x = np.array([[1, 2, 4, 3]], dtype=np.float32)
    result = client.infer("pipeline", [_input(module, "INPUT", x)], outputs=top)
    classes = [c.decode().split(":") for c in result.as_numpy("OUTPUT").reshape(-1)]
    assert [(float(value), index) for value, index in classes] == [(9.0, "2"), (7.0, "3")]


@BOTH
def test_a_diamonds_branches_run_at_the_same_time(server: RunningServer, module: Client) -> None:
    # Each branch waits for the other to have started: run one after the other, both fail.
    key = 7 if module is httpclient else 8
    client = _client(module, server)
    result = client.infer("diamond", [_input(module, "KEY", np.array([[key]], dtype=np.int32))])
    assert result.as_numpy("SUM").tolist() == [[110 * key]]


def test_metadata_names_the_ensemble_platform(server: RunningServer) -> None:
    metadata = _client(httpclient, server).get_model_metadata("pipeline")
    assert metadata["platform"] == "ensemble"
    assert [t["name"] for t in metadata["inputs"]] == ["INPUT"]
    with _client(grpcclient, server) as client:
        assert client.get_model_metadata("pipeline").platform == "ensemble"


def test_bad_ensembles_are_unavailable_naming_the_step(server: RunningServer) -> None:
    index = {e["name"]: e for e in _client(httpclient, server).get_model_repository_index()}
    for name, reason in BAD_REASONS.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert reason in index[name]["reason"], (name, index[name]["reason"])
    assert index["pipeline"]["state"] == "READY"
    with _client(grpcclient, server) as client:
        entries = {m.name: m for m in client.get_model_repository_index().models}
    assert entries["bad_missing"].state == "UNAVAILABLE"
    assert "composing model is not available" in entries["bad_missing"].reason


@BOTH
def test_a_failing_step_fails_its_request_only(server: RunningServer, module: Client) -> None:
    values = [1.0, 5000.0, 2.0, 3.0]  # 5000 scaled is over the offset model's limit

    def call(value: float) -> Any:
        client = _client(module, server)
        x = np.full((1, 4), value, dtype=np.float32)
        try:
            return client.infer("pipeline", [_input(module, "INPUT", x)]).as_numpy("OUTPUT")
        except InferenceServerException as exc:
            return exc

    with ThreadPoolExecutor(len(values)) as pool:
        answers = list(pool.map(call, values))
    for value, answer in zip(values, answers, strict=True):
        if value == 5000.0:
            assert isinstance(answer, InferenceServerException)
            message = answer.message()
            assert "in ensemble 'pipeline', ensemble_scheduling.step[1] (model 'offset')" in message
            assert "input over 1000" in message
        else:
            np.testing.assert_allclose(answer, np.full((1, 4), 2 * value + 1))


def test_statistics_show_a_composing_model_batching_across_requests(
    server: RunningServer,
) -> None:
    count = 8

    def call(i: int) -> np.ndarray:
        module = httpclient if i % 2 else grpcclient
        x = np.full((1, 4), i, dtype=np.float32)
        result = _client(module, server).infer("batched", [_input(module, "INPUT", x)])
        return np.asarray(result.as_numpy("OUTPUT"))

    with ThreadPoolExecutor(count) as pool:
        outputs = list(pool.map(call, range(count)))
    for i, output in enumerate(outputs):
        np.testing.assert_allclose(output, np.full((1, 4), 2 * i))
    stats = _client(httpclient, server).get_inference_statistics()["model_stats"]
    by_name = {s["name"]: s for s in stats}
    step = by_name["batched_scale"]
    assert step["inference_count"] == count
    assert step["execution_count"] < step["inference_count"]
    assert max(b["batch_size"] for b in step["batch_stats"]) > 1
    ensemble = by_name["batched"]
    assert ensemble["inference_stats"]["success"]["count"] == count
    assert ensemble["inference_stats"]["fail"]["count"] == 0
    assert ensemble["inference_count"] == count
    assert ensemble["execution_count"] == count
    assert ensemble["inference_stats"]["compute_infer"]["ns"] > 0  # its step's compute time
    with _client(grpcclient, server) as client:
        grpc_stats = client.get_inference_statistics("batched").model_stats[0]
    assert grpc_stats.inference_stats.success.count == count


def test_metrics_cover_ensembles_and_their_steps(server: RunningServer) -> None:
    _client(httpclient, server).infer(
        "pipeline", [_input(httpclient, "INPUT", np.ones((1, 4), dtype=np.float32))]
    )
    text = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    assert 'nv_inference_request_success{model="pipeline",version="1"}' in text
    assert 'nv_inference_request_success{model="scale",version="1"}' in text
