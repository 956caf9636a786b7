"""TraceSetting and LogSettings over gRPC with Triton's own client (a server of their own: the
settings are server-wide)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import server_on_links


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[grpcclient.InferenceServerClient]:
    root = tmp_path_factory.mktemp("grpc_settings")
    with (
        server_on_links(root, [BUNDLED_REPOSITORY / "simple"]) as running,
        grpcclient.InferenceServerClient(running.grpc_url) as client,
    ):
        yield client


def _trace(settings: dict[str, dict[str, list[str]]]) -> dict[str, list[str]]:
    return {key: value["value"] for key, value in settings["settings"].items()}


def test_trace_settings_global_model_and_cleared(client: grpcclient.InferenceServerClient) -> None:
    initial = _trace(client.get_trace_settings(as_json=True))
    assert {"trace_level", "trace_rate", "trace_count"} <= set(initial)
    updated = _trace(client.update_trace_settings(settings={"trace_rate": "5"}, as_json=True))
    assert updated["trace_rate"] == ["5"]

    model = _trace(
        client.update_trace_settings("simple", settings={"trace_rate": "7"}, as_json=True)
    )
    assert model["trace_rate"] == ["7"]
    assert _trace(client.get_trace_settings(as_json=True))["trace_rate"] == ["5"]
    # An empty value list (tritonclient's None) clears the model's value: the global one shows.
    cleared = client.update_trace_settings("simple", settings={"trace_rate": None}, as_json=True)
    assert _trace(cleared)["trace_rate"] == ["5"]

    with pytest.raises(InferenceServerException) as info:
        client.update_trace_settings("no_such_model", settings={"trace_rate": "7"})
    assert str(info.value.status()) == "StatusCode.NOT_FOUND"


def test_log_settings_read_and_update(client: grpcclient.InferenceServerClient) -> None:
    settings = client.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"] == {"bool_param": True}
    assert "uint32_param" in settings["log_verbose_level"]
    updated = client.update_log_settings(
        {"log_verbose_level": 1, "log_warning": False}, as_json=True
    )
    assert updated["settings"]["log_verbose_level"] == {"uint32_param": 1}
    assert updated["settings"]["log_warning"] == {"bool_param": False}

    with pytest.raises(InferenceServerException) as info:
        client.update_log_settings({"no_such_setting": 1})
    assert str(info.value.status()) == "StatusCode.INVALID_ARGUMENT"
    assert "no_such_setting" in info.value.message()
    assert client.is_server_live()
