"""The tuner's entry point: the precision variants of one model, built, cached and checked."""

from __future__ import annotations

import functools
import logging
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from serve.api import (
    ServeError,
    detect_platform,
    execution_providers,
    open_engine,
    tensorrt_engines_missing,
)
from tuner.candidate import PRECISION, Candidate, apply
from tuner.precision.accuracy import (
    AccuracyCheck,
    Outputs,
    check_accuracy,
    collect_outputs,
    judge,
    output_specs,
    run_outputs,
)
from tuner.precision.builders import (
    DYNAMIC_METHOD,
    FP16_METHOD,
    STATIC_METHOD,
    build_fp16,
    build_int8_dynamic,
    build_int8_static,
)
from tuner.precision.cache import (
    DEFAULT_CACHE_DIR,
    VariantCache,
    VariantKey,
    file_sha256,
    model_sha256,
)
from tuner.precision.errors import PrecisionError
from tuner.precision.graph import (
    GraphSummary,
    Int8Method,
    choose_int8_method,
    load_summary,
    require_float,
)
from tuner.precision.metrics import OutputSpec
from tuner.precision.tensorrt import tensorrt_available
from tuner.precision.tensorrt_calibration import (
    TABLE_METHOD,
    build_calibration_table,
    table_location,
)
from tuner.precision.tensorrt_engine import build_engine, engine_method
from tuner.precision.torchscript import (
    build_cast_module,
    cast_method,
    check_device,
    is_torchscript_model,
    torchscript_outputs,
)
from tuner.precision.validation import ValidationSet, load_validation_inputs
from tuner.precisions import (
    PLAN_PRECISIONS,
    PRECISIONS,
    TORCH_PRECISIONS,
    TRT_PRECISIONS,
    backend_precisions,
)

log = logging.getLogger("tuner.precision")

DEFAULT_VALIDATION_COUNT = 256
CALIBRATION_COUNT = 128  # static int8 calibrates on the first ones (~5 s for ResNet-18 here)
FP32_METHOD = "the model file as it is"


@dataclass(frozen=True, slots=True)
class PrecisionVariant:
    """One precision of a model, ready to serve or excluded with the reason.

    `model_path` is the file to serve (the source file for fp32 and the TensorRT precisions
    of onnxruntime, which are a config change; the engine for plan_fp16 / plan_int8; None when
    `error` is set); trt_int8 also has its `calibration_table`.
    `accuracy` is None for fp32. `build_seconds` is the time this call spent building (0 when
    `cached`). A variant is `usable` when it was built and passed the accuracy guard.
    """

    precision: str
    model_path: Path | None
    accuracy: AccuracyCheck | None
    build_seconds: float
    error: str | None = None
    method: str = ""
    cached: bool = False
    # trt_int8: the TensorRT calibration table, to be placed at `table_location()` inside the
    # served model's folder
    calibration_table: Path | None = None

    def model_folder_files(self) -> dict[str, Path]:
        """Files the served config expects inside the model's folder (relative path -> file
        to place there): trt_int8's calibration table."""
        if self.calibration_table is None:
            return {}
        return {table_location(): self.calibration_table}

    @property
    def usable(self) -> bool:
        return self.error is None and (self.accuracy is None or self.accuracy.passed)

    @property
    def verdict(self) -> str:
        """Plain words for the report: why it is excluded, or how it compared."""
        if self.error is not None:
            return f"{self.precision} excluded: {self.error}"
        if self.accuracy is None:
            return f"{self.precision}: {self.method}"
        state = "passed" if self.accuracy.passed else "excluded, accuracy"
        return f"{self.precision} {state}: {self.accuracy.reason}"


def is_onnx_model(config: mc.ModelConfig, model_path: Path) -> bool:
    """Whether onnxruntime serves `model_path` under `config`: only such models get fp16,
    int8 and TensorRT variants."""
    return (
        Path(model_path).suffix.lower() == ".onnx"
        and config.platform in ("", "onnxruntime_onnx")
        and config.backend in ("", "onnxruntime")
    )


