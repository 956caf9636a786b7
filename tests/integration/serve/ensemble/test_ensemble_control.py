"""Ensembles in explicit model control: loading one loads its composing models, a bad one
fails to load naming the step, readiness follows the composing models, and a composing model
reloaded with a new config is used by the ensemble at once, over HTTP and gRPC."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

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
from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("ensemble_control")
    rendezvous = root / "rendezvous"
    rendezvous.mkdir()
    models = composing_configs(rendezvous) | good_ensembles() | bad_ensembles()
    repository = write_repository(root, models)
    running = start_server(
        repository,
        root / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "pipeline",
    )
    try:
        yield running
    finally:
        stop_server(running)


def _pipeline(client: Any, module: Any, value: float) -> np.ndarray:
    tensor = module.InferInput("INPUT", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.full((1, 4), value, dtype=np.float32))
    return np.asarray(client.infer("pipeline", [tensor]).as_numpy("OUTPUT"))


def test_loading_an_ensemble_loads_its_composing_models(server: RunningServer) -> None:
    client = httpclient.InferenceServerClient(server.url)
    assert client.is_server_ready()
    assert client.is_model_ready("scale") and client.is_model_ready("offset")
    assert not client.is_model_ready("join")  # used by no loaded ensemble
    np.testing.assert_allclose(_pipeline(client, httpclient, 3), np.full((1, 4), 7))
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        grpc.load_model("diamond")
        assert grpc.is_model_ready("join") and grpc.is_model_ready("branch_a")
        key = grpcclient.InferInput("KEY", [1, 1], "INT32")
        key.set_data_from_numpy(np.array([[3]], dtype=np.int32))
        assert grpc.infer("diamond", [key]).as_numpy("SUM").tolist() == [[330]]


def test_readiness_follows_the_composing_models_and_a_reload_is_used(
    server: RunningServer,
) -> None:
    http = httpclient.InferenceServerClient(server.url)
    http.load_model("pipeline")
    assert http.is_server_ready()
    http.unload_model("offset")
    try:
        assert not http.is_model_ready("pipeline")
        assert not http.is_server_ready()  # strict readiness: a served ensemble cannot serve
        index = {e["name"]: e for e in http.get_model_repository_index()}
        assert index["pipeline"]["state"] == "UNAVAILABLE"
        assert "model 'offset'" in index["pipeline"]["reason"]
        with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
            assert not grpc.is_model_ready("pipeline")
            with pytest.raises(InferenceServerException) as failure:
                _pipeline(grpc, grpcclient, 1)
            assert failure.value.status() == "StatusCode.UNAVAILABLE"
        with pytest.raises(InferenceServerException) as http_failure:
            _pipeline(http, httpclient, 1)
        assert "ensemble_scheduling.step[1] (model 'offset')" in http_failure.value.message()
    finally:
        # reload the composing model with a new config: the ensemble uses it, unreloaded
        config = json.loads(json.dumps(http.get_model_config("scale")))
        config.update(
            name="offset",
            input=[{"name": "A", "data_type": "TYPE_FP32", "dims": [4]}],
            output=[{"name": "B", "data_type": "TYPE_FP32", "dims": [4]}],
            parameters={"OFFSET": {"string_value": "5"}},
        )
        http.load_model("offset", config=json.dumps(config))
    assert http.is_model_ready("pipeline")
    assert http.is_server_ready()
    np.testing.assert_allclose(_pipeline(http, httpclient, 1), np.full((1, 4), 7))


@pytest.mark.parametrize("name", sorted(BAD_REASONS))
def test_a_bad_ensemble_fails_to_load_naming_the_step(server: RunningServer, name: str) -> None:
    http = httpclient.InferenceServerClient(server.url)
    with pytest.raises(InferenceServerException) as failure:
        http.load_model(name)
    assert f"failed to load '{name}'" in failure.value.message()
    assert BAD_REASONS[name] in failure.value.message()
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        with pytest.raises(InferenceServerException) as grpc_failure:
            grpc.load_model(name)
        assert BAD_REASONS[name] in grpc_failure.value.message()
    # the other models keep serving
    assert _pipeline(http, httpclient, 1).shape == (1, 4)


def test_unload_dependents_unloads_the_composing_models(server: RunningServer) -> None:
    http = httpclient.InferenceServerClient(server.url)
    http.load_model("diamond")
    http.load_model("batched")
    with grpcclient.InferenceServerClient(server.grpc_url) as grpc:
        grpc.unload_model("diamond", unload_dependents=True)
        for name in ("diamond", "branch_a", "branch_b", "join"):
            assert not grpc.is_model_ready(name), name
    http.unload_model("batched")  # without: its composing model stays
    assert http.is_model_ready("batched_scale")
    http.unload_model("pipeline", unload_dependents=True)
    assert not http.is_model_ready("scale") and not http.is_model_ready("offset")
    assert http.is_model_ready("batched_scale")  # not one of pipeline's
