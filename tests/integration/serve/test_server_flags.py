"""tritonserver's behaviour flags on a real server: --id, --strict-readiness, --exit-on-error,
and the logging extension changing what the server logs."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from common.serve_process import start_serve_process, stop_serve_process
from tests.integration.conftest import RepositoryFactory
from tests.support.server_process import start_server, stop_server

SIMPLE = (
    "# from: simple\n"
    + """name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [16] },
       { name: "INPUT1" data_type: TYPE_INT32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] },
        { name: "OUTPUT1" data_type: TYPE_INT32 dims: [16] }]
"""
)
# a preferred batch size above max_batch_size: the model cannot load
BROKEN = """# from: simple
name: "broken"
platform: "onnxruntime_onnx"
max_batch_size: 4
dynamic_batching { preferred_batch_size: [16] }
"""


@pytest.fixture
def broken_repository(make_repository: RepositoryFactory) -> Path:
    return make_repository({"simple": SIMPLE, "broken": BROKEN})


def test_id_names_the_server_over_http_and_grpc(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    repository = make_repository({"simple": SIMPLE})
    server = start_server(repository, tmp_path / "server.log", "--id", "triton")
    try:
        assert httpclient.InferenceServerClient(server.url).get_server_metadata()["name"] == (
            "triton"
        )
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert grpc.get_server_metadata().name == "triton"
    finally:
        stop_server(server)


def test_strict_readiness_waits_for_every_model(broken_repository: Path, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    # default: strict readiness; --exit-on-error false keeps it serving without 'broken'
    process, url = start_serve_process(broken_repository, log, ["--exit-on-error", "false"])
    try:
        client = httpclient.InferenceServerClient(url)
        assert client.is_server_live()
        assert client.is_model_ready("simple")
        assert not client.is_server_ready()
        assert httpx.get(f"http://{url}/v2/health/ready").status_code == 400
        grpc_url = _logged_grpc_address(log)
        grpc = grpcclient.InferenceServerClient(grpc_url)
        assert grpc.is_server_live() and not grpc.is_server_ready()
        assert "failed to load 'broken'" in log.read_text()
    finally:
        assert stop_serve_process(process) == 0


def test_strict_readiness_follows_explicit_loads(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    repository = make_repository({"simple": SIMPLE, "broken": BROKEN})
    server = start_server(
        repository,
        tmp_path / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
    )
    try:
        client = httpclient.InferenceServerClient(server.url)
        assert client.is_server_ready()  # only what was asked for counts
        with pytest.raises(InferenceServerException, match="failed to load 'broken'"):
            client.load_model("broken")
        assert not client.is_server_ready()
        client.unload_model("broken")  # no longer a model that should be ready
        assert client.is_server_ready()
    finally:
        stop_server(server)


def test_without_strict_readiness_ready_while_live(broken_repository: Path, tmp_path: Path) -> None:
    server = start_server(
        broken_repository,
        tmp_path / "server.log",
        "--strict-readiness",
        "false",
        "--exit-on-error",
        "false",
    )
    try:
        client = httpclient.InferenceServerClient(server.url)
        assert client.is_server_ready()
        assert not client.is_model_ready("broken")
        assert grpcclient.InferenceServerClient(server.grpc_url).is_server_ready()
    finally:
        stop_server(server)


@pytest.mark.parametrize("flags", [[], ["--exit-on-error", "true"]], ids=["default", "true"])
def test_exit_on_error_exits_non_zero_when_a_model_fails(
    broken_repository: Path, flags: list[str]
) -> None:
    """true by default, as tritonserver's."""
    command = [
        sys.executable,
        "-m",
        "serve",
        "--model-repository",
        str(broken_repository),
        "--http-port",
        "0",
        "--grpc-port",
        "0",
        "--metrics-port",
        "0",
        *flags,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "failed to load 'broken'" in result.stderr
    assert "Started HTTPService" not in result.stderr  # it never served


def test_log_settings_change_what_the_server_logs(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    repository = make_repository({"simple": SIMPLE})
    server = start_server(repository, tmp_path / "server.log")
    base = server.base
    moved = tmp_path / "moved.log"
    try:
        assert "logging" in httpx.get(f"{base}/v2").json()["extensions"]
        httpx.get(f"{base}/v2/health/live?before=1")
        answer = httpx.post(f"{base}/v2/logging", json={"log_verbose_level": 1}).json()
        assert answer["log_verbose_level"] == 1
        httpx.get(f"{base}/v2/health/live?after=1")
        client = httpclient.InferenceServerClient(server.url)
        with pytest.raises(InferenceServerException) as refused:  # as tritonserver since 24.04
            client.update_log_settings({"log_file": str(moved)})
        assert "--log-file" in refused.value.message()
        settings = client.update_log_settings({"log_format": "ISO8601"})
        assert settings["log_file"] == "" and settings["log_format"] == "ISO8601"
        httpx.get(f"{base}/v2/models/simple/config")
        bad = httpx.post(f"{base}/v2/logging", json={"log_info": "sometimes"})
        assert bad.status_code == 400 and "'log_info'" in bad.json()["error"]
        grpc = grpcclient.InferenceServerClient(server.grpc_url)
        assert grpc.get_log_settings(as_json=True)["settings"]["log_verbose_level"] == {
            "uint32_param": 1
        }
        with pytest.raises(InferenceServerException) as refused:
            grpc.update_log_settings({"log_file": str(moved)})
        assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
    finally:
        stop_server(server)
    text = server.log()
    assert "HTTP request: GET /v2/health/live" in text  # verbose, after the update
    assert text.count("HTTP request: GET /v2/health/live") == 1  # not before it
    iso = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z D serve\.http: HTTP request: GET /v2/models"
    assert re.search(iso, text), text[-2000:]
    assert not moved.exists()


def test_log_file_flag_sends_the_log_to_the_file(
    make_repository: RepositoryFactory, tmp_path: Path
) -> None:
    repository = make_repository({"simple": SIMPLE})
    log_file = tmp_path / "server-file.log"
    console = tmp_path / "console.log"
    command = [sys.executable, "-m", "serve", "--model-repository", str(repository)]
    command += ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    with console.open("wb") as out:
        process = subprocess.Popen([*command, "--log-file", str(log_file)], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 60
        match = None
        while match is None and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
            text = log_file.read_text() if log_file.exists() else ""
            match = re.search(r"Started HTTPService at ([0-9.]+):(\d+)", text)
        assert match, console.read_text()
        url = f"http://{match.group(1)}:{match.group(2)}"
        assert httpx.get(f"{url}/v2/health/live").status_code == 200
        assert httpx.get(f"{url}/v2/logging").json()["log_file"] == str(log_file)
    finally:
        assert stop_serve_process(process) == 0
    assert "server stopped" in log_file.read_text()
    assert "Started HTTPService" not in console.read_text()


def _logged_grpc_address(log: Path) -> str:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        match = re.search(r"Started GRPCInferenceService at ([0-9.]+):(\d+)", log.read_text())
        if match:
            return f"{match.group(1)}:{match.group(2)}"
        time.sleep(0.05)
    raise AssertionError("the server logged no gRPC endpoint")