def prepare_variants(
    model_dir: Path,
    config: mc.ModelConfig,
    model_path: Path,
    precisions: Sequence[str],
    max_accuracy_drop: float,
    validation_file: Path | None = None,
    cache_dir: Path = DEFAULT_CACHE_DIR,
    *,
    count: int = DEFAULT_VALIDATION_COUNT,
    threads: int = 0,
    engine_max_batch: int = 0,
) -> list[PrecisionVariant]:
    """The requested precisions of the model at `model_path`, in the order asked.

    Precisions: fp32, fp16, int8, and where onnxruntime has TensorRT, trt_fp16 and trt_int8
    (a config change, as `tuner.candidate.apply` makes it, and for trt_int8 a calibration
    table built from the validation data; checked by running the source file under the
    providers the server would use for that config). fp16 and int8 are built once per (source hash,
    precision, calibration data) in `cache_dir`. Each reduced precision is compared with the
    FP32 model on up to `count` validation inputs (`load_validation_inputs`; static int8
    calibrates on the first `CALIBRATION_COUNT`), run with `threads` onnxruntime threads
    (0: all cores). plan_fp16 and plan_int8 are TensorRT engines built on this machine's GPU
    (`tensorrt_engine.py`) for batches up to `engine_max_batch` (0: the config's
    max_batch_size), cached per TensorRT version and GPU, checked by running them. A variant
    that cannot be built or run carries `error`; one beyond `max_accuracy_drop` carries a
    failed `accuracy`. TorchScript models get fp16 and bf16 modules (`torchscript.py`),
    checked as the pytorch backend runs them (on GPU 0 where torch can use it). Other models
    get fp32 only; their other precisions carry an error saying so. Raises PrecisionError for
    an unknown precision, an unreadable model file or unreadable validation data (the user's
    to fix).
    """
    wanted = _normalize(precisions)
    model_path = Path(model_path)
    if is_torchscript_model(config, model_path):
        return _torchscript_variants(
            Path(model_dir),
            config,
            model_path,
            wanted,
            max_accuracy_drop,
            validation_file,
            Path(cache_dir),
            count,
        )
    if not is_onnx_model(config, model_path):
        kind = config.backend or config.platform or model_path.suffix
        note = f"precision variants need an ONNX model; '{kind}' models are served in fp32 only"
        return [_fp32(model_path) if p == "fp32" else _failed(p, note) for p in wanted]
    if wanted == ["fp32"]:
        return [_fp32(model_path)]
    summary = load_summary(str(model_path))
    validation = load_validation_inputs(Path(model_dir), config, validation_file, count)
    log.info("validation inputs: %s", validation.source)
    context = _Context(
        config=config,
        model_path=model_path,
        summary=summary,
        validation=validation,
        specs=output_specs(config, model_path),
        cache=VariantCache(Path(cache_dir)),
        source_sha256=model_sha256(model_path),
        limit=max_accuracy_drop,
        threads=threads,
        engine_max_batch=engine_max_batch or max(config.max_batch_size, 0),
    )
    try:
        reference = run_outputs(model_path, validation, [s.name for s in context.specs], threads)
    except PrecisionError as exc:
        error = f"no accuracy check is possible: {exc}"
        return [_fp32(model_path) if p == "fp32" else _failed(p, error) for p in wanted]
    return [_fp32(model_path) if p == "fp32" else _reduced(p, context, reference) for p in wanted]


def _build_cast(source: Path, precision: str, target: Path) -> None:
    build_cast_module(source, target, precision)


def _torchscript_variants(
    model_dir: Path,
    config: mc.ModelConfig,
    model_path: Path,
    wanted: list[str],
    limit: float,
    validation_file: Path | None,
    cache_dir: Path,
    count: int,
) -> list[PrecisionVariant]:
    """fp16 and bf16 modules of a TorchScript model (`torchscript.py`), cached, each checked
    against the model as it is, both run as the pytorch backend runs them."""
    if wanted == ["fp32"]:
        return [_fp32(model_path)]
    validation = load_validation_inputs(model_dir, config, validation_file, count)
    log.info("validation inputs: %s", validation.source)
    specs = output_specs(config, model_path)
    names = [s.name for s in specs]
    kind, where = check_device()
    try:
        reference = torchscript_outputs(config, model_path, validation, names, kind)
    except PrecisionError as exc:
        error = f"no accuracy check is possible: {exc}"
        return [_fp32(model_path) if p == "fp32" else _failed(p, error) for p in wanted]
    cache = VariantCache(cache_dir)
    source_sha256 = file_sha256(model_path)
    variants = []
    for precision in wanted:
        if precision == "fp32":
            variants.append(_fp32(model_path))
        elif precision not in TORCH_PRECISIONS:
            note = f"TorchScript models have {', '.join(TORCH_PRECISIONS)} variants"
            variants.append(_failed(precision, f"{precision} is for ONNX models; {note}"))
        else:
            try:
                method = cast_method(precision)
                key = VariantKey(source_sha256, precision, method, None)
                built = cache.get_or_build(
                    key, functools.partial(_build_cast, model_path, precision), ".pt"
                )
                outputs = torchscript_outputs(config, built.path, validation, names, kind)
                accuracy = judge(precision, specs, reference, outputs, validation, limit)
            except PrecisionError as exc:
                variants.append(_failed(precision, str(exc)))
                continue
            except Exception as exc:  # scripting and casting raise many unrelated types
                error = f"building it failed: {type(exc).__name__}: {exc}"
                variants.append(_failed(precision, error))
                continue
            variants.append(
                PrecisionVariant(
                    precision,
                    built.path,
                    accuracy,
                    built.seconds,
                    method=f"{method}; checked {where}",
                    cached=built.cached,
                )
            )
    return variants


