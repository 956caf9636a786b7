"""EXECUTION_ENV_PATH on a real server: a python model imports a package that exists only in
its own environment (a folder, or a conda-pack style tar.gz the server unpacks), and that
environment's packages come before the server's; without the parameter the model fails to load
and the repository index says why."""

from __future__ import annotations

import hashlib
import shutil
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from serve.backends.python.environment import default_cache
from tests.support.python_envs import RUNNING_PYTHON, make_env, pack
from tests.support.server_process import SERVE_BROKEN, RunningServer, start_server, stop_server

pytestmark = pytest.mark.timeout(180)

OTHER_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor - 1}"

CONFIG = """\
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "VERSION" data_type: TYPE_STRING dims: [ 1 ] }},
  {{ name: "CLICK" data_type: TYPE_STRING dims: [ 1 ] }}
]
"""

PARAMETER = """\
parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{value}" }} }}
"""

# VERSION: the env-only package's version; CLICK: which `click` the model got (the server has
# one too; the environment's must win).
MODEL = """\
import click
import numpy as np
import triton_python_backend_utils as pb_utils

import {package}


class TritonPythonModel:
    def execute(self, requests):
        version = np.array([{package}.VERSION.encode()], dtype=np.object_)
        shadow = getattr(click, "VERSION", "the server's click").encode()
        click_out = np.array([shadow], dtype=np.object_)
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("VERSION", version),
                    pb_utils.Tensor("CLICK", click_out),
                ]
            )
            for _ in requests
        ]
"""


@dataclass
class Served:
    server: RunningServer
    package: str
    version: str


def write_model(repository: Path, name: str, package: str, env_value: str | None) -> Path:
    model = repository / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(MODEL.format(package=package))
    config = CONFIG.format(name=name)
    if env_value is not None:
        config += PARAMETER.format(value=env_value)
    (model / "config.pbtxt").write_text(config)
    return model


def build_env(root: Path, package: str, version: str) -> Path:
    make_env(root, package, version)
    click = next(root.glob("lib/python*/site-packages")) / "click"
    click.mkdir()
    (click / "__init__.py").write_text("VERSION = 'click from the environment'\n")
    return root


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("execution_env")
    repository = root / "repository"
    # A name and version no other run shares: the archive (and its cache folder) is this run's.
    token = uuid.uuid4().hex[:12]
    package, version = f"only_in_env_{token}", f"1.{token}"
    folder_model = write_model(repository, "env_folder", package, "$$TRITON_MODEL_DIRECTORY/env")
    build_env(folder_model / "env", package, version)
    archive_model = write_model(
        repository, "env_archive", package, "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
    )
    archive = pack(build_env(root / "packed", package, version), archive_model / "env.tar.gz")
    write_model(repository, "no_env", package, None)
    other_python = write_model(
        repository, "env_other_python", package, "$$TRITON_MODEL_DIRECTORY/env"
    )
    make_env(other_python / "env", package, version, python=OTHER_PYTHON)
    cached = default_cache() / hashlib.sha256(archive.read_bytes()).hexdigest()
    running = start_server(
        repository, root / "server.log", "--strict-readiness", "false", *SERVE_BROKEN
    )
    try:
        yield Served(running, package, version)
    finally:
        stop_server(running)
        shutil.rmtree(cached, ignore_errors=True)


def infer(
    client: httpclient.InferenceServerClient | grpcclient.InferenceServerClient, model: str
) -> Any:
    module = httpclient if isinstance(client, httpclient.InferenceServerClient) else grpcclient
    request = module.InferInput("IN", [1], "INT32")
    request.set_data_from_numpy(np.array([1], dtype=np.int32))
    return client.infer(model, [request])


@pytest.mark.parametrize("model", ["env_folder", "env_archive"])
def test_the_model_imports_its_environment_packages_over_http(served: Served, model: str) -> None:
    client = httpclient.InferenceServerClient(served.server.url)
    try:
        result = infer(client, model)
    finally:
        client.close()
    assert result.as_numpy("VERSION").tolist() == [served.version.encode()]
    assert result.as_numpy("CLICK").tolist() == [b"click from the environment"]


@pytest.mark.parametrize("model", ["env_folder", "env_archive"])
def test_the_model_imports_its_environment_packages_over_grpc(served: Served, model: str) -> None:
    client = grpcclient.InferenceServerClient(served.server.grpc_url)
    try:
        result = infer(client, model)
    finally:
        client.close()
    assert result.as_numpy("VERSION").tolist() == [served.version.encode()]


def test_without_the_parameter_the_import_fails_and_the_index_says_so(served: Served) -> None:
    client = httpclient.InferenceServerClient(served.server.url)
    try:
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert not client.is_model_ready("no_env")
        assert client.is_model_ready("env_folder") and client.is_model_ready("env_archive")
    finally:
        client.close()
    assert index["no_env"]["state"] == "UNAVAILABLE"
    reason = index["no_env"]["reason"]
    assert "ModuleNotFoundError" in reason
    assert f"No module named '{served.package}'" in reason


def test_an_environment_for_another_python_leaves_the_model_unavailable(served: Served) -> None:
    client = httpclient.InferenceServerClient(served.server.url)
    try:
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert not client.is_model_ready("env_other_python")
    finally:
        client.close()
    entry = index["env_other_python"]
    assert entry["state"] == "UNAVAILABLE"
    assert "env_other_python: parameters['EXECUTION_ENV_PATH']" in entry["reason"]
    assert f"an environment for Python {OTHER_PYTHON}" in entry["reason"]
    assert f"the server runs Python {RUNNING_PYTHON}" in entry["reason"]
