"""Tuning on Triton itself (tritonserver 2.51, python backend, installed by
scripts/install_triton_peer.sh): `--server tritonserver` measures every trial on a private
tritonserver and writes the winner back for a fresh tritonserver to serve; `--server-url`
tunes a running tritonserver and leaves its model loaded as it was, also when interrupted; a
candidate Triton refuses to load is a pruned trial with Triton's message."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psutil
import tritonclient.http as httpclient

from serve.config.model_config import read_config_file
from tests.support.metrics_endpoint import metrics_endpoint
from tests.support.triton_peer import running_tritonserver, tritonserver_path

# Few, short trials: the point is where they are measured, not how well they search.
SHORT = [
    "--latency-p95",
    "50ms",
    "-m",
    "add_sub_py",
    "--measurement-interval",
    "200",
    "--remeasure-top",
    "0",
]

# A python model whose second instance refuses to start: Triton refuses any candidate with
# more than one instance, with this model's message.
REFUSING_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        if not args["model_instance_name"].endswith("_0"):
            raise ValueError("this model refuses a second instance")

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
                )
            )
        return responses
"""


def _tune(cwd: Path, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tuner", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "COLUMNS": "200"},
    )


def _tune_on_triton(
    cwd: Path, repository: Path, reports: Path, *more: str
) -> subprocess.CompletedProcess[str]:
    """Three short trials of add_sub_py on a private tritonserver 2.51."""
    return _tune(
        cwd,
        *SHORT,
        "--trials",
        "3",
        "--model-repository",
        str(repository),
        "--report-dir",
        str(reports),
        "--server",
        "tritonserver",
        "--tritonserver",
        str(tritonserver_path()),
        *more,
    )


def _no_tritonserver_under(folder: Path) -> list[str]:
    left = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if "tritonserver" in cmdline and str(folder) in cmdline:
            left.append(cmdline)
    return left


