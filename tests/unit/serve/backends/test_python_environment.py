"""EXECUTION_ENV_PATH: a python model's own environment, as a folder or an archive unpacked
once into a cache."""

from __future__ import annotations

import gzip
import os
import sys
import threading
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.python.environment import child_env, execution_env_paths
from serve.errors import ErrorKind, ServeError
from tests.support.python_envs import RUNNING_PYTHON, make_env, pack, tar_with

pytestmark = pytest.mark.timeout(60)


def config_with(env_path: str | None) -> mc.ModelConfig:
    text = 'name: "own_env" backend: "python"'
    if env_path is not None:
        text += (
            f' parameters {{ key: "EXECUTION_ENV_PATH" value {{ string_value: "{env_path}" }} }}'
        )
    return text_format.Parse(text, mc.ModelConfig())


def resolve(env_path: str, model_dir: Path, cache: Path) -> list[str]:
    return execution_env_paths(config_with(env_path), model_dir, cache=cache)


def unavailable(env_path: str, model_dir: Path, cache: Path) -> str:
    with pytest.raises(ServeError) as caught:
        resolve(env_path, model_dir, cache)
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    message = caught.value.message
    assert "own_env: parameters['EXECUTION_ENV_PATH']" in message
    return message


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "repository" / "own_env"
    directory.mkdir(parents=True)
    return directory


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache"


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir()) if cache.exists() else []


def test_no_parameter_adds_nothing(model_dir: Path, cache: Path) -> None:
    assert execution_env_paths(config_with(None), model_dir, cache=cache) == []
    assert not cache.exists()


def test_a_folder_in_the_model_directory(model_dir: Path, cache: Path) -> None:
    make_env(model_dir / "env", "only_here", "1.0")
    paths = resolve("$$TRITON_MODEL_DIRECTORY/env", model_dir, cache)
    expected = model_dir / "env" / "lib" / f"python{RUNNING_PYTHON}" / "site-packages"
    assert paths == [str(expected)]
    assert not cache.exists()  # a folder is used where it is


