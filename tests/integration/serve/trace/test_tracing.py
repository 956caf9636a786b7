"""Tracing on a real server through Triton's clients: the trace extension over HTTP and gRPC,
and the trace file it writes (Triton's trace JSON). The file is set at start
(`--trace-config triton,file=...`, as tritonserver since 24.04: never through the API), so the
tests share it and each tells its traces by their request ids."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, start_server, stop_server

HTTP_ORDER = [
    "HTTP_RECV_START",
    "HTTP_RECV_END",
    "REQUEST_START",
    "QUEUE_START",
    "COMPUTE_START",
    "COMPUTE_INPUT_END",
    "COMPUTE_OUTPUT_START",
    "COMPUTE_END",
    "REQUEST_END",
    "HTTP_SEND_START",
    "HTTP_SEND_END",
]
OFF = {"trace_level": ["OFF"]}
CHANGED = ("trace_level", "trace_rate", "trace_count")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """simple and a copy of it named other."""
    root = tmp_path_factory.mktemp("trace")
    repository = root / "repository"
    for name in ("simple", "other"):
        shutil.copytree(BUNDLED_REPOSITORY / "simple", repository / name)
        config = repository / name / "config.pbtxt"
        config.write_text(config.read_text().replace('name: "simple"', f'name: "{name}"'))
    running = start_server(
        repository, root / "server.log", "--trace-config", f"triton,file={root / 'trace.json'}"
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture
def file(server: RunningServer) -> Path:
    """The server's trace file, as its trace settings name it."""
    return Path(httpx.get(f"{server.base}/v2/trace/setting").json()["trace_file"])


@pytest.fixture
def client(server: RunningServer) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(server.url)
    try:
        yield client
    finally:  # the defaults back, and no model overrides: the next test starts clean
        client.update_trace_settings(settings=dict.fromkeys(CHANGED))
        for model in ("simple", "other"):
            client.update_trace_settings(model, {"trace_level": None, "trace_rate": None})


def _infer(client: httpclient.InferenceServerClient, model: str, request_id: str) -> None:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.full((1, 16), 3, dtype=np.int32))
        inputs.append(tensor)
    client.infer(model, inputs, request_id=request_id)


def _traces(file: Path, prefix: str) -> dict[int, dict]:
    """id -> {"header": ..., "stamps": [(name, ns), ...]} from a Triton trace file, for the
    requests whose id starts with `prefix` (the test's own)."""
    traces: dict[int, dict] = {}
    for entry in json.loads(file.read_text()):
        trace = traces.setdefault(entry["id"], {"header": None, "stamps": []})
        if "model_name" in entry:
            trace["header"] = entry
        for stamp in entry.get("timestamps", []):
            trace["stamps"].append((stamp["name"], stamp["ns"]))
    return {
        key: trace
        for key, trace in traces.items()
        if trace["header"] is not None and trace["header"]["request_id"].startswith(prefix)
    }


def test_timestamps_trace_every_request_in_order(
    client: httpclient.InferenceServerClient, file: Path
) -> None:
    settings = {"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}
    answer = client.update_trace_settings(settings=settings)
    assert answer["trace_level"] == ["TIMESTAMPS"] and answer["trace_rate"] == "1"
    assert answer["trace_file"] == str(file)
    for i in range(5):
        _infer(client, "simple", f"r{i}")
    client.update_trace_settings(settings=OFF)  # a replaced setting writes what it collected
    traces = _traces(file, "r")
    assert len(traces) == 5
    assert sorted(t["header"]["request_id"] for t in traces.values()) == [f"r{i}" for i in range(5)]
    for trace in traces.values():
        assert trace["header"]["model_name"] == "simple"
        assert trace["header"]["model_version"] == 1
        names = [name for name, _ in trace["stamps"]]
        assert names == HTTP_ORDER
        stamps = [ns for _, ns in trace["stamps"]]
        assert stamps == sorted(stamps)


def test_rate_and_count_are_respected(client: httpclient.InferenceServerClient, file: Path) -> None:
    client.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "2", "trace_count": "3"}
    )
    for i in range(1, 11):
        _infer(client, "simple", f"c{i}")
    # the third trace spent the count: the file is written without a setting change
    assert client.get_trace_settings()["trace_count"] == "0"
    traces = _traces(file, "c")
    assert sorted(int(t["header"]["request_id"][1:]) for t in traces.values()) == [2, 4, 6]


