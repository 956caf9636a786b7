"""What a run tunes: ensembles as pipelines, models no ensemble uses alone, the rest skipped
with a reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.errors import TuneUsageError
from tuner.plan import Target, plan

ENSEMBLE = """name: "{name}"
platform: "ensemble"
max_batch_size: 8
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }} ]
ensemble_scheduling {{
  step [
    {{ model_name: "{first}" model_version: -1
       input_map {{ key: "X" value: "IN" }} output_map {{ key: "Y" value: "mid" }} }},
    {{ model_name: "{second}" model_version: -1
       input_map {{ key: "X" value: "mid" }} output_map {{ key: "Y" value: "OUT" }} }}
  ]
}}
"""

MODEL = """name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }} ]
{extra}
"""

SEQUENCE = "sequence_batching { max_sequence_idle_microseconds: 1000000 }"


def _model(root: Path, name: str, text: str) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(text)


def _repository(root: Path, *, stateful_step: bool = False) -> Path:
    _model(root, "pipe", ENSEMBLE.format(name="pipe", first="pre", second="post"))
    _model(root, "pre", MODEL.format(name="pre", extra=""))
    _model(root, "post", MODEL.format(name="post", extra=SEQUENCE if stateful_step else ""))
    _model(root, "alone", MODEL.format(name="alone", extra=""))
    _model(root, "counter", MODEL.format(name="counter", extra=SEQUENCE))
    return root


def test_ensembles_are_pipelines_and_their_steps_are_not_tuned_alone(tmp_path: Path) -> None:
    targets = plan(_repository(tmp_path))
    assert [t.name for t in targets] == ["pipe", "alone", "counter"]
    assert targets[0] == Target("pipe", "pipeline", ("pre", "post"))
    assert targets[1] == Target("alone", "model")
    assert targets[2].kind == "model" and "stateful model (sequence_batching)" in targets[2].skip


def test_a_pipeline_with_a_stateful_step_is_skipped_with_the_reason(tmp_path: Path) -> None:
    targets = plan(_repository(tmp_path, stateful_step=True))
    pipe = next(t for t in targets if t.name == "pipe")
    assert pipe.kind == "pipeline"
    assert pipe.skip.startswith("its step 'post' is a stateful model")


def test_named_models_keep_their_order_and_a_step_can_be_tuned_alone(tmp_path: Path) -> None:
    targets = plan(_repository(tmp_path), ("pre", "pipe"))
    assert [(t.name, t.kind) for t in targets] == [("pre", "model"), ("pipe", "pipeline")]


def test_a_missing_step_model_skips_the_pipeline(tmp_path: Path) -> None:
    root = _repository(tmp_path)
    _model(root, "broken", ENSEMBLE.format(name="broken", first="pre", second="nowhere"))
    broken = next(t for t in plan(root) if t.name == "broken")
    assert broken.skip == "its step model 'nowhere' is not in the repository"


def test_an_unknown_model_or_repository_is_a_usage_error(tmp_path: Path) -> None:
    root = _repository(tmp_path)
    with pytest.raises(TuneUsageError, match="no model 'ghost'"):
        plan(root, ("ghost",))
    with pytest.raises(TuneUsageError, match="is not a directory"):
        plan(tmp_path / "missing")
