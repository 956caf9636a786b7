"""Triton's python backend API over the real protocol (tritonclient, HTTP and gRPC), as
Triton documents it: the config helpers on initialize's model_config, the BYTES helpers
(byte for byte the framing tritonclient writes), DLPack both ways, request parameters and
timeout reaching the model, response parameters reaching the client, a BLS request's
parameters / timeout / preferred memory / trace reaching the callee and the callee's response
parameters reaching the caller, the Logger's lines in the server's log."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import serialize_byte_tensor as client_serialize

from tests.support.server_process import RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(240)

API_CONFIG = """\
name: "api"
backend: "python"
max_batch_size: 0
input [
  { name: "MODE" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "DATA" data_type: TYPE_STRING dims: [ -1 ] }
]
output [ { name: "OUT" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

ECHO_CONFIG = """\
name: "echo"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

# MODE says what `api` reports, as one JSON document in OUT:
#   config    what the config helpers find in initialize's model_config
#   bytes     DATA through serialize_byte_tensor (hex) and back through deserialize
#   dlpack    DATA's length as an INT64 tensor through DLPack both ways, and where it lives
#   request   the request's parameters() and timeout(); the response carries parameters
#   bls       a BLS call to `echo` with parameters, timeout, preferred memory and this trace
#   log       writes one line of each level with Logger
API_MODEL = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.config_report = {
            "mode_type": pb_utils.get_input_config_by_name(config, "MODE")["data_type"],
            "out_dims": pb_utils.get_output_config_by_name(config, "OUT")["dims"],
            "missing": pb_utils.get_input_config_by_name(config, "NOPE"),
            "decoupled": pb_utils.using_decoupled_model_transaction_policy(config),
            "numpy": pb_utils.triton_string_to_numpy(
                pb_utils.get_output_config_by_name(config, "OUT")["data_type"]
            ).__name__,
        }

    def execute(self, requests):
        responses = []
        for request in requests:
            mode = pb_utils.get_input_tensor_by_name(request, "MODE").as_numpy()[0].decode()
            data = pb_utils.get_input_tensor_by_name(request, "DATA").as_numpy()
            report, parameters = getattr(self, "run_" + mode)(request, data)
            out = pb_utils.Tensor("OUT", np.array([json.dumps(report).encode()], dtype=object))
            responses.append(pb_utils.InferenceResponse([out], parameters=parameters))
        return responses

    def run_config(self, request, data):
        return self.config_report, None

    def run_bytes(self, request, data):
        framed = pb_utils.serialize_byte_tensor(data)
        back = pb_utils.deserialize_bytes_tensor(framed)
        return {
            "framed": framed.hex(),
            "back": [item.decode() for item in back],
            "empty": pb_utils.serialize_byte_tensor(np.array([], dtype=object)).hex(),
            "not_bytes": pb_utils.serialize_byte_tensor(np.zeros(2, np.int32)),
        }, None

    def run_dlpack(self, request, data):
        lengths = pb_utils.Tensor("L", np.array([len(d) for d in data], dtype=np.int64))
        round_trip = pb_utils.Tensor.from_dlpack("R", np.from_dlpack(lengths))
        from_capsule = pb_utils.Tensor.from_dlpack("C", lengths.to_dlpack())
        return {
            "values": round_trip.as_numpy().tolist(),
            "capsule": from_capsule.as_numpy().tolist(),
            "device": list(lengths.__dlpack_device__()),
            "is_cpu": round_trip.is_cpu(),
            "dtype": round_trip.triton_dtype(),
        }, None

    def run_request(self, request, data):
        report = {"parameters": json.loads(request.parameters()), "timeout": request.timeout()}
        return report, {"echoed": data[0].decode(), "flag": True, "count": 3}

    def run_bls(self, request, data):
        call = pb_utils.InferenceRequest(
            model_name="echo",
            requested_output_names=["Y"],
            inputs=[pb_utils.Tensor("X", np.array([1, 2, 3], dtype=np.int32))],
            parameters={"from": "api", "n": 7, "yes": True},
            timeout=5_000_000,
            preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
            trace=request.trace(),
        )
        response = call.exec()
        if response.has_error():
            raise pb_utils.TritonModelException(response.error().message())
        y = pb_utils.get_output_tensor_by_name(response, "Y")
        return {
            "y": y.as_numpy().tolist(),
            "callee_parameters": json.loads(response.parameters()),
            "trace_context": request.trace().get_context(),
        }, None

    def run_log(self, request, data):
        pb_utils.Logger.log_info("api says info")
        pb_utils.Logger.log_warn("api says warn")
        pb_utils.Logger.log_error("api says error")
        pb_utils.Logger.log("api says verbose", pb_utils.Logger.VERBOSE)
        return {}, None
"""

# Answers Y = X * 2 with response parameters telling what its request carried.
ECHO_MODEL = """\
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            seen = json.loads(request.parameters())
            parameters = {"seen": json.dumps(seen, sort_keys=True), "timeout": request.timeout()}
            y = pb_utils.Tensor("Y", x * 2)
            responses.append(pb_utils.InferenceResponse([y], parameters=parameters))
        return responses
"""


def write_repository(root: Path) -> Path:
    repository = root / "models"
    for name, config, model in (("api", API_CONFIG, API_MODEL), ("echo", ECHO_CONFIG, ECHO_MODEL)):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(config)
        (repository / name / "1" / "model.py").write_text(model)
    return repository


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("pb_api")
    running = start_server(write_repository(root), root / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def call(
    server: RunningServer,
    protocol: str,
    mode: str,
    data: list[bytes],
    parameters: dict[str, Any] | None = None,
    timeout_us: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ask `api` for `mode`: its report and the response's parameters."""
    client_module: Any = httpclient if protocol == "http" else grpcclient
    inputs = [
        client_module.InferInput("MODE", [1], "BYTES"),
        client_module.InferInput("DATA", [len(data)], "BYTES"),
    ]
    inputs[0].set_data_from_numpy(np.array([mode.encode()], dtype=object))
    inputs[1].set_data_from_numpy(np.array(data, dtype=object))
    if protocol == "http":
        with httpclient.InferenceServerClient(server.url, network_timeout=60) as client:
            result = client.infer("api", inputs, parameters=parameters, timeout=timeout_us)
        response_parameters = result.get_response().get("parameters", {})
    else:
        with grpcclient.InferenceServerClient(server.grpc_url) as client:
            result = client.infer("api", inputs, parameters=parameters, timeout=timeout_us)
        response_parameters = {
            key: getattr(value, value.WhichOneof("parameter_choice"))
            for key, value in result.get_response().parameters.items()
        }
    report = json.loads(result.as_numpy("OUT")[0])
    return report, response_parameters


PROTOCOLS = ["http", "grpc"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_config_helpers_read_initializes_model_config(server: RunningServer, protocol: str) -> None:
    report, _ = call(server, protocol, "config", [b"x"])
    assert report == {
        "mode_type": "TYPE_STRING",
        "out_dims": [1],
        "missing": None,
        "decoupled": False,
        "numpy": "object_",
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bytes_helpers_frame_as_tritonclient_does(server: RunningServer, protocol: str) -> None:
    data = [b"alpha", b"", "\u00e9t\u00e9".encode(), b"\x00\x01"]
    report, _ = call(server, protocol, "bytes", data)
    expected = client_serialize(np.array(data, dtype=object))
    assert bytes.fromhex(report["framed"]) == expected.item()  # a 0-d array holding bytes
    assert report["back"] == [item.decode() for item in data]
    assert report["empty"] == ""
    assert report["not_bytes"] is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dlpack_both_ways(server: RunningServer, protocol: str) -> None:
    report, _ = call(server, protocol, "dlpack", [b"a", b"bcd"])
    assert report == {
        "values": [1, 3],
        "capsule": [1, 3],
        "device": [1, 0],
        "is_cpu": True,
        "dtype": 9,
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_request_parameters_reach_the_model_and_response_parameters_the_client(
    server: RunningServer, protocol: str
) -> None:
    sent = {"custom": "value", "number": 42, "switch": True}
    report, parameters = call(
        server, protocol, "request", [b"hello"], parameters=sent, timeout_us=3_000_000
    )
    # The timeout is the server's (Triton's request timeout, in us); the rest is the model's.
    assert report == {"parameters": sent, "timeout": 3_000_000}
    assert parameters == {"echoed": "hello", "flag": True, "count": 3}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bls_request_carries_parameters_timeout_and_its_callers_trace(
    server: RunningServer, protocol: str
) -> None:
    report, _ = call(server, protocol, "bls", [b"x"])
    assert report["y"] == [2, 4, 6]
    assert report["callee_parameters"] == {
        "seen": json.dumps({"from": "api", "n": 7, "yes": True}, sort_keys=True),
        "timeout": 5_000_000,
    }
    assert report["trace_context"] is None


def test_logger_lines_reach_the_servers_log(server: RunningServer) -> None:
    call(server, "http", "log", [b"x"])
    log = server.log()
    for level, text in (("I", "info"), ("W", "warn"), ("E", "error"), ("V", "verbose")):
        assert any(
            line.startswith(f"{level} model.py:") and line.endswith(f"] api says {text}")
            for line in log.splitlines()
        ), f"no {level} line for {text!r} in the server's log"
