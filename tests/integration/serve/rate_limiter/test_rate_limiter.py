"""The rate limiter over the real protocol: two models whose instances need the one unit of a
shared resource never execute at once under `--rate-limit execution_count` (their executions,
logged by the models themselves, do not overlap), and do overlap with the limiter off, so the
check can fail; a bad --rate-limit-resource is refused naming the flag."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

from tests.support.server_process import refused_start, serving

MODEL = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        import json
        self.log = json.loads(args["model_config"])["parameters"]["LOG"]["string_value"]

    def execute(self, requests):
        began = time.monotonic()
        time.sleep(0.25)
        with open(self.log, "a") as handle:
            handle.write(f"{began} {time.monotonic()}\\n")
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "X" data_type: TYPE_FP32 dims: [1] }}]
output [{{ name: "Y" data_type: TYPE_FP32 dims: [1] }}]
instance_group [{{ count: 2 kind: KIND_CPU
  rate_limiter {{ resources [{{ name: "R" global: true count: 1 }}] priority: {priority} }} }}]
parameters {{ key: "LOG" value {{ string_value: "{log}" }} }}
"""


def _repository(root: Path, log: Path) -> Path:
    repository = root / "repository"
    for name, priority in (("first", 1), ("second", 2)):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(MODEL)
        (repository / name / "config.pbtxt").write_text(
            CONFIG.format(name=name, priority=priority, log=log)
        )
    return repository


def _executions(url: str, log: Path) -> list[tuple[float, float]]:
    """Three requests to each model at once; the executions the models logged, in order."""

    def infer(model: str) -> None:
        client = httpclient.InferenceServerClient(url)
        tensor = httpclient.InferInput("X", [1], "FP32")
        tensor.set_data_from_numpy(np.ones(1, dtype=np.float32))
        client.infer(model, [tensor])
        client.close()

    threads = [
        threading.Thread(target=infer, args=(model,))
        for model in ("first", "second")
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    spans = [tuple(map(float, line.split())) for line in log.read_text().splitlines()]
    return sorted((begin, end) for begin, end in spans)


def _overlaps(spans: list[tuple[float, float]]) -> int:
    return sum(1 for (_, end), (begin, _) in itertools.pairwise(spans) if begin < end)


def test_instances_sharing_one_resource_never_execute_at_once(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    repository = _repository(tmp_path, log)
    limited = ("--rate-limit", "execution_count")
    with serving(repository, tmp_path / "server.log", *limited) as server:
        spans = _executions(server.url, log)
    assert len(spans) == 6
    assert _overlaps(spans) == 0, spans


def test_without_the_limiter_the_same_instances_do_execute_at_once(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    repository = _repository(tmp_path, log)
    with serving(repository, tmp_path / "server.log") as server:
        spans = _executions(server.url, log)
    assert len(spans) == 6
    assert _overlaps(spans) > 0, spans


def test_a_declared_count_lets_that_many_execute_at_once(tmp_path: Path) -> None:
    log = tmp_path / "executions.log"
    repository = _repository(tmp_path, log)
    flags = ("--rate-limit", "execution_count", "--rate-limit-resource", "R:2")
    with serving(repository, tmp_path / "server.log", *flags) as server:
        spans = _executions(server.url, log)
    running = max(sum(1 for b, e in spans if b <= t < e) for t, _ in spans)
    assert running == 2, spans


def test_a_malformed_resource_is_refused_naming_the_flag(tmp_path: Path) -> None:
    result = refused_start(tmp_path, "--rate-limit-resource", "R")
    assert result.returncode == 2
    assert "--rate-limit-resource 'R': expected NAME:COUNT or NAME:COUNT:DEVICE" in result.stderr
