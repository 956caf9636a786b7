"""Triton's pytorch (libtorch) backend: a TorchScript `model.pt` run with torch, on the CPU or
(KIND_GPU, with a CUDA build of torch) on the GPU its instance is given, on a stream of its own
with its inputs and outputs through pinned buffers (`torch_device.py`); the config's
`parameters` as `pytorch_options.py` reads them.

Input mapping follows Triton: when every config input name is an argument of `forward()`, the
inputs are passed by keyword; otherwise, when every name follows the `<name>__<index>` convention,
positionally by index; otherwise positionally in config order. A model may return one tensor, a
tuple/list of tensors (mapped by `<name>__<index>` or config order) or a dict of tensors (by key).

torch is imported only when an instance loads, so the backend's metadata needs no torch.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from protocol.datatypes import config_to_wire, numpy_dtype, wire_datatype, wire_to_config
from protocol.errors import ProtocolError
from serve.backends.base import Backend, BatchTimes, InstanceContext, ModelInstance, RequestResult
from serve.backends.batching import batch_rows, concat_inputs, split_outputs
from serve.backends.pytorch_options import TorchOptions
from serve.backends.torch_device import DeviceFeed
from serve.errors import ServeError
from serve.inference import InferRequest
from serve.platform import ServingPlatform

if TYPE_CHECKING:
    import torch

_log = logging.getLogger(__name__)

_INDEXED_NAME = re.compile(r"^.+__(\d+)$")

# torch allows setting the inter-op pool size once per process, before any parallel work.
_interop_lock = threading.Lock()
_interop_threads: int | None = None


@dataclass(frozen=True, slots=True)
class _InputPlan:
    names: tuple[str, ...]  # config inputs in the order forward() takes them
    by_keyword: bool  # forward(name=tensor) rather than positional
    omittable: frozenset[str]  # optional inputs whose forward() argument has a default


@dataclass(frozen=True, slots=True)
class _OutputPlan:
    names: tuple[str, ...]  # config order
    index: dict[str, int]  # position in a returned tuple/list
    dtypes: dict[str, np.dtype]


def _name_indices(names: Sequence[str]) -> dict[str, int] | None:
    """`{name: index}` when every name follows `<name>__<index>`, else None."""
    matches = [_INDEXED_NAME.match(name) for name in names]
    if not names or not all(matches):
        return None
    return {name: int(m.group(1)) for name, m in zip(names, matches, strict=True) if m}


def _tensor_dtype(model: str, kind: str, tensor: mc.ModelInput | mc.ModelOutput) -> np.dtype:
    type_name = mc.DataType.Name(tensor.data_type)
    if type_name == "TYPE_STRING":
        raise ServeError.unavailable(
            f"model '{model}': {kind} '{tensor.name}' is TYPE_STRING, which the pytorch backend "
            "does not support"
        )
    try:
        return numpy_dtype(config_to_wire(type_name))
    except ProtocolError:
        raise ServeError.unavailable(
            f"model '{model}': {kind} '{tensor.name}' has unsupported data_type {type_name}"
        ) from None


def _plan_inputs(
    model: str, config: mc.ModelConfig, forward_args: list[tuple[str, bool]] | None
) -> _InputPlan:
    names = [tensor.name for tensor in config.input]
    for tensor in config.input:
        _tensor_dtype(model, "input", tensor)
    if forward_args is not None:
        has_default = dict(forward_args)
        if all(name in has_default for name in names):
            unfed = [arg for arg, default in forward_args if not default and arg not in names]
            if unfed:
                raise ServeError.unavailable(
                    f"model '{model}': forward() argument '{unfed[0]}' has no config input"
                )
            omittable = frozenset(
                t.name for t in config.input if t.optional and has_default[t.name]
            )
            return _InputPlan(tuple(names), True, omittable)
    indices = _name_indices(names)
    if indices is None:
        ordered = names
    else:
        if sorted(indices.values()) != list(range(len(names))):
            raise ServeError.unavailable(
                f"model '{model}': inputs named <name>__<index> must use indices "
                f"0..{len(names) - 1} once each, got {', '.join(names)}"
            )
        ordered = sorted(names, key=lambda name: indices[name])
    if forward_args is not None:
        required = sum(1 for _, default in forward_args if not default)
        if not required <= len(ordered) <= len(forward_args):
            raise ServeError.unavailable(
                f"model '{model}': config declares {len(ordered)} inputs but forward() takes "
                f"{required} to {len(forward_args)} arguments"
            )
    return _InputPlan(tuple(ordered), False, frozenset())


def _plan_outputs(model: str, config: mc.ModelConfig) -> _OutputPlan:
    names = tuple(tensor.name for tensor in config.output)
    dtypes = {tensor.name: _tensor_dtype(model, "output", tensor) for tensor in config.output}
    indices = _name_indices(names)
    if indices is None:
        indices = {name: position for position, name in enumerate(names)}
    elif len(set(indices.values())) != len(names):
        raise ServeError.unavailable(
            f"model '{model}': outputs named <name>__<index> repeat an index: {', '.join(names)}"
        )
    return _OutputPlan(names, indices, dtypes)


def _forward_arguments(module: Any) -> list[tuple[str, bool]] | None:
    """forward()'s arguments without `self`, as (name, has a default); None if unknown."""
    try:
        arguments = module.forward.schema.arguments
    except (AttributeError, RuntimeError):
        return None
    return [(arg.name, bool(arg.has_default_value())) for arg in arguments[1:]]


