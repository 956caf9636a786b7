"""serve/api.py, what the tuner and the gate use of the server: a model folder opened as the
server would open it, the repository's models, configs read and written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from serve.api import (
    CONFIG_FILENAME,
    ServeError,
    backend_name,
    config_to_json,
    config_to_text,
    execution_providers,
    model_names,
    open_model_directory,
    read_config,
    write_config,
)
from tests.conftest import BUNDLED_REPOSITORY

SIMPLE = BUNDLED_REPOSITORY / "simple"


def test_a_model_folder_opens_with_its_completed_config(tmp_path: Path) -> None:
    opened = open_model_directory(SIMPLE)
    assert opened.name == "simple"
    assert opened.backend == "onnxruntime" == backend_name(opened.config)
    assert opened.versions == [1]
    assert opened.newest == 1
    assert opened.model_file() == SIMPLE / "1" / "model.onnx"
    assert opened.model_file().is_file()
    assert opened.source == str(SIMPLE / CONFIG_FILENAME)
    assert [i.name for i in opened.config.input] == ["INPUT0", "INPUT1"]


def test_a_folder_without_config_is_auto_completed_from_its_model(tmp_path: Path) -> None:
    model_dir = tmp_path / "plain"
    (model_dir / "3").mkdir(parents=True)
    shutil.copy(SIMPLE / "1" / "model.onnx", model_dir / "3" / "model.onnx")
    opened = open_model_directory(model_dir)
    assert opened.config.name == "plain"
    assert opened.backend == "onnxruntime"
    assert opened.versions == [3]
    assert opened.model_file() == model_dir / "3" / "model.onnx"
    assert "auto-completed" in opened.source
    assert len(opened.config.input) == 2


def test_an_unusable_model_folder_is_a_serve_error(tmp_path: Path) -> None:
    model_dir = tmp_path / "empty"
    model_dir.mkdir()
    with pytest.raises(ServeError, match="no model file"):
        open_model_directory(model_dir)
    (model_dir / CONFIG_FILENAME).write_text('name: "empty"\nbackend: "nonsense"\n')
    with pytest.raises(ServeError, match="unknown backend"):
        open_model_directory(model_dir)


def test_model_names_and_configs(tmp_path: Path) -> None:
    assert {"simple", "digits"} <= set(model_names(BUNDLED_REPOSITORY))
    with pytest.raises(ServeError):
        model_names(tmp_path / "missing")
    config = read_config(SIMPLE / CONFIG_FILENAME)
    target = tmp_path / CONFIG_FILENAME
    write_config(target, config)
    assert target.read_text() == config_to_text(config)
    assert read_config(target) == config
    assert config_to_json(config)["max_batch_size"] == 8


def test_execution_providers_for_the_cpu() -> None:
    providers, warnings = execution_providers(mc.ModelConfig(), "KIND_CPU")
    assert "CPUExecutionProvider" in [p if isinstance(p, str) else p[0] for p in providers]
    assert warnings == []
