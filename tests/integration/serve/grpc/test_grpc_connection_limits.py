"""Connection and stream limits of the native gRPC front end, with tritonclient: a connection
past --grpc-max-connections fails its calls UNAVAILABLE while the others serve, and is
accepted once one closes; calls past --grpc-max-concurrent-streams on one channel wait for
a free stream (the client queues them) and all succeed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, server_on_links


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("grpc_connections")
    limits = ("--grpc-max-connections", "1", "--grpc-max-concurrent-streams", "2")
    # one process: with --workers N each front-end process counts its own connections
    limits += ("--workers", "1")
    with server_on_links(root, [BUNDLED_REPOSITORY / "simple"], *limits) as running:
        yield running


def _infer(client: grpcclient.InferenceServerClient) -> np.ndarray:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(a)
        inputs.append(tensor)
    result = client.infer("simple", inputs, client_timeout=30)
    output: np.ndarray = result.as_numpy("OUTPUT0")
    return output


def test_a_connection_past_the_limit_is_refused_and_the_others_serve(
    server: RunningServer,
) -> None:
    with grpcclient.InferenceServerClient(server.grpc_url) as first:
        assert first.is_server_live()  # holds the one connection allowed
        # a channel of its own: grpc shares one connection between channels alike
        second = grpc.insecure_channel(server.grpc_url, [("grpc.use_local_subchannel_pool", 1)])
        with second as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.ServerLive(pb.ServerLiveRequest(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "--grpc-max-connections" in (refused.value.details() or "")
        np.testing.assert_array_equal(_infer(first), 2 * np.arange(16).reshape(1, 16))
    # The slot is free once the server has seen the first connection close, which may come a
    # moment after the client's close returns (a busy machine): ask again until then.
    deadline = time.monotonic() + 10
    while True:
        with grpcclient.InferenceServerClient(server.grpc_url) as again:
            try:
                assert again.is_server_live()
                return
            except InferenceServerException:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.05)


def test_calls_past_the_stream_limit_wait_for_a_stream_and_succeed(
    server: RunningServer,
) -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    with client, ThreadPoolExecutor(16) as pool:
        outputs = list(pool.map(lambda _: _infer(client), range(64)))
    assert len(outputs) == 64
    for output in outputs:
        np.testing.assert_array_equal(output, 2 * np.arange(16).reshape(1, 16))
