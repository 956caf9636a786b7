"""The response cache over the real protocol (tritonclient HTTP and gRPC): a repeated request
is answered from the cache without running the model and counted as Triton 2.51 counts it
(success and queue, cache_hit; no inference or execution), a miss is counted with its lookup
and insertion, a model that does not enable it and a server without --cache-config never hit,
a hit answers only the outputs asked for, and the nv_cache_* metrics agree."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.integration.conftest import RepositoryFactory
from tests.support.server_process import refused_start, serving

CONFIG = """# from: simple
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{{ name: "INPUT0" data_type: TYPE_INT32 dims: [16] }},
       {{ name: "INPUT1" data_type: TYPE_INT32 dims: [16] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] }},
        {{ name: "OUTPUT1" data_type: TYPE_INT32 dims: [16] }}]
{extra}
"""
CACHE = ("--cache-config", "local,size=1048576")


def _repository(make_repository: RepositoryFactory) -> Path:
    return make_repository(
        {
            "cached": CONFIG.format(name="cached", extra="response_cache { enable: true }"),
            "plain": CONFIG.format(name="plain", extra=""),
        }
    )


def _inputs(module: object, first: int) -> list[object]:
    a = np.arange(first, first + 16, dtype=np.int32).reshape(1, 16)
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]  # type: ignore[attr-defined]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return inputs


def _stats(url: str, model: str) -> dict[str, object]:
    client = httpclient.InferenceServerClient(url)
    try:
        return client.get_inference_statistics(model)["model_stats"][0]
    finally:
        client.close()


@pytest.mark.parametrize(
    "flags", [CACHE, ("--response-cache-byte-size", "1048576")], ids=["cache-config", "deprecated"]
)
def test_a_repeated_request_is_answered_from_the_cache_as_triton_counts_it(
    make_repository: RepositoryFactory, tmp_path: Path, flags: tuple[str, str]
) -> None:
    with serving(_repository(make_repository), tmp_path / "server.log", *flags) as server:
        http = httpclient.InferenceServerClient(server.url)
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        answers = [http.infer("cached", _inputs(httpclient, 0)) for _ in range(2)]
        answers.append(grpc.infer("cached", _inputs(grpcclient, 0)))  # the same key over gRPC
        for answer in answers:
            np.testing.assert_array_equal(
                answer.as_numpy("OUTPUT0"), np.arange(1, 17, dtype=np.int32).reshape(1, 16)
            )
        http.infer("cached", _inputs(httpclient, 100))  # other data: a miss
        only = http.infer(
            "cached", _inputs(httpclient, 0), outputs=[httpclient.InferRequestedOutput("OUTPUT1")]
        )
        assert [o["name"] for o in only.get_response()["outputs"]] == ["OUTPUT1"]
        for _ in range(3):
            http.infer("plain", _inputs(httpclient, 0))

        cached = _stats(server.url, "cached")
        assert (cached["inference_count"], cached["execution_count"]) == (2, 2)
        inference = cached["inference_stats"]
        assert inference["success"]["count"] == 5 and inference["queue"]["count"] == 5
        assert inference["cache_hit"]["count"] == 3 and inference["cache_hit"]["ns"] > 0
        assert inference["cache_miss"]["count"] == 2 and inference["cache_miss"]["ns"] > 0
        assert inference["compute_infer"]["count"] == 2
        plain = _stats(server.url, "plain")["inference_stats"]
        assert plain["cache_hit"]["count"] == 0 and plain["cache_miss"]["count"] == 0

        metrics = httpx.get(f"http://{server.metrics_url}/metrics").text
        assert 'nv_cache_num_hits_per_model{model="cached",version="1"} 3' in metrics
        assert 'nv_cache_num_misses_per_model{model="cached",version="1"} 2' in metrics
        assert 'nv_cache_num_hits_per_model{model="plain",version="1"} 0' in metrics
        assert "nv_cache_num_entries 2" in metrics
        assert "nv_cache_num_lookups 5" in metrics
        http.close()
        grpc.close()


ENSEMBLE = """# from: digits_pipeline
name: "ens"
platform: "ensemble"
max_batch_size: 8
input [{ name: "A" data_type: TYPE_INT32 dims: [16] },
       { name: "B" data_type: TYPE_INT32 dims: [16] }]
output [{ name: "SUM" data_type: TYPE_INT32 dims: [16] }]
ensemble_scheduling { step [{ model_name: "plain" model_version: -1
  input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" }
  output_map { key: "OUTPUT0" value: "SUM" } }] }
response_cache { enable: true }
"""


def test_an_ensemble_that_enables_the_cache_is_answered_without_running_its_steps(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    """As Triton 2.51: a top-level ensemble request hits the cache; its step ran once."""
    repository = make_repository({"plain": CONFIG.format(name="plain", extra=""), "ens": ENSEMBLE})
    with serving(repository, tmp_path / "server.log", *CACHE) as server:
        http = httpclient.InferenceServerClient(server.url)
        for _ in range(3):
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            inputs = [httpclient.InferInput(n, [1, 16], "INT32") for n in ("A", "B")]
            inputs[0].set_data_from_numpy(a)
            inputs[1].set_data_from_numpy(np.ones_like(a))
            np.testing.assert_array_equal(http.infer("ens", inputs).as_numpy("SUM"), a + 1)
        ensemble = _stats(server.url, "ens")["inference_stats"]
        assert ensemble["cache_hit"]["count"] == 2 and ensemble["cache_miss"]["count"] == 1
        assert _stats(server.url, "plain")["execution_count"] == 1
        http.close()


def test_without_cache_config_a_model_that_enables_the_cache_runs_every_request(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    with serving(_repository(make_repository), tmp_path / "server.log") as server:
        http = httpclient.InferenceServerClient(server.url)
        for _ in range(3):
            http.infer("cached", _inputs(httpclient, 0))
        stats = _stats(server.url, "cached")
        assert stats["execution_count"] == 3
        assert stats["inference_stats"]["cache_hit"]["count"] == 0
        assert "nv_cache_num_entries" not in httpx.get(f"http://{server.metrics_url}/metrics").text
        http.close()


def test_a_cache_config_that_is_not_tritons_is_refused_naming_the_flag(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    result = refused_start(tmp_path, "--cache-config", "redis,host=127.0.0.1")
    assert result.returncode == 2
    assert "--cache-config 'redis,host=127.0.0.1': cache 'redis' is not available here" in (
        result.stderr
    )
