"""The server flags make one choice of target, or are refused naming the clash."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.run_schema import RunSummary, ServerInfo
from tuner.server_target import ServerChoice, ServerChoiceError


def test_no_flag_is_a_private_autotune_serve() -> None:
    assert ServerChoice.from_flags(None, None, (), None) == ServerChoice("autotune")


def test_tritonserver_takes_its_path_and_flags() -> None:
    choice = ServerChoice.from_flags("tritonserver", Path("/x/tritonserver"), ("--a=1",), None)
    assert (choice.kind, choice.tritonserver, choice.server_args) == (
        "tritonserver",
        Path("/x/tritonserver"),
        ("--a=1",),
    )


def test_a_server_url_is_remote() -> None:
    choice = ServerChoice.from_flags(None, None, (), "10.0.0.1:8000", "10.0.0.1:8001")
    assert choice.remote and choice.url == "10.0.0.1:8000" and choice.grpc_url == "10.0.0.1:8001"


@pytest.mark.parametrize(
    ("server", "path", "args", "url", "named"),
    [
        ("tritonserver", None, (), "h:1", "--server-url"),
        (None, Path("/x"), (), "h:1", "--tritonserver"),
        ("autotune", None, ("--a",), None, "--server-arg"),
        ("onnx", None, (), None, "--server onnx"),
    ],
)
def test_clashing_flags_are_refused(
    server: str | None, path: Path | None, args: tuple[str, ...], url: str | None, named: str
) -> None:
    with pytest.raises(ServerChoiceError, match=named):
        ServerChoice.from_flags(server, path, args, url)


def test_the_server_tuned_survives_the_summary_file() -> None:
    info = ServerInfo("triton", "2.51.0", "127.0.0.1:8000", "remote")
    assert info.describe() == "triton 2.51.0 (remote, 127.0.0.1:8000)"
    assert ServerInfo.from_json(info.to_json()) == info
    assert RunSummary.__dataclass_fields__["server"].default is None
