"""`--json FILE`: the measurements as a JSON list of `Measurement.to_json()`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from analyzer.measurement import Measurement


def write_json(path: Path, measurements: Sequence[Measurement]) -> None:
    """The measurements written to `path` as one indented JSON list."""
    path.write_text(json.dumps([m.to_json() for m in measurements], indent=2) + "\n")
