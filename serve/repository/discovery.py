"""Reading one model directory: its config (completed and validated) and its versions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.backends.registry import DEFAULT_MODEL_FILENAMES, backend_name, get_backend
from serve.config.ensemble import composing_models, is_ensemble
from serve.config.model_config import CONFIG_FILENAME, read_config_file
from serve.config.validate import validate_config
from serve.errors import ErrorKind, ServeError


class NoVersionError(ServeError):
    """No version folder of a model matches its version policy."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorKind.UNAVAILABLE, message)


def model_directories(repository: Path) -> list[Path]:
    """Model folders of a repository, sorted by name (hidden folders are skipped)."""
    if not repository.is_dir():
        raise ServeError.invalid(f"model repository {repository} is not a directory")
    return sorted(p for p in repository.iterdir() if p.is_dir() and not p.name.startswith("."))


def version_numbers(model_dir: Path) -> list[int]:
    """Numeric version folders, ascending."""
    return sorted(int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit())


def select_versions(config: mc.ModelConfig, available: list[int]) -> list[int]:
    """Apply version_policy: latest{num_versions} (default 1), all{} or specific{versions}."""
    policy = config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return list(available)
    if choice == "specific":
        return [v for v in available if v in set(policy.specific.versions)]
    count = policy.latest.num_versions if choice == "latest" else 1
    return available[-max(count, 1) :]


def _guess_backend(model_dir: Path, versions: list[int]) -> str:
    for version in reversed(versions):
        for backend, filename in DEFAULT_MODEL_FILENAMES.items():
            if (model_dir / str(version) / filename).exists():
                return backend
    return ""


def config_path(model_dir: Path, config_name: str = "") -> Path:
    """The config file of a model: `configs/<config_name>.pbtxt` when a config name is given
    and the model has that file (tritonserver's --model-config-name), else config.pbtxt."""
    if config_name:
        custom = model_dir / "configs" / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return model_dir / CONFIG_FILENAME


def check_config_name(config_name: str) -> None:
    """ValueError when `config_name` cannot name a file of a model's configs/ folder."""
    if not config_name:
        return
    if any(c.isspace() for c in config_name) or "/" in config_name or config_name in (".", ".."):
        raise ValueError(
            f"--model-config-name '{config_name}': a config name is one file name, without "
            "spaces or '/'"
        )


NO_AUTO_COMPLETE = "auto-completion is disabled (--disable-auto-complete-config)"


def prepare_config(
    model_dir: Path,
    override: mc.ModelConfig | None = None,
    config_name: str = "",
    auto_complete: bool = True,
    backend_settings: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[mc.ModelConfig, list[int], str]:
    """The completed, validated config, the versions to serve and the config's source name
    (`config_name`: read configs/<config_name>.pbtxt where the model has it). Without
    `auto_complete` the config is taken as written, as tritonserver's
    --disable-auto-complete-config does: it must exist and name its backend (or platform),
    inputs and outputs. `backend_settings`: backend name ("" for every backend) -> settings
    (tritonserver's --backend-config), handed to the backend's auto-completion."""
    path = config_path(model_dir, config_name)
    if override is not None:
        config = mc.ModelConfig()
        config.CopyFrom(override)
        source = f"config override for model '{model_dir.name}'"
    elif path.exists():
        config = read_config_file(path)
        source = str(path)
    elif not auto_complete:
        raise ServeError.invalid(f"{path}: no such file, and {NO_AUTO_COMPLETE}")
    else:
        config = mc.ModelConfig()
        source = f"{model_dir} (no {CONFIG_FILENAME}; auto-completed)"
    if not config.name:
        config.name = model_dir.name
    available = version_numbers(model_dir)
    if is_ensemble(config):  # no backend and no model file; a version folder, as in Triton
        versions = _versions(config, model_dir, available)
        validate_config(config, source, model_dir.name)
        return config, versions, source
    if not auto_complete:
        _check_complete(config, source)
    if not backend_name(config):
        guessed = _guess_backend(model_dir, available)
        if not guessed:
            raise ServeError.invalid(
                f"{source}: backend: not set, and no model file in a version folder to infer it"
            )
        config.backend = guessed
    backend = get_backend(backend_name(config))
    versions = _versions(config, model_dir, available)
    filename = config.default_model_filename or backend.default_model_filename
    newest = model_dir / str(versions[-1]) / filename
    if newest.exists() and auto_complete:
        settings = dict((backend_settings or {}).get("", {}))
        settings.update((backend_settings or {}).get(backend.name, {}))
        try:
            backend.autocomplete(config, newest, settings)
        except ServeError as exc:
            raise ServeError(exc.kind, f"{source}: {exc.message}") from None
    validate_config(config, source, model_dir.name)
    return config, versions, source


def _check_complete(config: mc.ModelConfig, source: str) -> None:
    """ServeError naming what a config taken as written lacks."""
    if not backend_name(config):
        raise ServeError.invalid(f"{source}: backend: not set, and {NO_AUTO_COMPLETE}")
    for field, entries in (("input", config.input), ("output", config.output)):
        if not entries:
            raise ServeError.invalid(f"{source}: {field}: none listed, and {NO_AUTO_COMPLETE}")


def _versions(config: mc.ModelConfig, model_dir: Path, available: list[int]) -> list[int]:
    versions = select_versions(config, available)
    if not versions:
        raise NoVersionError(
            f"{model_dir}: no version folder matches the version policy "
            f"(found: {available or 'none'})"
        )
    return versions


def ensemble_steps_on_disk(model_dir: Path, config_name: str = "") -> list[str] | None:
    """The models an ensemble on disk calls (None: not an ensemble, or a config that cannot be
    read; loading it reports why)."""
    try:
        config = read_config_file(config_path(model_dir, config_name))
    except ServeError:
        return None
    return composing_models(config) if is_ensemble(config) else None
