"""Custom metrics from a python model, as Triton's python backend defines them: a model.py
written for Triton makes a counter, a gauge and a histogram (pb_utils.MetricFamily), updates
them in execute, and the server's metrics port shows them next to its own nv_* metrics. A
misuse raises pb_utils.TritonModelException in the model with the server's message, and the
server keeps serving; unloading the model takes its metrics away."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(180)

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "SEEN" data_type: TYPE_FP32 dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

# SEEN: the counter's value after this request. A negative X increments the counter by X,
# which a counter refuses: the request fails with the exception's message.
MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        labels = {"model": args["model_name"]}
        self.requests_family = pb_utils.MetricFamily(
            name="metered_requests",
            description="Requests the model executed",
            kind=pb_utils.MetricFamily.COUNTER,
        )
        self.last_family = pb_utils.MetricFamily(
            name="metered_last_x",
            description="The last X seen",
            kind=pb_utils.MetricFamily.GAUGE,
        )
        self.x_family = pb_utils.MetricFamily(
            name="metered_x",
            description="The X values seen",
            kind=pb_utils.MetricFamily.HISTOGRAM,
        )
        self.requests = self.requests_family.Metric(labels=labels)
        self.last = self.last_family.Metric(labels=labels)
        self.x = self.x_family.Metric(labels=labels, buckets=[1.0, 10.0, 100.0])

    def execute(self, requests):
        responses = []
        for request in requests:
            x = float(pb_utils.get_input_tensor_by_name(request, "X").as_numpy()[0])
            try:
                self.requests.increment(1 if x >= 0 else x)
            except pb_utils.TritonModelException as exc:
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
                continue
            self.last.set(x)
            self.x.observe(x)
            seen = np.array([self.requests.value()], dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SEEN", seen)]))
        return responses
"""

MODELS = ("metered", "metered_too")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("custom_metrics")
    for name in MODELS:
        model = root / "repository" / name
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(CONFIG.format(name=name))
        (model / "1" / "model.py").write_text(MODEL)
    control = ["--model-control-mode", "explicit", "--load-model", "metered"]
    running = start_server(root / "repository", root / "server.log", *control)
    try:
        yield running
    finally:
        stop_server(running)


def _infer(server: RunningServer, model: str, x: float) -> float:
    with httpclient.InferenceServerClient(server.url) as client:
        tensor = httpclient.InferInput("X", [1], "FP32")
        tensor.set_data_from_numpy(np.array([x], dtype=np.float32))
        result = client.infer(model, [tensor])
    return float(result.as_numpy("SEEN")[0])


def _metrics(server: RunningServer) -> list[str]:
    response = httpx.get(f"http://{server.metrics_url}/metrics", timeout=10)
    response.raise_for_status()
    return response.text.splitlines()


def _ours(lines: list[str], model: str) -> list[str]:
    return [line for line in lines if line.startswith("metered_") and f'"{model}"' in line]


def test_counter_gauge_and_histogram_show_in_metrics(server: RunningServer) -> None:
    assert [_infer(server, "metered", x) for x in (5, 50, 500)] == [1.0, 2.0, 3.0]
    lines = _metrics(server)
    assert _ours(lines, "metered") == [
        'metered_requests{model="metered"} 3',
        'metered_last_x{model="metered"} 500',
        'metered_x_bucket{model="metered",le="1"} 0',
        'metered_x_bucket{model="metered",le="10"} 1',
        'metered_x_bucket{model="metered",le="100"} 2',
        'metered_x_bucket{model="metered",le="+Inf"} 3',
        'metered_x_sum{model="metered"} 555',
        'metered_x_count{model="metered"} 3',
    ]
    for header in (
        "# HELP metered_requests Requests the model executed",
        "# TYPE metered_requests counter",
        "# TYPE metered_last_x gauge",
        "# TYPE metered_x histogram",
    ):
        assert header in lines
    assert any(line.startswith('nv_inference_count{model="metered"') for line in lines)


def test_misuse_fails_the_request_with_the_reason_and_the_server_keeps_serving(
    server: RunningServer,
) -> None:
    before = _infer(server, "metered", 1)
    with pytest.raises(InferenceServerException) as caught:
        _infer(server, "metered", -2)
    message = str(caught.value.message())
    assert "Failed to increment metric value" in message
    assert "metered_requests{model='metered'}" in message
    assert "a counter can only be incremented monotonically by non-negative values" in message
    assert _infer(server, "metered", 1) == before + 1
    assert f'metered_requests{{model="metered"}} {int(before) + 1}' in _metrics(server)


def test_unloading_a_model_takes_its_metrics_away(server: RunningServer) -> None:
    with httpclient.InferenceServerClient(server.url) as client:
        client.load_model("metered_too")
        assert _infer(server, "metered_too", 2) == 1.0
        assert 'metered_requests{model="metered_too"} 1' in _metrics(server)
        client.unload_model("metered_too")
    deadline = time.monotonic() + 30  # bounds a failing test; the unload normally has finished
    while _ours(_metrics(server), "metered_too") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _ours(_metrics(server), "metered_too") == []
    assert _ours(_metrics(server), "metered") != []
