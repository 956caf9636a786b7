"""SIGTERM with gRPC calls in flight: a unary call and a request on an open stream are both
answered, new calls are refused, and the server exits 0 once the client closes its stream."""

from __future__ import annotations

import queue
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.integration.serve.test_server_lifecycle import CONFIG, MODEL
from tests.support.server_process import start_server, stop_server


def _inputs() -> list[grpcclient.InferInput]:
    tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
    return [tensor]


@pytest.mark.parametrize("front_end", ["native", "grpcio"])
def test_sigterm_answers_calls_in_flight(tmp_path: Path, front_end: str) -> None:
    marker = tmp_path / "execute-started"
    model_dir = tmp_path / "repository" / "slow_py"
    (model_dir / "1").mkdir(parents=True)
    # Both requests run in one batch, so the marker says both reached the model: the unary call
    # cannot still be on its way (and be refused as a new call) when the signal arrives.
    one_batch = (
        "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 30000000 }"
    )
    (model_dir / "config.pbtxt").write_text(
        (CONFIG % marker).replace("instance_group", f"{one_batch}\ninstance_group")
    )
    (model_dir / "1" / "model.py").write_text(MODEL)
    server = start_server(
        tmp_path / "repository", tmp_path / "server.log", "--grpc-front-end", front_end
    )
    answers: queue.Queue[tuple[object, object]] = queue.Queue()
    unary: queue.Queue[tuple[object, object]] = queue.Queue()
    try:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            client.start_stream(callback=lambda result, error: answers.put((result, error)))
            client.async_stream_infer("slow_py", _inputs(), request_id="streamed")
            client.async_infer(
                "slow_py", _inputs(), callback=lambda result, error: unary.put((result, error))
            )
            deadline = time.monotonic() + 30
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert marker.exists(), "the requests never reached the model"
            server.process.send_signal(signal.SIGTERM)

            for pending in (answers, unary):
                result, error = pending.get(timeout=60)
                assert error is None, error
                assert isinstance(result, grpcclient.InferResult)
                np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2.0))
            # The server is stopping: a new call is refused, not queued.
            with pytest.raises(InferenceServerException) as info:
                client.infer("slow_py", _inputs(), client_timeout=30)
            assert info.value.status() == "StatusCode.UNAVAILABLE", info.value
            client.stop_stream()
        assert server.process.wait(timeout=60) == 0
    finally:
        stop_server(server)