@dataclass(frozen=True, slots=True)
class _Context:
    config: mc.ModelConfig
    model_path: Path
    summary: GraphSummary
    validation: ValidationSet
    specs: list[OutputSpec]
    cache: VariantCache
    source_sha256: str
    limit: float
    threads: int
    engine_max_batch: int


def _reduced(precision: str, context: _Context, reference: Outputs) -> PrecisionVariant:
    if precision not in backend_precisions("onnxruntime"):
        return _failed(precision, f"{precision} variants are made for TorchScript models only")
    if precision in TRT_PRECISIONS:
        return _tensorrt(precision, context, reference)
    if precision in PLAN_PRECISIONS:
        return _engine(precision, context, reference)
    try:
        method, calibration, build = _plan(precision, context)
        key = VariantKey(context.source_sha256, precision, method, calibration)
        built = context.cache.get_or_build(key, build)
        log.info("%s variant %s (%s)", precision, built.path, "cached" if built.cached else "built")
        accuracy = check_accuracy(
            precision,
            built.path,
            reference,
            context.validation,
            context.specs,
            context.limit,
            context.threads,
        )
    except PrecisionError as exc:
        return _failed(precision, str(exc))
    except Exception as exc:  # the quantizer and converter raise many unrelated types
        return _failed(precision, f"building it failed: {type(exc).__name__}: {exc}")
    return PrecisionVariant(
        precision, built.path, accuracy, built.seconds, method=method, cached=built.cached
    )


def _tensorrt(precision: str, context: _Context, reference: Outputs) -> PrecisionVariant:
    if not tensorrt_available():
        return _failed(
            precision,
            "TensorRT is not available: it needs a GPU and onnxruntime-gpu with its "
            "TensorrtExecutionProvider (docs/gpu.md)",
        )
    mode = TRT_PRECISIONS[precision]
    table: Path | None = None
    build_seconds = 0.0
    try:
        if precision == "trt_int8":
            table, build_seconds = _calibration_table(context)
        with tempfile.TemporaryDirectory(prefix="trt-check-") as scratch:
            model_dir = Path(scratch)
            if table is not None:  # where the served config looks for it
                staged = model_dir / table_location()
                staged.parent.mkdir(parents=True)
                staged.symlink_to(table)
            # The providers the server derives from the served config: the check runs what
            # is served.
            served = apply(Candidate({PRECISION: precision}), context.config)
            providers, _ = execution_providers(served, "KIND_GPU", model_dir=model_dir)
            accuracy = check_accuracy(
                precision,
                context.model_path,
                reference,
                context.validation,
                context.specs,
                context.limit,
                context.threads,
                providers,
            )
    except (PrecisionError, ServeError) as exc:
        return _failed(precision, str(exc))
    method = f"TensorRT precision_mode {mode} (a config change; same model file)"
    if table is not None:
        method = f"{TABLE_METHOD} (a config change and a table; same model file)"
    return PrecisionVariant(
        precision,
        context.model_path,
        accuracy,
        build_seconds,
        method=method,
        calibration_table=table,
    )


