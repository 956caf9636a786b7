"""A python model's own environment: config parameter EXECUTION_ENV_PATH.

Triton runs its stub inside the named environment (a conda-pack archive or an unpacked one).
Our stub is a module of this project, so it runs on the server's interpreter and the
environment's site-packages go first on its import path: the model imports the environment's
packages, and its versions of packages the server also has. The Python versions must match.

Archives are unpacked once per content into <tempdir>/autotune-python-envs/<sha256>: into a
temporary sibling first, then renamed into place, so loads racing on one archive never see a
half-unpacked folder.

`child_env` is the environment every process the backend starts gets (the stub launcher, a
stub of its own, the auto-complete helper): this package importable, a model's own
environment first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.errors import ServeError

PARAMETER = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY = "$$TRITON_MODEL_DIRECTORY"
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
_CHUNK = 1 << 20


def default_cache() -> Path:
    """Where archives are unpacked, one folder per archive content."""
    return Path(tempfile.gettempdir()) / "autotune-python-envs"


def execution_env_paths(
    config: mc.ModelConfig, model_dir: Path, *, cache: Path | None = None
) -> list[str]:
    """The import paths the model's EXECUTION_ENV_PATH adds before the server's own: empty
    without the parameter. ServeError (unavailable) naming the parameter and the path when the
    environment is missing, unreadable, or not for this server's Python."""
    if PARAMETER not in config.parameters:
        return []
    label = f"{config.name or model_dir.name}: parameters['{PARAMETER}']"
    value = config.parameters[PARAMETER].string_value.strip()
    if not value:
        raise ServeError.unavailable(f"{label} is empty: give an environment folder or archive")
    path = Path(value.replace(MODEL_DIRECTORY, str(model_dir)))
    if path.is_dir():
        root = path
    elif path.is_file():
        if not path.name.endswith(ARCHIVE_SUFFIXES):
            raise ServeError.unavailable(
                f"{label}: '{path}' is neither a folder nor an archive "
                f"({', '.join(ARCHIVE_SUFFIXES)})"
            )
        root = unpacked(path, cache or default_cache(), label)
    else:
        raise ServeError.unavailable(f"{label}: '{path}' does not exist")
    return [str(site_packages(root, label, shown=path))]


def site_packages(root: Path, label: str, shown: Path | None = None) -> Path:
    """<root>/lib/python<X.Y>/site-packages for the running Python (a venv or conda layout)."""
    shown = shown or root
    found = sorted(p for p in root.glob("lib/python*/site-packages") if p.is_dir())
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in found:
        if candidate.parent.name == f"python{running}":
            return candidate
    if not found:
        raise ServeError.unavailable(
            f"{label}: '{shown}' is not a Python environment: it has no lib/python<X.Y>/"
            "site-packages"
        )
    versions = ", ".join(p.parent.name.removeprefix("python") for p in found)
    raise ServeError.unavailable(
        f"{label}: '{shown}' is an environment for Python {versions}, but the server runs "
        f"Python {running}: the versions must match"
    )


def unpacked(archive: Path, cache: Path, label: str) -> Path:
    """The folder the archive unpacks to, unpacking it on first use."""
    try:
        digest = _sha256(archive)
    except OSError as exc:
        raise ServeError.unavailable(f"{label}: cannot read '{archive}': {exc}") from None
    target = cache / digest
    if target.is_dir():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{digest[:16]}-", dir=cache))
    except OSError as exc:
        raise ServeError.unavailable(f"{label}: cannot unpack into '{cache}': {exc}") from None
    try:
        _extract(archive, staging, label)
        try:
            os.rename(staging, target)
        except OSError as exc:
            if not target.is_dir():  # else another load unpacked the same archive first
                raise ServeError.unavailable(
                    f"{label}: cannot unpack '{archive}' into '{target}': {exc}"
                ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _extract(archive: Path, into: Path, label: str) -> None:
    try:
        with tarfile.open(archive) as tar:
            # "data": no absolute paths, nothing outside the folder, no device files.
            tar.extractall(into, filter="data")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise ServeError.unavailable(f"{label}: cannot unpack '{archive}': {exc}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def child_env(import_paths: Sequence[str] = ()) -> dict[str, str]:
    """The server's environment, with this package importable however the server was started,
    and `import_paths` (a model's own environment) ahead of everything else."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    paths = (*import_paths, root, env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env