def test_model_settings_override_the_global_ones(
    client: httpclient.InferenceServerClient, file: Path
) -> None:
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"})
    model = client.update_trace_settings("other", {"trace_level": ["OFF"]})
    assert model["trace_level"] == ["OFF"]
    assert model["trace_file"] == str(file)  # the rest comes from the global settings
    assert client.get_trace_settings("simple")["trace_level"] == ["TIMESTAMPS"]
    _infer(client, "simple", "s1")
    _infer(client, "other", "o1")
    # null clears the model's value back to the global one
    cleared = client.update_trace_settings("other", {"trace_level": None})
    assert cleared["trace_level"] == ["TIMESTAMPS"]
    _infer(client, "other", "o2")
    client.update_trace_settings(settings=OFF)
    traces = {**_traces(file, "o"), **_traces(file, "s")}
    assert sorted(
        (t["header"]["model_name"], t["header"]["request_id"]) for t in traces.values()
    ) == [("other", "o2"), ("simple", "s1")]


def test_bad_settings_are_refused_and_named(server: RunningServer) -> None:
    base = f"{server.base}/v2"
    for body, named in (
        ({"trace_rate": "0"}, "trace_rate"),
        ({"trace_level": ["LOUD"]}, "trace_level"),
        ({"trace_count": "-5"}, "trace_count"),
        ({"tracing": "yes"}, "tracing"),
    ):
        response = httpx.post(f"{base}/trace/setting", json=body)
        assert response.status_code == 400, body
        assert f"'{named}'" in response.json()["error"]
    # the file is chosen at start: naming one is refused, and nothing is written there
    elsewhere = server.log_path.parent / "elsewhere.json"
    refused = httpx.post(f"{base}/trace/setting", json={"trace_file": str(elsewhere)})
    assert refused.status_code == 501
    assert "--trace-config triton,file=PATH" in refused.json()["error"]
    assert not elsewhere.exists()
    missing = httpx.post(f"{base}/models/missing/trace/setting", json={"trace_rate": "2"})
    assert missing.status_code == 404
    assert httpx.get(f"{base}/trace/setting").json()["trace_level"] == ["OFF"]
    assert "trace" in httpx.get(base).json()["extensions"]


def test_trace_setting_over_grpc(
    server: RunningServer, client: httpclient.InferenceServerClient, file: Path
) -> None:
    grpc = grpcclient.InferenceServerClient(server.grpc_url)
    answer = grpc.update_trace_settings(
        settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, as_json=True
    )
    assert answer["settings"]["trace_level"]["value"] == ["TIMESTAMPS"]
    # the gRPC and the HTTP endpoint share one server's settings
    assert client.get_trace_settings()["trace_file"] == str(file)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.full((1, 16), 1, dtype=np.int32))
        inputs.append(tensor)
    for i in range(3):
        grpc.infer("simple", inputs, request_id=f"g{i}")
    grpc.update_trace_settings(settings=OFF)
    traces = _traces(file, "g")
    assert sorted(t["header"]["request_id"] for t in traces.values()) == ["g0", "g1", "g2"]
    for trace in traces.values():
        names = [name for name, _ in trace["stamps"]]
        assert names[0] == "REQUEST_START" or names[0].startswith("GRPC_")
        assert "COMPUTE_START" in names and "REQUEST_END" in names
        assert names.index("GRPC_SEND_START") < names.index("GRPC_SEND_END")
        stamps = [ns for _, ns in trace["stamps"]]
        assert stamps == sorted(stamps)
    with pytest.raises(InferenceServerException) as missing:
        grpc.update_trace_settings("missing", {"trace_rate": "2"})
    assert missing.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as bad:
        grpc.update_trace_settings(settings={"trace_rate": "often"})
    assert bad.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "'trace_rate'" in bad.value.message()

    with pytest.raises(InferenceServerException) as refused:
        grpc.update_trace_settings(settings={"trace_file": str(file) + ".other"})
    assert refused.value.status() == "StatusCode.UNIMPLEMENTED"
