"""The accuracy guard: a variant against the FP32 model on the validation inputs.

Every output is scored with its metric (`metrics.choose_metric`); the output with the largest
drop decides. A variant passes when `drop <= limit` (`--max-accuracy-drop`); a failed or
non-runnable variant is never to be chosen, and `reason` says why in plain words.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from tritonclient.grpc import model_config_pb2 as mc

from tuner.precision.errors import PrecisionError
from tuner.precision.metrics import Metric, OutputSpec, Score, choose_metric, format_number, score
from tuner.precision.validation import ValidationSet

_FLOAT_CONFIG_TYPES = frozenset({mc.TYPE_FP16, mc.TYPE_FP32, mc.TYPE_FP64, mc.TYPE_BF16})
_FLOAT_ONNX_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.BFLOAT16,
    }
)
_METRIC_WORDS = {
    Metric.TOP1: "top-1 agreement",
    Metric.COSINE: "mean cosine similarity",
    Metric.MAX_RELATIVE_ERROR: "max relative error",
}

Outputs = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class AccuracyCheck:
    """The guard's verdict on one variant.

    `value` is the metric (agreement, mean cosine or max relative error); `drop` is 1 - agreement,
    1 - mean cosine or the max relative error; `passed` is `drop <= limit`. `source` says which
    validation inputs were used; `output` names the output that decided.
    """

    precision: str
    metric: str
    value: float
    drop: float
    limit: float
    passed: bool
    reason: str
    source: str
    output: str = ""
    samples: int = 0


def output_specs(config: mc.ModelConfig, model_path: Path) -> list[OutputSpec]:
    """The outputs to compare: the config's, or the graph's when the config lists none."""
    if config.output:
        return [
            OutputSpec(
                o.name,
                o.data_type in _FLOAT_CONFIG_TYPES,
                tuple(o.reshape.shape) if o.HasField("reshape") else tuple(o.dims),
            )
            for o in config.output
        ]
    graph = onnx.load(str(model_path), load_external_data=False).graph
    specs = []
    for value in graph.output:
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        if config.max_batch_size > 0:
            dims = dims[1:]
        specs.append(OutputSpec(value.name, tensor.elem_type in _FLOAT_ONNX_TYPES, dims))
    return specs


def run_outputs(
    model_path: Path,
    validation: ValidationSet,
    names: list[str],
    threads: int = 0,
    providers: Sequence[Any] = ("CPUExecutionProvider",),
) -> Outputs:
    """Every validation sample through the model: each output with all rows, rows first.

    `threads` is onnxruntime's intra-op thread count (0: its default, all cores); `providers`
    are onnxruntime execution providers (names or (name, options) pairs).
    """
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=list(providers)
        )
        results = [session.run(names, feed) for feed in validation.feeds()]
    except Exception as exc:  # onnxruntime raises several unrelated exception types
        raise PrecisionError(
            f"{model_path.name} does not run in onnxruntime on the validation inputs: {exc}"
        ) from None
    runs = [dict(zip(names, result, strict=True)) for result in results]
    return collect_outputs(runs, names, validation.batched)


def collect_outputs(runs: Sequence[Outputs], names: Sequence[str], batched: bool) -> Outputs:
    """Each output over all runs, rows first (batched runs are joined, single ones stacked)."""
    join = np.concatenate if batched else np.stack
    return {name: join([run[name] for run in runs]) for name in names}


def check_accuracy(
    precision: str,
    candidate_path: Path,
    reference: Outputs,
    validation: ValidationSet,
    specs: list[OutputSpec],
    limit: float,
    threads: int = 0,
    providers: Sequence[Any] = ("CPUExecutionProvider",),
) -> AccuracyCheck:
    """Run the variant and judge it against the FP32 `reference` outputs."""
    names = [s.name for s in specs]
    candidate = run_outputs(candidate_path, validation, names, threads, providers)
    return judge(precision, specs, reference, candidate, validation, limit)


def judge(
    precision: str,
    specs: list[OutputSpec],
    reference: Outputs,
    candidate: Outputs,
    validation: ValidationSet,
    limit: float,
) -> AccuracyCheck:
    """The verdict from outputs already computed (the worst output decides)."""
    if not specs:
        raise PrecisionError("the model has no outputs to compare")
    scored: list[tuple[OutputSpec, Score]] = []
    for spec in specs:
        expected, got = reference[spec.name], candidate[spec.name]
        metric = choose_metric(spec, validation.batched, expected)
        result = score(metric, spec, validation.batched, expected, got)
        if metric is not choose_metric(spec, validation.batched):
            note = "FP32 predicts the same class for every sample, so top-1 says nothing"
            result = replace(result, note=note)
        scored.append((spec, result))
    spec, worst = max(scored, key=lambda item: _sortable(item[1].drop))
    passed = not math.isnan(worst.drop) and worst.drop <= limit
    return AccuracyCheck(
        precision=precision,
        metric=worst.metric.value,
        value=worst.value,
        drop=worst.drop,
        limit=limit,
        passed=passed,
        reason=_reason(spec.name, worst, limit, passed, len(validation)),
        source=validation.source,
        output=spec.name,
        samples=len(validation),
    )


def _sortable(drop: float) -> float:
    return math.inf if math.isnan(drop) else drop


def _reason(output: str, result: Score, limit: float, passed: bool, samples: int) -> str:
    words = _METRIC_WORDS[result.metric]
    value = format_number(result.value) + (f" ({result.detail})" if result.detail else "")
    ok = "<=" if passed else ">"
    if result.metric is Metric.MAX_RELATIVE_ERROR:
        measured = f"{words} {value} {ok} limit {format_number(limit)}"
    else:
        above = ">=" if passed else "<"
        measured = (
            f"{words} {value} {above} {format_number(1.0 - limit)}"
            f" (drop {format_number(result.drop)} {ok} limit {format_number(limit)})"
        )
    note = f"; {result.note}" if result.note else ""
    return f"output '{output}': {measured}{note}; {samples} samples"
