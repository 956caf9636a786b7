"""`autotune serve` started with a typical tritonserver command line: two model repositories,
backend settings, thread and memory-pool sizes. It starts and serves the models of both
repositories (tritonclient, HTTP and gRPC), and names each flag without effect in one warning
line. A model name found in two repositories is an error for that model, as in tritonserver."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from common.serve_process import (
    serve_env,
    service_address,
    start_serve_process,
    stop_serve_process,
)
from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import serving

AUTOTUNE = "from tuner.cli import main; main()"  # the `autotune` console script

# flags scripts written for tritonserver pass, that have no effect here, as the log names them
WITHOUT_EFFECT = [
    "--backend-config python,shm-default-byte-size=1048576",
    "--http-thread-count 8",
    "--pinned-memory-pool-byte-size 268435456",
    "--cuda-memory-pool-byte-size 0:67108864",
    "--grpc-infer-allocation-pool-size 16",
]


def _repository(root: Path, *names: str) -> Path:
    """A repository holding the bundled `simple` model under each of `names`."""
    root.mkdir(parents=True)
    for name in names:
        shutil.copytree(BUNDLED_REPOSITORY / "simple", root / name)
        config = root / name / "config.pbtxt"
        config.write_text(config.read_text().replace('"simple"', f'"{name}"'))
    return root


def _inputs(module: object, a: np.ndarray, b: np.ndarray) -> list[object]:
    inputs = []
    for name, value in (("INPUT0", a), ("INPUT1", b)):
        tensor = module.InferInput(name, list(value.shape), "INT32")  # type: ignore[attr-defined]
        tensor.set_data_from_numpy(value)
        inputs.append(tensor)
    return inputs


def test_a_typical_tritonserver_command_line_serves(tmp_path: Path) -> None:
    first = _repository(tmp_path / "first", "simple")
    second = _repository(tmp_path / "second", "simple_copy")
    flags = [
        "--model-repository",
        str(first),
        "--model-repository",
        str(second),
        "--http-port=0",
        "--grpc-port=0",
        "--metrics-port=0",
        "--backend-config=onnxruntime,default-max-batch-size=8",
        "--backend-config",
        "python,shm-default-byte-size=1048576",
        "--http-thread-count",
        "8",
        "--pinned-memory-pool-byte-size=268435456",
        "--cuda-memory-pool-byte-size=0:67108864",
        "--grpc-infer-allocation-pool-size=16",
        "--exit-on-error=true",
        "--strict-readiness=true",
        "--model-control-mode=none",
        "--log-verbose=0",
        "--exit-timeout-secs=10",
        "--grpc-use-ssl=false",
    ]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log_file:  # `autotune serve`, as the console script runs it
        process = subprocess.Popen(
            [sys.executable, "-c", AUTOTUNE, "serve", *flags],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=serve_env(),
        )
    try:
        http_url = service_address(log_path, process, "HTTPService", timeout_s=120)
        http = httpclient.InferenceServerClient(http_url)
        grpc = grpcclient.InferenceServerClient(service_address(log_path, process))
        _wait(http.is_server_ready, "the server never became ready")
        assert grpc.is_server_ready()
        for model in ("simple", "simple_copy"):  # one from each repository
            answer = http.infer(model, _inputs(httpclient, a, b))
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), a + b)
            over_grpc = grpc.infer(model, _inputs(grpcclient, a, b))
            np.testing.assert_array_equal(over_grpc.as_numpy("OUTPUT1"), a - b)
        index = {entry["name"] for entry in http.get_model_repository_index()}
        assert index == {"simple", "simple_copy"}
    finally:
        assert stop_serve_process(process) == 0
    log = log_path.read_text()
    warnings = [line for line in log.splitlines() if ": no effect here (" in line]
    for flag in WITHOUT_EFFECT:
        assert sum(f" {flag}: no effect here (" in line for line in warnings) == 1, flag
    # --grpc-use-ssl=false asks for nothing; default-max-batch-size is honoured
    assert len(warnings) == len(WITHOUT_EFFECT)


def test_a_model_in_two_repositories_is_not_served(tmp_path: Path) -> None:
    first = _repository(tmp_path / "first", "simple")
    second = _repository(tmp_path / "second", "simple", "other")
    log = tmp_path / "server.log"
    extra = ["--model-repository", str(second), "--exit-on-error", "false"]
    process, url = start_serve_process(first, log, extra)
    try:
        http = httpclient.InferenceServerClient(url)
        assert http.is_model_ready("other")
        assert not http.is_model_ready("simple")
        assert not http.is_server_ready()  # strict readiness: 'simple' should load
        entries = {entry["name"]: entry for entry in http.get_model_repository_index()}
        assert entries["simple"]["state"] == "UNAVAILABLE"
        assert entries["simple"]["reason"] == "model appears in two or more repositories"
        grpc = grpcclient.InferenceServerClient(service_address(log, process))
        with pytest.raises(InferenceServerException, match="is not ready"):
            grpc.infer("simple", [])
    finally:
        assert stop_serve_process(process) == 0


def test_a_model_in_two_repositories_stops_a_server_that_exits_on_error(tmp_path: Path) -> None:
    first = _repository(tmp_path / "first", "simple")
    second = _repository(tmp_path / "second", "simple")
    command = [sys.executable, "-m", "serve", "--model-repository", str(first)]
    command += ["--model-repository", str(second), "--http-port", "0", "--grpc-port", "0"]
    command += ["--metrics-port", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "model appears in two or more repositories" in result.stderr
    assert "Started HTTPService" not in result.stderr


def test_explicit_loads_find_a_model_in_any_repository(tmp_path: Path) -> None:
    first = _repository(tmp_path / "first", "simple")
    second = _repository(tmp_path / "second", "simple_copy")
    extra = ["--model-repository", str(second), "--model-control-mode", "explicit"]
    with serving(first, tmp_path / "server.log", *extra) as server:
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        grpc.load_model("simple_copy")
        assert grpc.is_model_ready("simple_copy")
        assert not grpc.is_model_ready("simple")
        grpc.unload_model("simple_copy")
        assert not grpc.is_model_ready("simple_copy")


def test_polling_follows_a_model_appearing_in_a_second_repository(tmp_path: Path) -> None:
    first = _repository(tmp_path / "first", "simple")
    second = _repository(tmp_path / "second", "other")
    extra = ["--model-repository", str(second), "--model-control-mode", "poll"]
    extra += ["--repository-poll-secs", "0.2", "--strict-readiness", "false"]
    with serving(first, tmp_path / "server.log", *extra) as server:
        http = httpclient.InferenceServerClient(server.url)
        assert http.is_model_ready("simple") and http.is_model_ready("other")
        shutil.copytree(first / "simple", second / "simple")  # now in two repositories
        _wait(lambda: not http.is_model_ready("simple"), "the duplicate was never unloaded")
        entries = {entry["name"]: entry for entry in http.get_model_repository_index()}
        assert entries["simple"]["reason"] == "model appears in two or more repositories"
        assert http.is_model_ready("other")
        shutil.rmtree(second / "simple")  # unique again
        _wait(lambda: http.is_model_ready("simple"), "the model was never loaded again")


def _wait(condition: Callable[[], bool], failure: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.1)


@pytest.mark.parametrize("allow", ["true", "false"])
def test_allow_cpu_metrics_turns_the_nv_cpu_metrics_on_and_off(tmp_path: Path, allow: str) -> None:
    repository = _repository(tmp_path / "repository", "simple")
    with serving(repository, tmp_path / "server.log", "--allow-cpu-metrics", allow) as server:
        text = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10).text
    assert ("nv_cpu_utilization" in text) is (allow == "true")
    assert "nv_inference_request_success" in text


def test_model_config_name_picks_a_models_custom_config(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "repository", "simple", "plain")
    (repository / "simple" / "configs").mkdir()
    custom = (repository / "simple" / "config.pbtxt").read_text()
    custom = custom.replace("max_batch_size: 8", "max_batch_size: 4")
    (repository / "simple" / "configs" / "small.pbtxt").write_text(custom)
    with serving(repository, tmp_path / "server.log", "--model-config-name", "small") as server:
        http = httpclient.InferenceServerClient(server.url)
        assert http.get_model_config("simple")["max_batch_size"] == 4  # configs/small.pbtxt
        assert http.get_model_config("plain")["max_batch_size"] == 8  # no such file: config.pbtxt


def test_a_model_config_name_with_a_space_is_a_usage_error(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "repository", "simple")
    command = [sys.executable, "-m", "serve", "--model-repository", str(repository)]
    command += ["--model-config-name", "h 100", "--http-port", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--model-config-name 'h 100'" in result.stderr


@pytest.mark.parametrize(
    "flags", [["--disable-auto-complete-config"], ["--strict-model-config", "true"]]
)
def test_without_auto_completion_configs_are_taken_as_written(
    tmp_path: Path, flags: list[str]
) -> None:
    repository = _repository(tmp_path / "repository", "simple", "bare")
    (repository / "bare" / "config.pbtxt").write_text('name: "bare"\nbackend: "onnxruntime"\n')
    extra = [*flags, "--exit-on-error", "false", "--strict-readiness", "false"]
    with serving(repository, tmp_path / "server.log", *extra) as server:
        http = httpclient.InferenceServerClient(server.url)
        assert http.is_model_ready("simple")  # its config lists everything
        entries = {entry["name"]: entry for entry in http.get_model_repository_index()}
        assert entries["bare"]["state"] == "UNAVAILABLE"
        assert "input: none listed, and auto-completion is disabled" in entries["bare"]["reason"]


def test_with_auto_completion_a_bare_config_is_completed(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "repository", "bare")
    (repository / "bare" / "config.pbtxt").write_text('name: "bare"\nbackend: "onnxruntime"\n')
    with serving(repository, tmp_path / "server.log") as server:
        config = httpclient.InferenceServerClient(server.url).get_model_config("bare")
        assert [tensor["name"] for tensor in config["input"]] == ["INPUT0", "INPUT1"]


@pytest.mark.parametrize(("setting", "batch"), [("default-max-batch-size=16", 16), ("", 4)])
def test_backend_config_default_max_batch_size_completes_a_bare_config(
    tmp_path: Path, setting: str, batch: int
) -> None:
    repository = _repository(tmp_path / "repository", "bare")
    (repository / "bare" / "config.pbtxt").write_text('name: "bare"\nbackend: "onnxruntime"\n')
    extra = ["--backend-config", f"onnxruntime,{setting}"] if setting else []
    with serving(repository, tmp_path / "server.log", *extra) as server:
        config = httpclient.InferenceServerClient(server.url).get_model_config("bare")
    assert config["max_batch_size"] == batch


def test_a_default_max_batch_size_of_0_leaves_batching_off(tmp_path: Path) -> None:
    repository = _repository(tmp_path / "repository", "bare")
    (repository / "bare" / "config.pbtxt").write_text('name: "bare"\nbackend: "onnxruntime"\n')
    extra = ["--backend-config", "default-max-batch-size=0"]
    with serving(repository, tmp_path / "server.log", *extra) as server:
        config = httpclient.InferenceServerClient(server.url).get_model_config("bare")
    assert config.get("max_batch_size", 0) == 0
    assert config["input"][0]["dims"] == [-1, 16]  # the batch dimension is the model's


FLAKY_MODEL = """
import pathlib

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        tried = pathlib.Path(args["model_repository"]) / "tried"
        if not tried.exists():  # the first load fails, the next succeeds
            tried.write_text("once")
            raise RuntimeError("first load fails on purpose")

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""


@pytest.mark.parametrize(("retries", "ready"), [("1", True), ("0", False)])
def test_model_load_retry_count_tries_a_failed_load_again(
    tmp_path: Path, retries: str, ready: bool
) -> None:
    repository = tmp_path / "repository"
    (repository / "flaky" / "1").mkdir(parents=True)
    (repository / "flaky" / "1" / "model.py").write_text(FLAKY_MODEL)
    (repository / "flaky" / "config.pbtxt").write_text(
        'name: "flaky"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [1] }]\n'
        'output [{ name: "Y" data_type: TYPE_FP32 dims: [1] }]\n'
    )
    extra = ["--model-load-retry-count", retries, "--exit-on-error", "false"]
    extra += ["--strict-readiness", "false"]
    with serving(repository, tmp_path / "server.log", *extra) as server:
        assert httpclient.InferenceServerClient(server.url).is_model_ready("flaky") is ready
        log = server.log()
    assert "first load fails on purpose" in log