def _engine(precision: str, context: _Context, reference: Outputs) -> PrecisionVariant:
    missing = tensorrt_engines_missing()
    if missing is not None:
        return _failed(
            precision,
            "a TensorRT engine needs a GPU, the tensorrt package and a CUDA build of torch: "
            f"{missing} (docs/gpu.md)",
        )
    platform = detect_platform()
    method = engine_method(
        precision,
        platform.tensorrt_version or "?",
        platform.gpus[0].name,
        context.engine_max_batch,
    )
    try:
        source, calibration, seconds = context.model_path, None, 0.0
        if precision == "plan_int8":  # the engine takes its scales from the QDQ model
            _, calibration, build_qdq = _static_int8(context)
            key = VariantKey(context.source_sha256, "int8", STATIC_METHOD, calibration)
            qdq = context.cache.get_or_build(key, build_qdq)
            source, seconds = qdq.path, qdq.seconds
        key = VariantKey(context.source_sha256, precision, method, calibration)
        built = context.cache.get_or_build(
            key,
            lambda target: build_engine(
                source, target, precision, context.config, context.engine_max_batch
            ),
            ".plan",
        )
        log.info("%s engine %s (%s)", precision, built.path, "cached" if built.cached else "built")
        outputs = _engine_outputs(built.path, context)
        accuracy = judge(
            precision, context.specs, reference, outputs, context.validation, context.limit
        )
    except (PrecisionError, ServeError) as exc:
        return _failed(precision, str(exc))
    except Exception as exc:  # TensorRT and the quantizer raise many unrelated types
        return _failed(precision, f"building it failed: {type(exc).__name__}: {exc}")
    return PrecisionVariant(
        precision,
        built.path,
        accuracy,
        seconds + built.seconds,
        method=method,
        cached=built.cached,
    )


def _engine_outputs(path: Path, context: _Context) -> Outputs:
    """Every validation sample through the engine, as the tensorrt backend runs it."""
    runner = open_engine(path)
    try:
        batch = min(16, context.engine_max_batch) if context.validation.batched else 1
        runs = [runner.run(feed).outputs for feed in context.validation.feeds(max(batch, 1))]
    finally:
        runner.close()
    return collect_outputs(runs, [s.name for s in context.specs], context.validation.batched)


def _calibration_table(context: _Context) -> tuple[Path, float]:
    """trt_int8's table, built once per (model, calibration inputs) in the variant cache."""
    subset = context.validation.head(CALIBRATION_COUNT)
    feeds = subset.feeds()
    key = VariantKey(context.source_sha256, "trt_int8", TABLE_METHOD, subset.digest())
    source = context.model_path
    try:
        built = context.cache.get_or_build(
            key, lambda target: build_calibration_table(source, target, feeds), ".flatbuffers"
        )
    except PrecisionError:
        raise
    except Exception as exc:  # onnxruntime's calibrator raises many unrelated types
        raise PrecisionError(
            f"the INT8 calibration table could not be made: {type(exc).__name__}: {exc}"
        ) from None
    return built.path, built.seconds


def _plan(precision: str, context: _Context) -> tuple[str, str | None, Callable[[Path], None]]:
    """(method description, calibration hash or None, builder writing to a given path)."""
    source = context.model_path
    if precision == "fp16":
        require_float(context.summary, precision)
        return FP16_METHOD, None, lambda target: build_fp16(source, target)
    if choose_int8_method(context.summary) is Int8Method.DYNAMIC:
        return DYNAMIC_METHOD, None, lambda target: build_int8_dynamic(source, target)
    return _static_int8(context)


def _static_int8(context: _Context) -> tuple[str, str, Callable[[Path], None]]:
    """The static QDQ int8 model: (method, calibration hash, builder)."""
    source = context.model_path
    subset = context.validation.head(CALIBRATION_COUNT)
    feeds, calibration = subset.feeds(), subset.digest()
    return STATIC_METHOD, calibration, lambda target: build_int8_static(source, target, feeds)


def _normalize(precisions: Sequence[str]) -> list[str]:
    wanted: list[str] = []
    for precision in precisions:
        name = precision.strip().lower()
        if name not in PRECISIONS:
            raise PrecisionError(
                f"unknown precision '{precision}': choose from {', '.join(PRECISIONS)}"
            )
        if name not in wanted:
            wanted.append(name)
    if not wanted:
        raise PrecisionError(f"no precision given: choose from {', '.join(PRECISIONS)}")
    return wanted


def _fp32(model_path: Path) -> PrecisionVariant:
    return PrecisionVariant("fp32", model_path, None, 0.0, method=FP32_METHOD)


def _failed(precision: str, error: str) -> PrecisionVariant:
    return PrecisionVariant(precision, None, None, 0.0, error=error)
