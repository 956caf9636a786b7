"""A model that is not decoupled may answer through its request's response sender, as Triton
allows: one response (the final flag with it or after it), None in its place in what execute
returns, or execute returning None. Misuse gets Triton's words: over the real protocol
(tritonclient, HTTP and gRPC)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

CONFIG = """\
name: "sender"
backend: "python"
max_batch_size: 0
input [ { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

# MODE says how execute answers (OUT: what the model saw, for the modes that answer):
#   final        sender.send(response, FINAL); execute returns None
#   then_final   sender.send(response), then sender.send(flags=FINAL); returns [None]
#   refusals     tries what Triton refuses (FINAL before a response, a second response, a
#                bad flag), answers with the messages it got
#   both         sends one response and returns another
#   nothing      sends nothing and returns None
#   not_a_list   returns a str
#   not_a_response  returns ["x"]
MODEL = """\
import numpy as np
import triton_python_backend_utils as pb_utils

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def answer(text):
    out = pb_utils.Tensor("OUT", np.array([text.encode()], dtype=object))
    return pb_utils.InferenceResponse([out])


def refused(call):
    try:
        call()
    except pb_utils.TritonModelException as exc:
        return str(exc)
    return "not refused"


class TritonPythonModel:
    def execute(self, requests):
        (request,) = requests
        mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
        sender = request.get_response_sender()
        if mode == "final":
            sender.send(answer("sent with the final flag"), flags=FINAL)
            return None
        if mode == "then_final":
            sender.send(answer("sent, final after"))
            sender.send(flags=FINAL)
            return [None]
        if mode == "refusals":
            messages = [refused(lambda: sender.send(flags=FINAL))]
            messages.append(refused(lambda: sender.send(answer("x"), flags=7)))
            sender.send(answer("|".join(messages)))
            messages.append(refused(lambda: sender.send(answer("second"))))
            return [None] if messages[-1] != "not refused" else [answer("|".join(messages))]
        if mode == "both":
            sender.send(answer("sent"))
            return [answer("returned")]
        if mode == "nothing":
            return None
        if mode == "not_a_list":
            return "x"
        return ["x"]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("sender")
    model = root / "models" / "sender"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG)
    (model / "1" / "model.py").write_text(MODEL)
    running = start_server(root / "models", root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def ask(server: RunningServer, protocol: str, mode: str) -> str:
    client_module: Any = httpclient if protocol == "http" else grpcclient
    mode_input = client_module.InferInput("MODE", [1], "BYTES")
    mode_input.set_data_from_numpy(np.array([mode.encode()], dtype=object))
    if protocol == "http":
        with httpclient.InferenceServerClient(server.url, network_timeout=60) as client:
            result = client.infer("sender", [mode_input])
    else:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("sender", [mode_input])
    return str(result.as_numpy("OUT")[0].decode())


PROTOCOLS = ["http", "grpc"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("mode", "expected"),
    [("final", "sent with the final flag"), ("then_final", "sent, final after")],
)
def test_the_one_response_comes_through_the_sender(
    server: RunningServer, protocol: str, mode: str, expected: str
) -> None:
    assert ask(server, protocol, mode) == expected


def test_what_triton_refuses_is_refused_in_its_words(server: RunningServer) -> None:
    messages = ask(server, "http", "refusals").split("|")
    assert messages == [
        "Unable to send response. Non-decoupled model cannot send complete final before "
        "sending a response.",
        "Unable to send response. Unsupported flag provided.",
    ]


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        (
            "both",
            "Unable to send response. Non-decoupled model cannot send more than one response.",
        ),
        ("nothing", "execute sent no response for request 0 and returned None for it"),
        (
            "not_a_list",
            "Failed to process the request(s) for model 'sender_0', message: "
            "TritonModelException: Expected a list in the execute return, found type "
            "'<class 'str'>'.",
        ),
        (
            "not_a_response",
            "Expected an 'InferenceResponse' object in the execute function return list, "
            "found type '<class 'str'>'.",
        ),
    ],
)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_misuse_fails_the_request_and_the_server_keeps_serving(
    server: RunningServer, protocol: str, mode: str, message: str
) -> None:
    with pytest.raises(InferenceServerException) as info:
        ask(server, protocol, mode)
    assert message in str(info.value)
    assert ask(server, protocol, "final") == "sent with the final flag"
