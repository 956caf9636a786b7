"""onnxruntime's quantization pre-processing, run in a child process inside a scratch folder.

`quant_pre_process` writes `sym_shape_infer_temp.onnx` and a weights file with a random name into
the current directory when symbolic shape inference is incomplete (a model's size in that
directory: 90 MB for a MiniLM encoder). Running it in a child Python
with the scratch folder as its working directory keeps that litter where the cache removes it,
without changing the tuner's own working directory.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tuner.precision.errors import PrecisionError

# The child imports only onnxruntime: it needs nothing of ours installed.
_CHILD = """
import sys
from onnxruntime.quantization.shape_inference import quant_pre_process
try:  # auto_merge lets symbolic inference merge the dynamic dims of transformer encoders
    quant_pre_process(sys.argv[1], sys.argv[2], auto_merge=True)
except Exception:  # incomplete symbolic shapes: onnx's own shape inference still runs
    quant_pre_process(sys.argv[1], sys.argv[2], skip_symbolic_shape=True)
"""


def preprocess_for_quantization(source: Path, target: Path) -> None:
    """Write the pre-processed `source` to `target`; the child runs in `target`'s folder."""
    result = subprocess.run(
        [sys.executable, "-c", _CHILD, str(source.resolve()), str(target.resolve())],
        cwd=target.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise PrecisionError(f"quantization pre-processing of {source} failed: {last}")
