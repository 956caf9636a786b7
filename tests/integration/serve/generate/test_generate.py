"""The generate extension over real HTTP, as tritonserver 2.51 answers it: `generate` maps a
JSON body to a python model's inputs and parameters and answers one JSON object;
`generate_stream` sends each response of a decoupled model as a server-sent event the moment
the model sends it (the client reads the first before the model may send the second); errors
in Triton's shapes and statuses; an ensemble (the bundled text pipeline) answers through it;
a client that leaves mid-stream cancels the request."""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from tests.support.server_process import RunningServer, serving

MODEL = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        self.gate = config["parameters"]["GATE"]["string_value"]

    def _answer(self, request, step):
        text = pb_utils.get_input_tensor_by_name(request, "text_input").as_numpy()
        word = text.reshape(-1)[0].decode()
        tokens = pb_utils.get_input_tensor_by_name(request, "max_tokens")
        count = int(tokens.as_numpy().reshape(-1)[0]) if tokens is not None else 0
        params = json.loads(request.parameters())
        output = f"{word}:{step}:{count}:{params.get('temperature', '-')}"
        return pb_utils.InferenceResponse([
            pb_utils.Tensor("text_output", np.array([output.encode()], dtype=object)),
            pb_utils.Tensor("count", np.array([count, step], dtype=np.int32)),
        ])

    def execute(self, requests):
        if not self.decoupled:
            return [self._answer(request, 0) for request in requests]
        for request in requests:
            sender = request.get_response_sender()
            sender.send(self._answer(request, 1))
            deadline = time.monotonic() + 10
            while not os.path.exists(self.gate) and time.monotonic() < deadline:
                if request.is_cancelled():
                    with open(self.gate + ".cancelled", "w"):
                        pass
                    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                    break
                time.sleep(0.02)
            else:
                # step 2 once the gate opened; 3 when nobody opened it (the client never saw
                # the first response in time)
                sender.send(self._answer(request, 2 if os.path.exists(self.gate) else 3))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 0
{policy}
input [{{ name: "text_input" data_type: TYPE_STRING dims: [1] }},
       {{ name: "max_tokens" data_type: TYPE_INT32 dims: [1] optional: true }}]
output [{{ name: "text_output" data_type: TYPE_STRING dims: [1] }},
        {{ name: "count" data_type: TYPE_INT32 dims: [2] }}]
parameters {{ key: "GATE" value {{ string_value: "{gate}" }} }}
"""


@pytest.fixture()
def server(tmp_path: Path) -> RunningServer:
    repository = tmp_path / "repository"
    gate = tmp_path / "gate"
    for name, policy in (("gen", ""), ("gens", "model_transaction_policy { decoupled: true }")):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.py").write_text(MODEL)
        (repository / name / "config.pbtxt").write_text(
            CONFIG.format(name=name, policy=policy, gate=gate)
        )
    with serving(repository, tmp_path / "server.log") as running:
        yield running


def _post(server: RunningServer, path: str, body: object) -> httpx.Response:
    return httpx.post(f"{server.base}/v2/models/{path}", json=body, timeout=30)


def _stream(server: RunningServer, text: str) -> AbstractContextManager[httpx.Response]:
    """A generate_stream request to the decoupled model, its events read as they come."""
    url = f"{server.base}/v2/models/gens/generate_stream"
    return httpx.stream("POST", url, json={"text_input": text}, timeout=30)


def test_generate_maps_the_body_and_answers_one_object(server: RunningServer) -> None:
    body = {"text_input": "hello", "max_tokens": 5, "parameters": {"temperature": 0.5}}
    answer = _post(server, "gen/generate", body)
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.text == (
        '{"count":[5,0],"model_name":"gen","model_version":"1","text_output":"hello:0:5:0.5"}'
    )
    versioned = _post(server, "gen/versions/1/generate", {"text_input": "v"})
    assert versioned.json()["text_output"] == "v:0:0:-"


def test_errors_come_in_tritons_shapes(server: RunningServer) -> None:
    shape = _post(server, "gen/generate", {"text_input": "hi", "max_tokens": [1, 2]})
    assert (shape.status_code, shape.json()) == (
        400,
        {"error": "The schema can not convert input 'max_tokens' to tensor with proper shape"},
    )
    unknown = _post(server, "nope/generate", {"text_input": "x"})
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]
    many = _post(server, "gens/generate", {"text_input": "x"})
    assert (many.status_code, many.json()) == (
        200,
        {
            "error": "generate expects model to produce exactly 1 response, use generate "
            "stream for model that generates various number of responses"
        },
    )


def test_generate_stream_sends_each_response_as_the_model_sends_it(
    server: RunningServer, tmp_path: Path
) -> None:
    with _stream(server, "s") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
        lines = stream.iter_lines()
        first = next(line for line in lines if line)
        # The model holds its second response until the gate opens: the first event is
        # here before the model could send the second.
        assert json.loads(first.removeprefix("data: "))["text_output"] == "s:1:0:-"
        (tmp_path / "gate").touch()
        rest = [line for line in lines if line]
    assert [json.loads(line.removeprefix("data: "))["text_output"] for line in rest] == ["s:2:0:-"]
    single = httpx.post(
        f"{server.base}/v2/models/gen/generate_stream", json={"text_input": "one"}, timeout=30
    )
    assert single.text.count("data: ") == 1 and single.text.endswith("\n\n")


def test_a_client_that_leaves_mid_stream_cancels_the_request(
    server: RunningServer, tmp_path: Path
) -> None:
    with _stream(server, "c") as stream:
        assert next(line for line in stream.iter_lines() if line).startswith("data: ")
    cancelled = tmp_path / "gate.cancelled"
    deadline = time.monotonic() + 20
    while not cancelled.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancelled.exists(), "the model never saw the request cancelled"


def test_an_ensemble_answers_generate(bundled_repository: Path, tmp_path: Path) -> None:
    models = ("text_embedding", "minilm_tokenizer", "minilm_encoder", "minilm_pooling")
    repository = tmp_path / "repository"
    repository.mkdir()
    for model in models:
        (repository / model).symlink_to(bundled_repository / model, target_is_directory=True)
    with serving(repository, tmp_path / "server.log") as running:
        answer = _post(running, "text_embedding/generate", {"TEXT": "a tuned server"})
    assert answer.status_code == 200
    embedding = answer.json()["EMBEDDING"]
    assert len(embedding) == 384 and all(isinstance(x, float) for x in embedding)
