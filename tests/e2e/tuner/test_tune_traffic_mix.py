"""`autotune --latency-p95 ... --traffic-mix digits=0.7,simple=0.3`: two models served
together tuned jointly under the mixed load, both configs written, their instances x threads
within the cores together, the report naming both models with their shares; bad
--traffic-mix input refused with the reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from common.cpu import usable_cpu_count
from serve.config.model_config import read_config_file
from tests.e2e.conftest import SLOW_DIGITS_CONFIG, autotune

BUDGET_MS = 20
# Both configs as written wait up to 40 ms for a full batch: they miss the budget, and the
# tuner never proposes a delay that long, so whatever it finds changes both models.
SLOW_SIMPLE_CONFIG = """name: "simple"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [16] },
       { name: "INPUT1" data_type: TYPE_INT32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [16] },
        { name: "OUTPUT1" data_type: TYPE_INT32 dims: [16] }]
dynamic_batching { preferred_batch_size: [8] max_queue_delay_microseconds: 40000 }
instance_group [{ count: 1 kind: KIND_CPU }]
"""
CONFIGS = {"digits": SLOW_DIGITS_CONFIG, "simple": SLOW_SIMPLE_CONFIG}


def _cores(model_dir: Path) -> int:
    config = read_config_file(model_dir / "config.pbtxt")
    instances = sum(group.count or 1 for group in config.instance_group) or 1
    threads = config.parameters.get("intra_op_thread_count")
    return instances * (int(threads.string_value) if threads is not None else 1)


def test_a_traffic_mix_is_tuned_jointly_and_written_for_both_models(
    tmp_path: Path, repository_with: Callable[..., Path]
) -> None:
    repository = repository_with("digits", "simple", configs=CONFIGS)
    result = autotune(
        tmp_path,
        *("--latency-p95", f"{BUDGET_MS}ms"),
        *("--traffic-mix", "digits=7,simple=3"),
        *("--model-repository", str(repository)),
        # Trial 0 (the configs as written, infeasible) and one searched trial: enough to show
        # a joint change of both; a low batch cap keeps the mixed search's rates (and so its
        # levels) few.
        *("--trials", "2"),
        *("--max-batch-size-cap", "16"),
        *("--precision", "fp32"),
        *("--measurement-interval", "500"),
        *("--remeasure-top", "0"),
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "shares add up to 10; normalised to 1: digits 70%, simple 30%" in output
    assert "measured under the mixed load" in output

    for model, config in CONFIGS.items():  # both written, the old configs kept
        assert (repository / model / "config.pbtxt.bak").read_text() == config
        tuned = read_config_file(repository / model / "config.pbtxt")
        assert tuned.dynamic_batching.max_queue_delay_microseconds < 40_000
    assert _cores(repository / "digits") + _cores(repository / "simple") <= usable_cpu_count()

    summary = json.loads((tmp_path / "reports" / "mix-digits-simple" / "summary.json").read_text())
    assert summary["traffic_mix"] == {"digits": pytest.approx(0.7), "simple": pytest.approx(0.3)}
    assert summary["as_written"]["feasible"] is False
    best = summary["best"]
    assert best["feasible"] is True
    metrics = best["outcome"]["metrics"]
    for model, share in (("digits", 0.7), ("simple", 0.3)):
        assert metrics[f"mix.{model}.throughput"] > 0
        assert metrics[f"mix.{model}.p95_us"] <= BUDGET_MS * 1000
        assert metrics[f"mix.{model}.request_rate"] == pytest.approx(
            share * metrics["request_rate"]
        )
    assert [m["model"] for m in summary["pipeline"]] == ["digits", "simple"]

    assert "traffic mix mix-digits-simple" in output  # the console's table
    report = (tmp_path / "reports" / "report.html").read_text()
    assert 'id="model-mix-digits-simple-mix"' in report
    assert "<code>digits</code>" in report and "<code>simple</code>" in report
    assert "70%" in report and "30%" in report


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--traffic-mix", "digits=0.7"), "a traffic mix needs at least two models"),
        (("--traffic-mix", "digits=0.7,simple"), "'simple' is not NAME=SHARE"),
        (("--traffic-mix", "digits=0,simple=1"), "'digits=0': the share must be a number > 0"),
        (("--traffic-mix", "digits=1,nothere=1"), "no model 'nothere'"),
        (("--traffic-mix", "digits=1,simple=1", "-m", "digits"), "either -m/--model or"),
    ],
)
def test_bad_traffic_mix_input_is_refused_with_the_reason(
    tmp_path: Path,
    repository_with: Callable[..., Path],
    args: tuple[str, ...],
    says: str,
) -> None:
    repository = repository_with("digits", "simple")
    result = autotune(
        tmp_path, "--latency-p95", "10ms", "--model-repository", str(repository), *args
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert says in result.stderr
    assert not list(repository.glob("*/config.pbtxt.bak"))