def _apply_thread_counts(options: TorchOptions) -> None:
    """Both pools are process-wide in torch, as they are in Triton's backend."""
    global _interop_threads
    import torch

    if options.intra_op_threads > 0:
        torch.set_num_threads(options.intra_op_threads)
    wanted = options.inter_op_threads
    if wanted <= 0:
        return
    with _interop_lock:
        if _interop_threads is None:
            try:
                torch.set_num_interop_threads(wanted)
                _interop_threads = wanted
            except RuntimeError:
                _interop_threads = torch.get_num_interop_threads()
        if _interop_threads != wanted:
            _log.warning(
                "INTER_OP_THREAD_COUNT %d ignored: torch's inter-op pool is fixed at %d threads "
                "for this process",
                wanted,
                _interop_threads,
            )


def _to_tensor(array: np.ndarray) -> torch.Tensor:
    import torch

    # from_numpy shares memory: it needs a native-order array, and a read-only buffer (e.g.
    # np.frombuffer over request bytes) must not be handed to a model that may write in place.
    if not (array.flags.c_contiguous and array.flags.writeable and array.dtype.isnative):
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("=")).copy()
    return torch.from_numpy(array)


def _type_name(dtype: np.dtype) -> str:
    try:
        return wire_to_config(wire_datatype(dtype))
    except ProtocolError:
        return str(dtype)


def _error_text(exc: Exception) -> str:
    import torch

    text = str(exc).strip()
    if isinstance(exc, torch.jit.Error) and text:
        # The last line holds the raised error; the rest is the TorchScript source traceback.
        return text.splitlines()[-1].strip()
    return text or type(exc).__name__


