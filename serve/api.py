"""What the other packages use of the server, in one module (the tuner and the gate import
nothing else of serve but `serve.cli`, which the `autotune` command mounts).

- `open_model_directory(path)`: a model folder as the server would load it: its config read,
  auto-completed and validated, the versions its policy serves, its backend and model file.
- `model_directories(repository)`, `model_names(repository)`: the model folders of a repository.
- Configs: `read_config`, `write_config` (atomic), `config_to_text`, `config_to_json`,
  `CONFIG_FILENAME`, `backend_name`.
- `execution_providers(config, kind, device_id, model_dir=...)`: the onnxruntime providers a
  config asks for.
- `detect_platform()` -> `ServingPlatform`: the CPU cores, GPUs and GPU runtimes of this
  machine, as the server sees them when it places instances.
- `gpu_unavailable_reason(backend)`: why a backend's instances cannot run on a GPU here (the
  server's own rule for KIND_GPU groups), None when they can; `backend_names()` lists them.
- `default_model_filename(config)`: the model file a config serves (`model.pt`...).
- `tensorrt_engines_missing()`, `open_engine(path, device_id)`: what this machine lacks to run
  TensorRT engines (model.plan), and one engine ready to run on a GPU as the tensorrt backend
  runs it.
- `open_torchscript(config, path, kind, device_id)`: a TorchScript model ready to `run(arrays)`
  as the pytorch backend runs it.
- `ServeError`: what all of these raise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.registry import (
    DEFAULT_MODEL_FILENAMES,
    backend_name,
    backend_names,
    get_backend,
)
from serve.config.model_config import (
    CONFIG_FILENAME,
    config_to_json,
    config_to_text,
    read_config_file,
    write_config_file,
)
from serve.errors import ServeError
from serve.platform import ServingPlatform, detect_platform
from serve.repository.discovery import model_directories, prepare_config

if TYPE_CHECKING:
    from serve.backends.pytorch import TorchScriptRunner
    from serve.backends.tensorrt.runner import EngineRunner

__all__ = [
    "CONFIG_FILENAME",
    "ModelDirectory",
    "ServeError",
    "ServingPlatform",
    "backend_name",
    "backend_names",
    "config_to_json",
    "config_to_text",
    "default_model_filename",
    "detect_platform",
    "execution_providers",
    "gpu_unavailable_reason",
    "model_directories",
    "model_names",
    "open_engine",
    "open_model_directory",
    "open_torchscript",
    "read_config",
    "tensorrt_engines_missing",
    "write_config",
]


@dataclass(frozen=True, slots=True)
class ModelDirectory:
    """One model folder as the server sees it before loading it."""

    path: Path
    config: mc.ModelConfig  # read (or made), auto-completed and validated
    versions: list[int]  # the versions the version policy serves, ascending (never empty)
    source: str  # where the config came from (its path, or a note that it was auto-completed)
    backend: str  # the backend's name: onnxruntime, python, pytorch
    model_filename: str  # the model file's name inside a version folder

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def newest(self) -> int:
        return self.versions[-1]

    def model_file(self, version: int | None = None) -> Path:
        """The model file of `version` (the newest served one by default); it may not exist."""
        return self.path / str(self.newest if version is None else version) / self.model_filename


def open_model_directory(path: Path) -> ModelDirectory:
    """Read a model folder as the server does; ServeError when its config is invalid, its
    backend unknown or unavailable, or no version folder matches its policy."""
    config, versions, source = prepare_config(path)
    name = backend_name(config)
    backend = get_backend(name)
    filename = config.default_model_filename or backend.default_model_filename
    return ModelDirectory(path, config, versions, source, name, filename)


def model_names(repository: Path) -> list[str]:
    """The models of a repository (its folders), sorted; ServeError when it is no folder."""
    return [d.name for d in model_directories(repository)]


def read_config(path: Path) -> mc.ModelConfig:
    """A config.pbtxt as written (not completed); ServeError when unreadable or invalid."""
    return read_config_file(path)


def write_config(path: Path, config: mc.ModelConfig) -> None:
    """Write a config.pbtxt atomically, `max_batch_size` always present; re-writing its own
    output is byte-stable."""
    write_config_file(path, config)


def execution_providers(
    config: mc.ModelConfig, kind: str, device_id: int = 0, model_dir: Path | None = None
) -> tuple[list[Any], list[str]]:
    """The onnxruntime providers (with options) a session of `config` gets on an instance of
    `kind` (KIND_CPU, KIND_GPU) on GPU `device_id`, and warnings for what could not be
    honoured; ServeError when a GPU instance needs a provider this onnxruntime lacks."""
    from serve.backends import onnxruntime  # onnxruntime is loaded only when asked for

    return onnxruntime.execution_providers(config, kind, device_id, model_dir=model_dir)


def gpu_unavailable_reason(backend: str, platform: ServingPlatform | None = None) -> str | None:
    """Why instances of `backend` cannot run on a GPU of `platform` (default: this machine),
    as the server decides it when it places a KIND_GPU group; None when they can."""
    here = platform if platform is not None else detect_platform()
    if not here.gpus:
        return "no GPU is visible"
    try:
        return get_backend(backend).gpu_unavailable_reason(here)
    except ServeError as exc:  # unknown backend, or its runtime is not installed
        return exc.message


def default_model_filename(config: mc.ModelConfig) -> str:
    """The model file name a config serves: its `default_model_filename`, else its backend's
    default (`model.onnx`, `model.pt`...)."""
    return config.default_model_filename or DEFAULT_MODEL_FILENAMES.get(backend_name(config), "")


def tensorrt_engines_missing(platform: ServingPlatform | None = None) -> str | None:
    """What this machine (`platform`, default the detected one) lacks to run TensorRT engines,
    None when nothing: a GPU, the tensorrt package, a CUDA build of torch (imported only once
    the first two are there)."""
    from serve.backends.tensorrt.runtime import missing_runtime

    here = platform if platform is not None else detect_platform()
    if not here.gpus:
        return "no GPU is visible"
    if here.tensorrt_version is None:
        return "the tensorrt package is not installed (pip install tensorrt: docs/gpu.md)"
    return missing_runtime()


def open_engine(path: Path, device_id: int = 0) -> EngineRunner:
    """The TensorRT engine in `path` on GPU `device_id`, ready to `run(feeds)`; ServeError
    naming the file when it cannot run here."""
    from serve.backends.tensorrt.runner import EngineRunner

    return EngineRunner(path, device_id, path.name)


def open_torchscript(
    config: mc.ModelConfig, path: Path, kind: str = "KIND_CPU", device_id: int = 0
) -> TorchScriptRunner:
    """The TorchScript file `path` loaded as an instance of `config` on `kind` (KIND_CPU,
    KIND_GPU: GPU `device_id`), ready to `run(arrays)`; ServeError naming the file when it
    cannot load. torch is imported only here."""
    from serve.backends.pytorch import TorchScriptRunner

    return TorchScriptRunner(config, path, kind, device_id)