def _infer(url: str, model: str) -> None:
    client = httpclient.InferenceServerClient(url)
    a = np.arange(16, dtype=np.float32).reshape(1, 16)
    inputs = [httpclient.InferInput(n, [1, 16], "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    result = client.infer(model, inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 1)
    client.close()


def test_tuning_on_a_private_tritonserver_writes_a_config_triton_serves(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("add_sub_py")
    reports = tmp_path / "reports"
    run = _tune_on_triton(tmp_path, repository, reports)
    assert run.returncode == 0, run.stdout + run.stderr
    summary = json.loads((reports / "add_sub_py" / "summary.json").read_text())
    assert summary["server"]["name"] == "triton"
    assert summary["server"]["version"] == "2.51.0"
    assert "measured on triton 2.51.0 (private" in run.stdout + run.stderr
    assert list((reports / "add_sub_py").glob("tritonserver-*.log"))
    assert "triton 2.51.0" in (reports / "report.html").read_text()
    # The winner written back, or the config kept as written when that won.
    read_config_file(repository / "add_sub_py" / "config.pbtxt")
    assert bool(summary["changes"]) == bool(summary["written"])
    assert not _no_tritonserver_under(repository)
    with running_tritonserver(repository, tmp_path / "fresh.log", "--load-model", "*") as fresh:
        assert _model_state(fresh.http, "add_sub_py")[0]
        _infer(fresh.http, "add_sub_py")
    fresh_log = (tmp_path / "fresh.log").read_text()
    assert "successfully loaded 'add_sub_py'" in fresh_log
    assert "UNAVAILABLE" not in fresh_log


def test_a_candidate_triton_refuses_is_pruned_with_its_message(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("add_sub_py")
    (repository / "add_sub_py" / "1" / "model.py").write_text(REFUSING_MODEL)
    reports = tmp_path / "reports"
    run = _tune_on_triton(tmp_path, repository, reports, "--dry-run")
    assert run.returncode == 0, run.stdout + run.stderr
    trials = json.loads((reports / "add_sub_py" / "summary.json").read_text())["trials"]
    refused = [t for t in trials if "refuses a second instance" in t["outcome"]["message"]]
    assert refused, trials
    assert all(t["outcome"]["status"] == "pruned" for t in refused)
    assert all("the server refused the config" in t["outcome"]["message"] for t in refused)


def _model_state(url: str, model: str) -> tuple[bool, dict[str, object]]:
    client = httpclient.InferenceServerClient(url)
    try:
        return client.is_model_ready(model), client.get_model_config(model)
    finally:
        client.close()


def test_a_remote_tritonserver_is_left_with_its_model_as_it_was(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    """A complete run, then one interrupted (SIGINT) during its trials: both leave the
    model loaded with the config on the server's disk, which neither writes."""
    local = repository_with("add_sub_py")
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(["cp", "-r", str(local / "add_sub_py"), str(served)], check=True)
    on_disk = (served / "add_sub_py" / "config.pbtxt").read_text()
    log = tmp_path / "remote.log"
    with running_tritonserver(served, log, "--load-model", "add_sub_py") as remote:
        before = _model_state(remote.http, "add_sub_py")
        common = [*SHORT, "--model-repository", str(local), "--server-url", remote.http]
        run = _tune(tmp_path, *common, "--trials", "2", "--report-dir", str(tmp_path / "r1"))
        assert run.returncode == 0, run.stdout + run.stderr
        assert "(remote, " in run.stdout + run.stderr
        assert _model_state(remote.http, "add_sub_py") == before

        out = tmp_path / "interrupted.log"
        with out.open("w") as handle:
            interrupted = subprocess.Popen(
                [sys.executable, "-m", "tuner", *common, "--trials", "20"],
                cwd=tmp_path,
                stdout=handle,
                stderr=subprocess.STDOUT,
                env={**os.environ, "COLUMNS": "200"},
            )
        try:
            deadline = time.monotonic() + 120
            while "trial 1 " not in out.read_text():
                assert interrupted.poll() is None, out.read_text()
                assert time.monotonic() < deadline, out.read_text()
                time.sleep(0.1)
            interrupted.send_signal(signal.SIGINT)
            interrupted.wait(timeout=120)
        finally:
            if interrupted.poll() is None:
                interrupted.kill()
                interrupted.wait()
        assert _model_state(remote.http, "add_sub_py") == before, out.read_text()
        _infer(remote.http, "add_sub_py")
    assert (served / "add_sub_py" / "config.pbtxt").read_text() == on_disk
    assert sorted(p.name for p in (served / "add_sub_py").iterdir()) == ["1", "config.pbtxt"]


def test_a_remote_server_reporting_a_gpu_it_cannot_load_on_is_searched_on_its_cpus(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    """The space comes from the server tuned: a remote server whose metrics endpoint reports
    a GPU gets GPU instances in the space, unless a test load with a KIND_GPU instance is
    refused; Triton 2.51 without a GPU refuses it, so the run says why, searches CPU instances
    only, and leaves the model as it was."""
    local = repository_with("add_sub_py")
    config = local / "add_sub_py" / "config.pbtxt"
    config.write_text(config.read_text().replace("KIND_CPU", "KIND_AUTO"))  # its code decides
    served = tmp_path / "served"
    served.mkdir()
    subprocess.run(["cp", "-r", str(local / "add_sub_py"), str(served)], check=True)
    gpu = 'nv_gpu_memory_total_bytes{gpu_uuid="GPU-5e1f"} 85899345920\n'
    log = tmp_path / "remote.log"
    with (
        running_tritonserver(served, log, "--load-model", "add_sub_py") as remote,
        metrics_endpoint(gpu) as metrics,
    ):
        before = _model_state(remote.http, "add_sub_py")
        reports = tmp_path / "reports"
        run = _tune(
            tmp_path,
            *SHORT,
            "--trials",
            "2",
            "--model-repository",
            str(local),
            "--report-dir",
            str(reports),
            "--server-url",
            remote.http,
            "--server-metrics-url",
            metrics.url,
        )
        output = run.stdout + run.stderr
        assert run.returncode == 0, output
        assert "no GPU instances: the server refused a KIND_GPU load" in output
        assert "but no GPUs are available" in output  # Triton's own reason
        assert _model_state(remote.http, "add_sub_py") == before
    summary = json.loads((reports / "add_sub_py" / "summary.json").read_text())
    assert summary["platform"]["gpus"] == ["GPU GPU-5e1f (80.0 GiB)"]
    assert not any("KIND_GPU" in line for line in summary["space"])
    # no trial was spent on a GPU candidate the server refuses (the pruner may cut others)
    outcomes = [t["outcome"] for t in summary["trials"] if t["outcome"]]
    assert outcomes and not any("refused" in o["message"] for o in outcomes)
