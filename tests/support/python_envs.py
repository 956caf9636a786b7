"""Python environments for EXECUTION_ENV_PATH tests: a folder in venv/conda layout holding one
package, and a reproducible tar.gz of it (the same bytes each run, so the same cache entry)."""

from __future__ import annotations

import gzip
import io
import sys
import tarfile
from pathlib import Path

RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def make_env(root: Path, package: str, version: str, python: str = RUNNING_PYTHON) -> Path:
    """<root>/lib/python<python>/site-packages/<package>/__init__.py with VERSION = version."""
    package_dir = root / "lib" / f"python{python}" / "site-packages" / package
    package_dir.mkdir(parents=True)
    (package_dir / "__init__.py").write_text(f"VERSION = {version!r}\n")
    return root


def pack(folder: Path, archive: Path) -> Path:
    """A gzip'd tar of folder's contents (paths relative to it, as conda-pack writes them)."""
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        for path in sorted(folder.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(folder).as_posix())
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_file():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    archive.write_bytes(raw.getvalue())
    return archive


def tar_with(archive: Path, members: dict[str, bytes]) -> Path:
    """A tar.gz holding exactly these member names (unchecked: '../x' stays as written)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    archive.write_bytes(raw.getvalue())
    return archive
