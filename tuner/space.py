"""The search space of one model: which tuned values it may take on this platform.

Built from the model's own config and the platform, with these rules:

- Batching is tuned only for models that already batch (`max_batch_size > 0`) and use the
  default or dynamic scheduler: the space never moves a model between 0 and > 0, which would
  change the meaning of its input dims. `dynamic_batching` is on or off; when off nothing else
  about batching is asked (requests arrive one at a time, so max_batch_size would not matter).
  When on: `max_batch_size` over powers of two from 2 up to a cap (the caller's: the tuner
  gives what the model's graph accepts, at most --max-batch-size-cap, see `tuner.run.
  model_space`; without one, the config's own max_batch_size, since the config alone cannot
  tell whether the graph accepts bigger batches; 1 is left out because it is batching off),
  the cap itself when it is no power of two, the queue delay
  from a small set (values that alone reach the latency limit are left out), and a preferred
  batch size only when the delay is > 0 (with no delay the batcher never waits for one):
  none, or max/2 or max/4. Triton's batcher guide says preferred sizes "should not be used for
  most models", so "none" is listed first and the priors use it.
- Instance kind: KIND_CPU, and KIND_GPU too where the server says the model's backend can run
  on a GPU here (`serve.api.gpu_unavailable_reason`: pytorch with a CUDA build of torch,
  onnxruntime with its CUDA provider, python). A python model gets KIND_GPU only when its
  config already asks for KIND_GPU or KIND_AUTO: its own code decides what runs where, and one
  that never looks at `model_instance_kind` would only be measured twice. Engines (the
  tensorrt backend) are GPU-only. The kind is asked first; every later choice may depend on it.
- Instances on the CPU: 1..4 and powers of two up to the core count, and the core count itself;
  on a GPU: 1..4 instances per GPU.
- onnxruntime on the CPU: intra_op_thread_count from 1 up to cores // instances (powers of two
  and that bound), asked after the instance count so that threads x instances <= cores always.
- onnxruntime: precision from the caller's list; trt_* only on GPU instances where onnxruntime
  has TensorRT, plan_* (engines on the tensorrt backend) only on GPU instances where the
  tensorrt backend can run them.
- pytorch (TorchScript): fp16 and bf16 on GPU instances; on the CPU bf16 only where the CPU
  has native bf16 and fp16 only when the caller asks for it (`cpu_fp16`: fp16 is never faster
  on a CPU). A kind left with fp32 alone asks no precision.
- On a kind other than the first, parameters whose choices differ are named after it
  (`instance_count[kind=gpu]`), since an Optuna parameter keeps one set of choices.
- The model's current values join these sets where they are valid, so its own config is
  usually a point of the space (`as_written`); values that are not are snapped to the nearest
  for the search's starting point (`default_candidate`), while the config as written is
  measured as it is, outside the space.

`walk` is the one description of the space: Optuna's define-by-run suggestions, the exhaustive
grid and the encoding of a candidate as Optuna parameters are all replays of it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tritonclient.grpc import model_config_pb2 as mc

from serve.api import (
    ServingPlatform,
    backend_name,
    backend_names,
    detect_platform,
    gpu_unavailable_reason,
    tensorrt_engines_missing,
)
from tuner.candidate import (
    DYNAMIC_BATCHING,
    INSTANCE_COUNT,
    INSTANCE_KIND,
    MAX_BATCH_SIZE,
    MAX_QUEUE_DELAY,
    PLAN_PRECISIONS,
    PRECISION,
    PRECISIONS,
    PREFERRED_BATCH_SIZE,
    THREAD_COUNT,
    TRT_PRECISIONS,
    Candidate,
    ParamValue,
    apply,
    config_precision,
)
from tuner.duration import Duration
from tuner.precisions import TORCH_PRECISIONS

DEFAULT_DELAYS_US = (0, 100, 500, 1000, 2000, 5000)
DEFAULT_GPU_INSTANCES = 4
CPU, GPU, AUTO = "KIND_CPU", "KIND_GPU", "KIND_AUTO"
ONNX_CPU_PRECISIONS = ("fp32", "fp16", "int8")

# choose(candidate field, Optuna parameter name, choices) -> the chosen value
Chooser = Callable[[str, str, Sequence[ParamValue]], ParamValue]


class SuggestingTrial(Protocol):
    """What `suggest` needs from a trial (Optuna's `Trial` has it)."""

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any: ...


@dataclass(frozen=True, slots=True)
class Platform:
    """What the search space may use on the server tuned: its cores, which backends run
    instances on a GPU, and which TensorRT and bf16 precisions it offers."""

    cpu_count: int
    gpu_backends: frozenset[str] = frozenset()  # backends whose instances can run on a GPU here
    tensorrt: bool = False  # onnxruntime has TensorRT (trt_* precisions)
    gpu_names: tuple[str, ...] = ()  # as the reports name the machine
    tensorrt_engines: bool = False  # the tensorrt backend can run engines (plan_* precisions)
    cpu_bf16: bool = False  # the CPU has native bf16 (bf16 on CPU instances)

    def gpu_for(self, backend: str) -> bool:
        return backend in self.gpu_backends

    @classmethod
    def detect(
        cls,
        serving: ServingPlatform | None = None,
        reason: Callable[[str, ServingPlatform], str | None] = gpu_unavailable_reason,
    ) -> Platform:
        """This machine as the server sees it (`serve.api.detect_platform()`): GPU instances
        for the backends the server would place on a GPU here (`reason`, the server's rule),
        trt_* precisions where onnxruntime has TensorRT, plan_* precisions where the tensorrt
        backend can run engines, bf16 on the CPU where it is native."""
        here = serving if serving is not None else detect_platform()
        names = tuple(gpu.name for gpu in here.gpus)
        usable = frozenset(b for b in backend_names() if here.gpus and reason(b, here) is None)
        engines = tensorrt_engines_missing(here) is None
        return cls(here.cpu_count, usable, here.onnxruntime_tensorrt, names, engines, here.cpu_bf16)


@dataclass(frozen=True, slots=True)
class SpaceOptions:
    """How the caller narrows a model's space (None: the default beside the field)."""

    precisions: tuple[str, ...] = ("fp32",)
    max_batch_cap: int | None = None  # default: the config's own max_batch_size
    delays_us: tuple[int, ...] = DEFAULT_DELAYS_US
    latency_limit: Duration | None = None  # delays >= this are left out
    max_instances: int | None = None  # default: the core count (python: x2; 4 on a GPU)
    tune_preferred: bool = True  # False: preferred_batch_size stays none (a smaller grid)
    # An ensemble's step: max_batch_size never below the ensemble's own (its requests batch
    # up to that size before they reach the step).
    min_batch_size: int = 0
    cpu_fp16: bool = False  # fp16 on CPU instances of TorchScript models (asked for explicitly)


@dataclass(frozen=True, slots=True)
class BatchingChoices:
    """The batcher values a batching model may take: max_batch_size and queue delays, and
    the preferred batch sizes worth trying for each max_batch_size (`preferred`)."""

    max_batch_sizes: tuple[int, ...]
    delays_us: tuple[int, ...]
    base_preferred: int | None
    tune_preferred: bool = True

    def preferred(self, max_batch_size: int) -> tuple[int | None, ...]:
        if not self.tune_preferred:
            return (None,)
        sizes = {max_batch_size // 2, max_batch_size // 4}
        if self.base_preferred is not None:
            sizes.add(self.base_preferred)
        return (None, *sorted(s for s in sizes if 2 <= s <= max_batch_size))


@dataclass(frozen=True, slots=True)
class KindChoices:
    """What may be chosen on instances of one kind."""

    counts: tuple[int, ...]  # instances (per GPU on KIND_GPU)
    threads: dict[int, tuple[int, ...]] | None = None  # instances -> onnxruntime thread counts
    precisions: tuple[str, ...] | None = None  # None: no precision is asked


@dataclass(frozen=True)
class SearchSpace:
    """The valid candidates of one model; see the module docstring for the rules."""

    model_name: str
    base: mc.ModelConfig = field(repr=False, compare=False)
    kinds: dict[str, KindChoices]  # KIND_CPU first when it is one
    batching: BatchingChoices | None

    @property
    def instance_kind(self) -> str:
        """The first kind (KIND_CPU unless the model runs only on a GPU)."""
        return next(iter(self.kinds))

    @property
    def instance_counts(self) -> tuple[int, ...]:
        return self.kinds[self.instance_kind].counts

    @property
    def thread_choices(self) -> dict[int, tuple[int, ...]] | None:
        return self.kinds[self.instance_kind].threads

    @property
    def precisions(self) -> tuple[str, ...] | None:
        return self.kinds[self.instance_kind].precisions

    def walk(self, choose: Chooser) -> Candidate:
        """Make every decision in order through `choose`; later choices depend on earlier ones."""
        kinds = tuple(self.kinds)
        kind = kinds[0] if len(kinds) == 1 else str(choose(INSTANCE_KIND, INSTANCE_KIND, kinds))
        suffix = "" if kind == kinds[0] else f"[kind={kind.removeprefix('KIND_').lower()}]"
        choices = self.kinds[kind]
        values: dict[str, ParamValue] = {INSTANCE_KIND: kind}
        count = _as_int(choose(INSTANCE_COUNT, INSTANCE_COUNT + suffix, choices.counts))
        values[INSTANCE_COUNT] = count
        if choices.threads is not None:
            name = f"{THREAD_COUNT}[instances={count}]{suffix}"
            values[THREAD_COUNT] = choose(THREAD_COUNT, name, choices.threads[count])
        if choices.precisions is not None:
            values[PRECISION] = choose(PRECISION, PRECISION + suffix, choices.precisions)
        batching = self.batching
        if batching is not None:
            on = bool(choose(DYNAMIC_BATCHING, DYNAMIC_BATCHING, (False, True)))
            values[DYNAMIC_BATCHING] = on
            if on:
                max_batch = _as_int(
                    choose(MAX_BATCH_SIZE, MAX_BATCH_SIZE, batching.max_batch_sizes)
                )
                delay = _as_int(choose(MAX_QUEUE_DELAY, MAX_QUEUE_DELAY, batching.delays_us))
                preferred = None
                if delay > 0 and batching.tune_preferred:
                    name = f"{PREFERRED_BATCH_SIZE}[{MAX_BATCH_SIZE}={max_batch}]"
                    preferred = choose(PREFERRED_BATCH_SIZE, name, batching.preferred(max_batch))
                values |= {
                    MAX_BATCH_SIZE: max_batch,
                    MAX_QUEUE_DELAY: delay,
                    PREFERRED_BATCH_SIZE: preferred,
                }
        return Candidate(values)

    def grid_points(self) -> tuple[Candidate, ...]:
        """Every valid candidate, the model's own config first."""
        return self._grid

    def suggest(self, trial: SuggestingTrial) -> Candidate:
        """Define-by-run: ask the trial for each value (enqueued trials answer with theirs)."""
        return self.walk(lambda _field, name, choices: trial.suggest_categorical(name, choices))

    def params_for(self, candidate: Candidate) -> dict[str, ParamValue]:
        """The Optuna parameters `suggest` would record for `candidate` (for enqueue_trial);
        ValueError when the candidate is not in this space."""
        return replayed_params(self.walk, candidate, self.model_name)

    def __contains__(self, candidate: object) -> bool:
        return contains(self, candidate)

    @functools.cached_property
    def _grid(self) -> tuple[Candidate, ...]:
        default = self.default_candidate()
        rest = [c for c in _enumerate(self.walk) if c != default]
        return (default, *rest)

    @property
    def size(self) -> int:
        return len(self._grid)

    def default_candidate(self) -> Candidate:
        """The model's own config as a point of the space (values outside it snapped)."""
        return self.walk(snapping(self._values_of(self.base)))

    def as_written(self) -> Candidate:
        """The model's config exactly as written: the point of the space that leaves it
        unchanged, or, when no point does (a queue delay outside the space, a thread count
        left unset, several preferred sizes...), the empty candidate, which changes nothing
        (`apply(Candidate(), base)` is `base`)."""
        point = self.point_of(self.base)
        return point if point is not None else Candidate()

    def point_of(self, config: mc.ModelConfig) -> Candidate | None:
        """The point of the space that turns the base config into `config` (the config as
        written, another tool's pick for this model), None when no point does."""
        snapped = self.walk(snapping(self._values_of(config)))
        return snapped if apply(snapped, self.base) == config else None

    def prior_candidates(self) -> list[Candidate]:
        """Where the search starts (after the config as written), after Triton's batcher
        guide: the model's own config snapped onto the space; batching on with no preferred
        size, no delay and the model's max_batch_size; and the latter in each other precision,
        on each kind (a GPU first: where a backend can use one it is the likely winner).
        Then what is known of the problem: every split of the cores between instances and
        threads that uses them all (threads x instances beyond the cores only contend), or
        the most instances per GPU, with batching on at the largest max_batch_size and no
        delay (with no delay the batcher never waits, so a large limit costs nothing at low
        load), in each precision (int8 roughly halves the compute). Duplicates removed, order
        kept."""
        wanted = self._values_of(self.base)
        priors = [self.default_candidate()]
        batching: dict[str, ParamValue] = {
            DYNAMIC_BATCHING: True,
            MAX_QUEUE_DELAY: 0,
            PREFERRED_BATCH_SIZE: None,
        }
        kinds = sorted(self.kinds, key=lambda kind: kind != GPU)
        first = wanted.get(PRECISION)

        def precisions(kind: str) -> list[str | None]:
            listed: list[str | None] = list(self.kinds[kind].precisions or [None])
            return sorted(listed, key=lambda p: p != first)

        for kind in kinds:
            for precision in precisions(kind):
                values = wanted | batching | {INSTANCE_KIND: kind}
                priors.append(self.walk(snapping(values | _precision(precision))))
        if self.batching is not None:
            batching[MAX_BATCH_SIZE] = self.batching.max_batch_sizes[-1]
        for kind in kinds:
            for precision in precisions(kind):
                for split in self._full_splits(kind):
                    values = wanted | batching | split | {INSTANCE_KIND: kind}
                    priors.append(self.walk(snapping(values | _precision(precision))))
        return list(dict.fromkeys(priors))

    def _full_splits(self, kind: str) -> list[dict[str, ParamValue]]:
        """Instance count and thread count pairs that use every core: each count with its
        most threads (without a thread choice, the most instances)."""
        choices = self.kinds[kind]
        if choices.threads is None:
            return [{INSTANCE_COUNT: choices.counts[-1]}]
        threads = choices.threads
        return [{INSTANCE_COUNT: count, THREAD_COUNT: threads[count][-1]} for count in threads]

    def describe_sizes(self) -> str:
        """Its size, as a group's composition names each member's."""
        return f"{self.model_name} {self.size}"

    def describe(self) -> list[str]:
        """One line per parameter, for reports."""
        lines = []
        for kind, choices in self.kinds.items():
            per = " per GPU" if kind == GPU else ""
            lines.append(f"instance_count ({kind}{per}): {_join(choices.counts)}")
            if choices.threads is not None:
                per = "; ".join(f"{n} inst: {_join(t)}" for n, t in choices.threads.items())
                lines.append(f"intra_op_thread_count ({kind}): {per}")
            if choices.precisions is not None:
                lines.append(f"precision ({kind}): {_join(choices.precisions)}")
        if self.batching is not None:
            lines += [
                "dynamic_batching: off, on",
                f"max_batch_size: {_join(self.batching.max_batch_sizes)}",
                f"max_queue_delay_microseconds: {_join(self.batching.delays_us)}",
            ]
            if self.batching.tune_preferred:
                lines.append("preferred_batch_size: none, max/2, max/4 (when the delay is > 0)")
        lines.append(f"{self.size} candidates")
        return lines

    def _values_of(self, base: mc.ModelConfig) -> dict[str, ParamValue]:
        group = base.instance_group[0] if base.instance_group else None
        count = group.count if group is not None and group.count > 0 else None
        kind = _group_kind(base)
        if kind == AUTO:  # the server's rule: a GPU where the backend can use one here
            kind = GPU if GPU in self.kinds else CPU
        values: dict[str, ParamValue] = {
            INSTANCE_KIND: kind,
            INSTANCE_COUNT: count or _default_instance_count(base, kind),
            THREAD_COUNT: _int_parameter(base, THREAD_COUNT),
            PRECISION: config_precision(base),
            DYNAMIC_BATCHING: base.HasField("dynamic_batching"),
            MAX_BATCH_SIZE: base.max_batch_size,
            MAX_QUEUE_DELAY: base.dynamic_batching.max_queue_delay_microseconds,
        }
        preferred = list(base.dynamic_batching.preferred_batch_size)
        values[PREFERRED_BATCH_SIZE] = max(preferred) if preferred else None
        return values


class Space(Protocol):
    """What the search loop needs of a space: one model's (`SearchSpace`) or a group's
    (`tuner.pipeline_space.PipelineSpace`, the composition of its members' spaces)."""

    @property
    def model_name(self) -> str: ...

    @property
    def size(self) -> int: ...

    def walk(self, choose: Chooser) -> Candidate: ...

    def suggest(self, trial: SuggestingTrial) -> Candidate: ...

    def params_for(self, candidate: Candidate) -> dict[str, ParamValue]: ...

    def as_written(self) -> Candidate: ...

    def prior_candidates(self) -> list[Candidate]: ...

    def grid_points(self) -> tuple[Candidate, ...]: ...

    def describe_sizes(self) -> str: ...

    def describe(self) -> list[str]: ...


def replayed_params(
    walk: Callable[[Chooser], Candidate], candidate: Candidate, model: str, where: str = ""
) -> dict[str, ParamValue]:
    """The Optuna parameters a walk records for `candidate`, replayed from its values;
    ValueError naming the value outside the space of `model` (`where`: on what, say), or
    saying the walk does not give `candidate` back."""
    params: dict[str, ParamValue] = {}

    def choose(field_name: str, name: str, choices: Sequence[ParamValue]) -> ParamValue:
        value = candidate.get(field_name)
        if value not in choices:
            raise ValueError(
                f"{candidate.key}: {field_name}={value!r} is not in the space of '{model}'{where} "
                f"(choices: {list(choices)})"
            )
        params[name] = value
        return value

    if walk(choose) != candidate:
        raise ValueError(f"{candidate.key}: not a candidate of '{model}'")
    return params


def contains(space: Space, candidate: object) -> bool:
    """Whether `candidate` is a point of `space` (its parameters replay)."""
    if not isinstance(candidate, Candidate):
        return False
    try:
        space.params_for(candidate)
    except ValueError:
        return False
    return True


def grid(space: Space) -> list[Candidate]:
    """Every valid candidate of `space`, the model's own config first."""
    return list(space.grid_points())


def build_space(
    base: mc.ModelConfig, platform: Platform, options: SpaceOptions | None = None
) -> SearchSpace:
    """The search space of the model whose config is `base` on `platform`."""
    options = options or SpaceOptions()
    backend = backend_name(base)
    name = base.name or "model"
    if base.platform == "ensemble" or base.HasField("ensemble_scheduling"):
        raise ValueError(f"'{name}': ensembles are not tuned; tune their composing models")
    unknown = [p for p in options.precisions if p not in PRECISIONS]
    if unknown:
        raise ValueError(
            f"unknown precision(s) {', '.join(unknown)} (known: {', '.join(PRECISIONS)})"
        )
    kinds: dict[str, KindChoices] = {}
    for kind in _kinds(base, backend, platform):
        counts = _instance_counts(base, kind, platform, options)
        threads = None
        if backend == "onnxruntime" and kind == CPU:
            threads = _thread_choices(base, platform.cpu_count, counts)
        precisions = _precisions(backend, kind, options, platform)
        if precisions != ():
            kinds[kind] = KindChoices(counts, threads, precisions)
    if not kinds:
        raise ValueError(
            f"none of the precisions {', '.join(options.precisions)} runs on this platform"
        )
    return SearchSpace(
        model_name=name, base=base, kinds=kinds, batching=_batching_choices(base, options)
    )


def _group_kind(base: mc.ModelConfig) -> str:
    if not base.instance_group:
        return CPU
    return mc.ModelInstanceGroup.Kind.Name(base.instance_group[0].kind)


def _kinds(base: mc.ModelConfig, backend: str, platform: Platform) -> tuple[str, ...]:
    if not platform.gpu_for(backend):
        return (CPU,)
    if backend == "tensorrt":
        return (GPU,)
    if backend == "python" and _group_kind(base) not in (GPU, AUTO):
        return (CPU,)
    return (CPU, GPU)


# A python model's CPU instance is a process of its own that waits for every batch to be handed
# over and its answer taken back, so its core idles part of the time: up to this many instances a
# core. (Model Analyzer's picks for the python digits model on Triton, 2 cores: 3 and 4
# instances; its 3-instance winner served 1.12x the 2-instance one re-measured beside it.)
PYTHON_INSTANCES_PER_CORE = 2


def _instance_counts(
    base: mc.ModelConfig, kind: str, platform: Platform, options: SpaceOptions
) -> tuple[int, ...]:
    if kind == GPU:
        limit = options.max_instances or DEFAULT_GPU_INSTANCES
        return tuple(range(1, limit + 1))
    cores = platform.cpu_count
    if backend_name(base) == "python":
        cores *= PYTHON_INSTANCES_PER_CORE
    limit = min(cores, options.max_instances or cores)
    counts = set(range(1, min(limit, 4) + 1)) | set(_powers_of_two(limit)) | {limit}
    if base.instance_group and 0 < base.instance_group[0].count <= limit:
        counts.add(base.instance_group[0].count)
    return tuple(sorted(counts))


def _thread_choices(
    base: mc.ModelConfig, cores: int, instances: Iterable[int]
) -> dict[int, tuple[int, ...]]:
    current = _int_parameter(base, THREAD_COUNT)
    choices = {}
    for count in instances:
        limit = max(1, cores // count)
        threads = set(_powers_of_two(limit)) | {limit}
        if current is not None and 1 <= current <= limit:
            threads.add(current)
        choices[count] = tuple(sorted(threads))
    return choices


def _precisions(
    backend: str, kind: str, options: SpaceOptions, platform: Platform
) -> tuple[str, ...] | None:
    """The precisions of `kind` instances; None when none is asked, () when none runs there."""
    requested = tuple(dict.fromkeys(options.precisions))
    if backend == "onnxruntime":
        return tuple(
            p
            for p in requested
            if p in ONNX_CPU_PRECISIONS
            or (kind == GPU and p in TRT_PRECISIONS and platform.tensorrt)
            or (kind == GPU and p in PLAN_PRECISIONS and platform.tensorrt_engines)
        )
    if backend == "pytorch":
        allowed = tuple(
            p
            for p in requested
            if p == "fp32"
            or (p in TORCH_PRECISIONS and kind == GPU)
            or (p == "bf16" and platform.cpu_bf16)
            or (p == "fp16" and options.cpu_fp16)
        )
        return allowed if set(allowed) - {"fp32"} else None
    return None


def _batching_choices(base: mc.ModelConfig, options: SpaceOptions) -> BatchingChoices | None:
    if base.max_batch_size <= 0 or base.WhichOneof("scheduling_choice") not in (
        None,
        "dynamic_batching",
    ):
        return None
    cap = options.max_batch_cap or base.max_batch_size
    if cap < 2:
        return None
    sizes = set(_powers_of_two(cap)) - {1} | {cap}
    if 2 <= base.max_batch_size <= cap:
        sizes.add(base.max_batch_size)
    sizes = {size for size in sizes if size >= options.min_batch_size}
    if not sizes:
        return None  # nothing between the ensemble's size and the cap: batching stays as is
    limit = None if options.latency_limit is None else options.latency_limit.us
    delays = {d for d in options.delays_us if d == 0 or limit is None or d < limit}
    base_delay = base.dynamic_batching.max_queue_delay_microseconds
    if base.HasField("dynamic_batching") and (limit is None or base_delay < limit):
        delays.add(base_delay)
    delays.add(0)
    preferred = list(base.dynamic_batching.preferred_batch_size)
    return BatchingChoices(
        max_batch_sizes=tuple(sorted(sizes)),
        delays_us=tuple(sorted(delays)),
        base_preferred=max(preferred) if preferred else None,
        tune_preferred=options.tune_preferred,
    )


def _precision(precision: str | None) -> dict[str, ParamValue]:
    return {PRECISION: precision} if precision else {}


def _default_instance_count(base: mc.ModelConfig, kind: str) -> int:
    # What the server does without a count (Triton's rule: 2 for onnxruntime on the CPU).
    return 2 if backend_name(base) == "onnxruntime" and kind == "KIND_CPU" else 1


def _int_parameter(config: mc.ModelConfig, key: str) -> int | None:
    if key not in config.parameters:
        return None
    try:
        return int(config.parameters[key].string_value)
    except ValueError:
        return None


def _powers_of_two(limit: int) -> list[int]:
    powers, value = [], 1
    while value <= limit:
        powers.append(value)
        value *= 2
    return powers


def _as_int(value: ParamValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer choice, got {value!r}")
    return value


def _join(values: Iterable[Any]) -> str:
    return ", ".join("none" if v is None else str(v) for v in values)


def snapping(wanted: dict[str, ParamValue]) -> Chooser:
    """Choose the wanted value, or the nearest choice when it is not one."""

    def choose(field_name: str, _name: str, choices: Sequence[ParamValue]) -> ParamValue:
        value = wanted.get(field_name)
        if value in choices:
            return value
        numbers = [c for c in choices if isinstance(c, int) and not isinstance(c, bool)]
        if isinstance(value, int) and not isinstance(value, bool) and numbers:
            return min(numbers, key=lambda c: (abs(c - value), c))
        if field_name == THREAD_COUNT and value is None:
            return choices[-1]  # unset: onnxruntime uses every core it is given
        return choices[0]

    return choose


def _enumerate(walk: Callable[[Chooser], Candidate]) -> list[Candidate]:
    """Every outcome of `walk`: replay it with each sequence of choice indices, depth first."""
    found: list[Candidate] = []

    def explore(prefix: list[int]) -> None:
        sizes: list[int] = []

        def choose(_field: str, _name: str, choices: Sequence[ParamValue]) -> ParamValue:
            at = len(sizes)
            sizes.append(len(choices))
            return choices[prefix[at] if at < len(prefix) else 0]

        found.append(walk(choose))
        taken = prefix + [0] * (len(sizes) - len(prefix))
        for position in range(len(prefix), len(sizes)):
            for alternative in range(1, sizes[position]):
                explore([*taken[:position], alternative])

    explore([])
    return found
