"""Runs a model's `auto_complete_config` in a short-lived process, away from the server.

`python -m serve.backends.python.autocomplete_child <model.py> <result.json>` reads the
model config as JSON on stdin and writes `{"recorded": {...}}` or `{"error": "..."}`.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

from serve.backends.python import pb_utils
from serve.backends.python.loader import describe, import_model_class


def run(model_file: Path, config: dict[str, Any]) -> dict[str, Any]:
    """The model class's `auto_complete_config` applied to `config` (Triton's JSON form):
    `{"recorded": ...}`, what the model set, or `{"error": ...}` when importing or calling it failed
    (the traceback goes to stderr)."""
    helper = pb_utils.ModelConfig(config)
    try:
        model_class = import_model_class(model_file)
        hook = getattr(model_class, "auto_complete_config", None)
        if hook is not None:
            returned = hook(helper)
            if isinstance(returned, pb_utils.ModelConfig):
                helper = returned
    except Exception as exc:
        traceback.print_exc()
        return {"error": describe(exc, model_file)}
    return {"recorded": helper.recorded()}


def main(argv: list[str] | None = None) -> int:
    """The process's entry point: `argv` (or sys.argv) is the model file and the result file; the
    config comes on stdin. Always 0: a failure is reported in the result file."""
    model_file, result_file = sys.argv[1:] if argv is None else argv
    result = run(Path(model_file), json.loads(sys.stdin.read() or "{}"))
    Path(result_file).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