class PyTorchInstance(ModelInstance):
    """One TorchScript module, on the CPU or (KIND_GPU) on its instance's CUDA device: inputs
    are copied there and outputs back, on the instance's stream (`DeviceFeed`)."""

    def __init__(self, context: InstanceContext) -> None:
        super().__init__(context)
        self._module: Any = None
        self._options = TorchOptions()
        self._inputs = _InputPlan((), False, frozenset())
        self._outputs = _OutputPlan((), {}, {})
        self._batching = context.config.max_batch_size > 0
        self._device = "cpu"
        self._feed: DeviceFeed | None = None  # on a GPU: the instance's stream and buffers

    def load(self) -> None:
        import torch

        ctx = self.context
        path = ctx.model_path
        self._options = TorchOptions.from_config(ctx.config, str(ctx.model_dir / "config.pbtxt"))
        self._outputs = _plan_outputs(ctx.model_name, ctx.config)
        if not path.is_file():
            raise ServeError.unavailable(
                f"model '{ctx.model_name}': TorchScript file '{path}' not found"
            )
        _apply_thread_counts(self._options)
        if ctx.kind == "KIND_GPU":
            self._device = f"cuda:{ctx.device_id}"
        for warning in self._options.warnings(on_gpu=self._device != "cpu"):
            _log.warning("%s: %s", ctx.instance_name, warning)
        try:
            module = torch.jit.load(str(path), map_location=self._device)
        except Exception as exc:
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ServeError.unavailable(
                f"model '{ctx.model_name}': cannot load TorchScript file '{path}': {reason}"
            ) from exc
        module.eval()
        self._inputs = _plan_inputs(ctx.model_name, ctx.config, _forward_arguments(module))
        self._module = module
        if self._device != "cpu":
            self._feed = DeviceFeed(self._device)

    def unload(self) -> None:
        self._module = None
        self._feed = None

    def execute(self, requests: Sequence[InferRequest], times: BatchTimes) -> list[RequestResult]:
        results: dict[int, RequestResult] = {}
        runs: list[tuple[tuple[str, ...], list[int]]] = []
        batches: dict[tuple[str, ...], list[int]] = {}
        for position, request in enumerate(requests):
            missing = [
                name
                for name in self._inputs.names
                if name not in request.inputs and name not in self._inputs.omittable
            ]
            if missing:
                results[position] = ServeError.invalid(
                    f"model '{self.context.model_name}' needs input '{missing[0]}'"
                )
                continue
            present = tuple(name for name in self._inputs.names if name in request.inputs)
            # Requests that give the same inputs share one forward() when the model batches.
            if self._batching:
                batches.setdefault(present, []).append(position)
            else:
                runs.append((present, [position]))
        runs.extend(batches.items())
        for present, positions in runs:
            batch = [requests[position] for position in positions]
            for position, result in zip(positions, self._run(batch, present, times), strict=True):
                results[position] = result
        return [results[position] for position in range(len(requests))]

    def _run(
        self, batch: Sequence[InferRequest], present: tuple[str, ...], times: BatchTimes
    ) -> list[RequestResult]:
        model = self.context.model_name
        start = time.perf_counter_ns()
        rows = [batch_rows(request) for request in batch]
        try:
            tensors = self._device_inputs(batch, present)
        except Exception as exc:
            error = ServeError.internal(f"model '{model}': cannot prepare inputs: {exc}")
            return [error] * len(batch)
        inputs_done = time.perf_counter_ns()
        times.compute_input_ns += inputs_done - start
        try:
            raw = self._forward(tensors)
        except Exception as exc:
            _log.debug("model '%s' forward() failed", model, exc_info=True)
            error = ServeError.internal(f"model '{model}' failed: {_error_text(exc)}")
            return [error] * len(batch)
        finally:
            infer_done = time.perf_counter_ns()
            times.compute_infer_ns += infer_done - inputs_done
        try:
            outputs = self._to_arrays(raw, sum(rows))
            results: list[RequestResult] = list(split_outputs(outputs, rows))
        except ServeError as error:
            results = [error] * len(batch)
        times.compute_output_ns += time.perf_counter_ns() - infer_done
        return results

    def _device_inputs(
        self, batch: Sequence[InferRequest], present: Sequence[str]
    ) -> dict[str, torch.Tensor]:
        """The batch's inputs as tensors on the instance's device, the requests' rows stacked."""
        feed = self._feed
        if feed is not None:
            return {name: feed.upload(name, [r.inputs[name] for r in batch]) for name in present}
        arrays = concat_inputs(batch) if len(batch) > 1 else batch[0].inputs
        return {name: _to_tensor(arrays[name]) for name in present}

    def _forward(self, tensors: dict[str, torch.Tensor]) -> Any:
        import torch

        options = self._options
        # Executor and profiling mode are process-wide in torch; set only when the config asks.
        if options.jit_executor is not None:
            torch._C._jit_set_profiling_executor(options.jit_executor)
        if options.jit_profiling is not None:
            torch._C._jit_set_profiling_mode(options.jit_profiling)
        if options.tensor_fuser is not None:
            torch._C._jit_set_texpr_fuser_enabled(options.tensor_fuser)
        on_gpu = self._device != "cpu"
        with ExitStack() as stack:
            stack.enter_context(
                torch.inference_mode() if options.inference_mode else torch.no_grad()
            )
            stack.enter_context(torch.jit.optimized_execution(options.optimized_execution))
            if on_gpu and not options.cudnn:
                stack.enter_context(torch.backends.cudnn.flags(enabled=False))
            if on_gpu and options.cache_cleaning:
                stack.callback(torch.cuda.empty_cache)
            if self._feed is not None:
                stack.enter_context(self._feed.on_stream())
            if self._inputs.by_keyword:
                return self._module(**tensors)
            return self._module(*(tensors[name] for name in self._inputs.names))

    def run_arrays(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One forward() on whole arrays (the batch dimension included where the model
        batches), outside any server: the config's outputs as numpy arrays."""
        present = [name for name in self._inputs.names if name in arrays]
        feed = self._feed
        if feed is not None:
            tensors = {name: feed.upload(name, [arrays[name]]) for name in present}
        else:
            tensors = {name: _to_tensor(arrays[name]) for name in present}
        raw = self._forward(tensors)
        rows = len(arrays[present[0]]) if self._batching and present else 0
        return self._to_arrays(raw, rows)

    def _to_arrays(self, raw: Any, total_rows: int) -> dict[str, np.ndarray]:
        """The config's outputs picked out of what forward() returned, as numpy arrays."""
        import torch

        model = self.context.model_name
        plan = self._outputs
        picked: dict[str, Any] = {}
        if isinstance(raw, torch.Tensor):
            if len(plan.names) != 1:
                raise ServeError.internal(
                    f"model '{model}' returned one tensor but its config declares "
                    f"{len(plan.names)} outputs"
                )
            picked[plan.names[0]] = raw
        elif isinstance(raw, (tuple, list)):
            for name in plan.names:
                if plan.index[name] >= len(raw):
                    raise ServeError.internal(
                        f"model '{model}': output '{name}' is result {plan.index[name]} but "
                        f"forward() returned {len(raw)} values"
                    )
                picked[name] = raw[plan.index[name]]
        elif isinstance(raw, dict):
            for name in plan.names:
                if name not in raw:
                    keys = ", ".join(map(str, raw)) or "none"
                    raise ServeError.internal(
                        f"model '{model}': output '{name}' is not among the returned keys ({keys})"
                    )
                picked[name] = raw[name]
        else:
            raise ServeError.internal(
                f"model '{model}' returned {type(raw).__name__}; expected a tensor, "
                "a tuple/list of tensors or a dict of tensors"
            )
        for name, value in picked.items():
            if not isinstance(value, torch.Tensor):
                raise ServeError.internal(
                    f"model '{model}': output '{name}' is {type(value).__name__}, not a tensor"
                )
        return {
            name: self._output_array(name, array, total_rows)
            for name, array in self._host_arrays(picked).items()
        }

    def _host_arrays(self, tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
        """The outputs in host memory: through the instance's stream and buffers on a GPU. A
        dtype numpy has no type for (e.g. bfloat16) is an error naming the output."""
        feed = self._feed
        if feed is not None:
            try:
                return feed.download(tensors)
            except TypeError:
                if feed.stream is not None:
                    feed.stream.synchronize()
        arrays = {}
        for name, value in tensors.items():
            try:
                arrays[name] = value.detach().cpu().numpy()
            except TypeError as exc:
                raise ServeError.internal(
                    f"model '{self.context.model_name}': output '{name}' is {value.dtype}, "
                    f"which the config's {_type_name(self._outputs.dtypes[name])} cannot carry"
                ) from exc
        return arrays

    def _output_array(self, name: str, array: np.ndarray, total_rows: int) -> np.ndarray:
        model = self.context.model_name
        array = np.ascontiguousarray(array)
        expected = self._outputs.dtypes[name]
        if array.dtype != expected:
            raise ServeError.internal(
                f"model '{model}': output '{name}' is {_type_name(array.dtype)} but the config "
                f"declares {_type_name(expected)}"
            )
        if self._batching and (array.ndim == 0 or array.shape[0] != total_rows):
            raise ServeError.internal(
                f"model '{model}': output '{name}' has shape {list(array.shape)}, expected "
                f"{total_rows} rows along the batch dimension"
            )
        return array


class PyTorchBackend(Backend):
    """TorchScript models (`platform: "pytorch_libtorch"` or `backend: "pytorch"`)."""

    name = "pytorch"
    default_model_filename = "model.pt"
    platforms = ("pytorch_libtorch",)

    def autocomplete(
        self, config: mc.ModelConfig, model_path: Path, settings: Mapping[str, str] | None = None
    ) -> None:
        """TorchScript carries no reliable I/O types, so the config must declare them."""
        missing = [
            field
            for field, tensors in (("input", config.input), ("output", config.output))
            if not tensors
        ]
        if missing:
            absent = " and ".join(f"'{field}'" for field in missing)
            raise ServeError.invalid(
                f"pytorch models need 'input' and 'output' in config.pbtxt; model "
                f"'{config.name}' declares no {absent}"
            )

    def gpu_unavailable_reason(self, platform: ServingPlatform) -> str | None:
        if not platform.gpus:
            return "no GPU is visible"
        import torch

        if not torch.cuda.is_available():
            return f"torch {torch.__version__} here cannot use CUDA (a CPU build of torch?)"
        return None

    def create_instance(self, context: InstanceContext) -> ModelInstance:
        return PyTorchInstance(context)


class TorchScriptRunner:
    """A TorchScript model as the pytorch backend runs it, outside a server (the tuner's
    accuracy check): same input mapping, output checks and config parameters."""

    def __init__(self, config: mc.ModelConfig, path: Path, kind: str, device_id: int) -> None:
        name = config.name or path.stem
        context = InstanceContext(
            model_name=name,
            model_version=1,
            repository_path=path.parent,
            model_dir=path.parent,
            model_path=path,
            config=config,
            instance_name=f"{name}_0",
            instance_index=0,
            kind=kind,
            device_id=device_id,
        )
        self._instance = PyTorchInstance(context)
        self._instance.load()

    def run(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self._instance.run_arrays(arrays)

    def close(self) -> None:
        self._instance.unload()