def test_an_archive_is_unpacked_into_the_cache(
    tmp_path: Path, model_dir: Path, cache: Path
) -> None:
    pack(make_env(tmp_path / "env", "only_here", "2.0"), model_dir / "env.tar.gz")
    [site] = resolve("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
    assert Path(site).is_relative_to(cache)
    assert (Path(site) / "only_here" / "__init__.py").read_text() == "VERSION = '2.0'\n"
    [digest] = entries(cache)
    assert len(digest) == 64  # the archive's sha256


@pytest.mark.parametrize("suffix", [".tgz", ".tar"])
def test_other_archive_names(tmp_path: Path, model_dir: Path, cache: Path, suffix: str) -> None:
    archive = pack(make_env(tmp_path / "env", "only_here", "2.0"), tmp_path / f"env{suffix}")
    if suffix == ".tar":  # a plain tar: the same members without gzip
        archive.write_bytes(gzip.decompress(archive.read_bytes()))
    [site] = resolve(str(archive), model_dir, cache)
    assert (Path(site) / "only_here" / "__init__.py").is_file()


def test_an_archive_is_unpacked_once(tmp_path: Path, model_dir: Path, cache: Path) -> None:
    pack(make_env(tmp_path / "env", "only_here", "2.0"), model_dir / "env.tar.gz")
    [first] = resolve("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
    marker = Path(first) / "marker"
    marker.write_text("left by the first load")
    [second] = resolve("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
    assert second == first
    assert marker.exists()  # the same folder, not unpacked again
    assert len(entries(cache)) == 1


def test_loads_racing_on_one_archive_share_one_complete_folder(
    tmp_path: Path, model_dir: Path, cache: Path
) -> None:
    env = make_env(tmp_path / "env", "only_here", "3.0")
    for i in range(200):  # enough members that the unpacking takes a while
        (env / "lib" / f"python{RUNNING_PYTHON}" / "site-packages" / f"m{i}.py").write_text("")
    pack(env, model_dir / "env.tar.gz")
    barrier = threading.Barrier(6)
    results: list[str | BaseException] = []

    def load() -> None:
        barrier.wait()
        try:
            [site] = resolve("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
            complete = len(list(Path(site).iterdir())) == 201
            results.append(site if complete else AssertionError(f"{site} is incomplete"))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(map(str, results))) == 1, results
    assert isinstance(results[0], str)
    assert len(entries(cache)) == 1  # no staging folder left behind


def test_missing_path(model_dir: Path, cache: Path) -> None:
    message = unavailable("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
    assert f"'{model_dir / 'env.tar.gz'}' does not exist" in message


def test_a_folder_that_is_no_environment(model_dir: Path, cache: Path) -> None:
    (model_dir / "env" / "lib").mkdir(parents=True)
    message = unavailable("$$TRITON_MODEL_DIRECTORY/env", model_dir, cache)
    assert f"'{model_dir / 'env'}' is not a Python environment" in message
    assert "lib/python<X.Y>/site-packages" in message


def test_an_archive_that_is_no_environment(tmp_path: Path, model_dir: Path, cache: Path) -> None:
    tar_with(model_dir / "env.tar.gz", {"README": b"no python here"})
    message = unavailable("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
    assert f"'{model_dir / 'env.tar.gz'}' is not a Python environment" in message


def test_an_environment_for_another_python(model_dir: Path, cache: Path) -> None:
    other = f"{sys.version_info.major}.{sys.version_info.minor - 1}"
    make_env(model_dir / "env", "only_here", "1.0", python=other)
    message = unavailable("$$TRITON_MODEL_DIRECTORY/env", model_dir, cache)
    assert f"an environment for Python {other}" in message
    assert f"the server runs Python {RUNNING_PYTHON}" in message


def test_a_file_that_is_no_archive(model_dir: Path, cache: Path) -> None:
    (model_dir / "env.zip").write_bytes(b"PK")
    message = unavailable("$$TRITON_MODEL_DIRECTORY/env.zip", model_dir, cache)
    assert "is neither a folder nor an archive (.tar.gz, .tgz, .tar)" in message


def test_a_corrupt_archive(model_dir: Path, cache: Path) -> None:
    (model_dir / "env.tar.gz").write_bytes(b"\x1f\x8b this is not gzip data" * 10)
    message = unavailable("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
    assert f"cannot unpack '{model_dir / 'env.tar.gz'}'" in message
    assert entries(cache) == []


def test_a_truncated_archive_never_leaves_a_half_unpacked_folder(
    tmp_path: Path, model_dir: Path, cache: Path
) -> None:
    env = make_env(tmp_path / "env", "only_here", "4.0")
    for i in range(50):
        (env / f"file{i}").write_bytes(os.urandom(4096))  # incompressible: the cut lands late
    whole = pack(env, tmp_path / "whole.tar.gz").read_bytes()
    (model_dir / "env.tar.gz").write_bytes(whole[: len(whole) * 3 // 4])
    for _ in range(2):  # the second load must not take a half-unpacked folder for the env
        message = unavailable("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
        assert "cannot unpack" in message
        assert entries(cache) == []


def test_a_member_outside_the_folder_is_refused(
    tmp_path: Path, model_dir: Path, cache: Path
) -> None:
    tar_with(
        model_dir / "env.tar.gz",
        {f"lib/python{RUNNING_PYTHON}/site-packages/ok.py": b"", "../../escaped.py": b"x"},
    )
    message = unavailable("$$TRITON_MODEL_DIRECTORY/env.tar.gz", model_dir, cache)
    assert "escaped.py" in message
    assert not (tmp_path / "escaped.py").exists()
    assert not (cache.parent / "escaped.py").exists()
    assert entries(cache) == []


def test_the_stub_gets_the_environment_first_on_its_import_path() -> None:
    paths = child_env(["/envs/a/site-packages"])["PYTHONPATH"].split(os.pathsep)
    assert paths[0] == "/envs/a/site-packages"
    assert child_env()["PYTHONPATH"].split(os.pathsep)[0] != "/envs/a/site-packages"
