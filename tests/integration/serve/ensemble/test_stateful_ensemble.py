"""An ensemble with a stateful step is stateful: the sequence parameters of the ensemble's
requests reach its sequence-batched step (the bundled accumulator behind a python `scale`), so
interleaved sequences through the ensemble keep their own running sums, over HTTP and gRPC, and
a request outside a sequence fails naming the step."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.serve.ensemble.repository import (
    ensemble_config,
    python_config,
    step,
    write_repository,
)
from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(300)

F1 = '{ name: "%s" data_type: TYPE_FP32 dims: [ 1 ] }'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("stateful_ensemble")
    models = {
        "scale": python_config("scale", [F1 % "X"], [F1 % "Y"]),  # Y = 2 X
        "scaled_sum": ensemble_config(
            "scaled_sum",
            [F1 % "VALUE"],
            [F1 % "SUM"],
            [
                step("scale", {"X": "VALUE"}, {"Y": "DOUBLED"}),
                step("accumulator", {"INPUT": "DOUBLED"}, {"OUTPUT": "SUM"}),
            ],
        ),
    }
    repository = write_repository(root, models)
    shutil.copytree(BUNDLED_REPOSITORY / "accumulator", repository / "accumulator")
    running = start_server(repository, root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(params=[httpclient, grpcclient], ids=["http", "grpc"])
def client(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[Any]:
    module = request.param
    url = server.url if module is httpclient else server.grpc_url
    made = module.InferenceServerClient(url)
    made.module = module
    try:
        yield made
    finally:
        made.close()


def _sum(
    client: Any, value: float, sequence_id: int, start: bool = False, end: bool = False
) -> float:
    tensor = client.module.InferInput("VALUE", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.array([[value]], dtype=np.float32))
    result = client.infer(
        "scaled_sum", [tensor], sequence_id=sequence_id, sequence_start=start, sequence_end=end
    )
    return float(result.as_numpy("SUM")[0, 0])


def test_interleaved_sequences_through_the_ensemble_keep_their_own_sums(client: Any) -> None:
    base = 100 if client.module is httpclient else 200  # ids apart per protocol
    first, second = base + 1, base + 2
    assert _sum(client, 1, first, start=True) == 2
    assert _sum(client, 10, second, start=True) == 20
    assert _sum(client, 2, first) == 6
    assert _sum(client, 20, second) == 60
    assert _sum(client, 3, first, end=True) == 12
    assert _sum(client, 30, second, end=True) == 120


def test_a_request_outside_a_sequence_fails_naming_the_step(client: Any) -> None:
    with pytest.raises(InferenceServerException) as raised:
        _sum(client, 1, 0)
    message = str(raised.value)
    assert "step[1] (model 'accumulator')" in message
    assert "correlation ID" in message
    base = 300 if client.module is httpclient else 400
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        _sum(client, 1, base)
    assert _sum(client, 4, base + 1, start=True, end=True) == 8  # still serving
