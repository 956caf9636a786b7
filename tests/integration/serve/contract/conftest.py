"""The contract suite's client: each test runs once per transport (tritonclient.http,
tritonclient.grpc, tritonclient.grpc.aio) against the module's `server` (the session's server on
the bundled models unless a module brings its own)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BUNDLED_REPOSITORY
from tests.integration.serve.contract.clients import TRANSPORTS, ContractClient, open_client
from tests.support.models import write_echo_bytes
from tests.support.server_process import RunningServer, start_server, stop_server


@pytest.fixture(scope="module", params=TRANSPORTS)
def client(request: pytest.FixtureRequest, server: RunningServer) -> Iterator[ContractClient]:
    opened = open_client(request.param, server.url, lambda: server.grpc_url)
    try:
        yield opened
    finally:
        opened.close()


# digits without batching: one image in, one [1, 10] row of logits out.
DIGITS_FLAT_CONFIG = """\
name: "digits_flat"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "input" data_type: TYPE_FP32 dims: [ 1, 1, 8, 8 ] } ]
output [ { name: "logits" data_type: TYPE_FP32 dims: [ 1, 10 ] label_filename: "labels.txt" } ]
"""

EXPLICIT_LOADED = ("simple", "echo_bytes", "digits_flat")
# a copy of simple per transport, not loaded: each transport's load / unload test has its own
UNLOADED_COPIES = {transport: f"other_{transport}" for transport in TRANSPORTS}


def build_explicit_repository(root: Path) -> Path:
    """simple, UNLOADED_COPIES of it, a BYTES echo model (python backend), digits without
    batching, and digits whose config names a labels.txt it lacks."""
    repository = root / "repository"
    simple = BUNDLED_REPOSITORY / "simple"
    shutil.copytree(simple, repository / "simple")
    for copy in UNLOADED_COPIES.values():
        shutil.copytree(simple / "1", repository / copy / "1")
        config = (simple / "config.pbtxt").read_text().replace('"simple"', f'"{copy}"')
        (repository / copy / "config.pbtxt").write_text(config)
    write_echo_bytes(repository)
    digits = BUNDLED_REPOSITORY / "digits"
    flat = repository / "digits_flat"
    shutil.copytree(digits / "1", flat / "1")
    shutil.copy(digits / "labels.txt", flat / "labels.txt")
    (flat / "config.pbtxt").write_text(DIGITS_FLAT_CONFIG)
    unlabelled = repository / "digits_unlabelled"
    shutil.copytree(digits / "1", unlabelled / "1")
    config = (digits / "config.pbtxt").read_text().replace('"digits"', '"digits_unlabelled"')
    (unlabelled / "config.pbtxt").write_text(config)
    return repository


@pytest.fixture(scope="session")
def explicit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server in explicit model control mode on build_explicit_repository, with
    EXPLICIT_LOADED loaded; the modules that use it leave it as they found it."""
    root = tmp_path_factory.mktemp("contract-explicit")
    control = ["--model-control-mode", "explicit"]
    for name in EXPLICIT_LOADED:
        control += ["--load-model", name]
    running = start_server(build_explicit_repository(root), root / "server.log", *control)
    try:
        yield running
    finally:
        stop_server(running)
