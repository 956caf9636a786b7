"""Checking a request against the model config, and shaping the response's outputs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from protocol.datatypes import WIRE_TO_NUMPY, config_to_wire
from serve.backends.base import ProducedOutputs
from serve.errors import ServeError
from serve.inference import InferRequest, InferResponse, OutputTensor
from serve.model.classification import (
    CLASSIFICATION,
    Labels,
    check_classification,
    topk_classification,
)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """An input or output of the config as requests are checked against it: its wire datatype, its
    dims without the batch dimension (-1 where variable), its reshape and whether it is
    optional."""

    name: str
    datatype: str  # wire name
    dims: tuple[int, ...]  # without the batch dimension
    reshape: tuple[int, ...] | None
    optional: bool = False


def _spec(tensor: mc.ModelInput | mc.ModelOutput) -> TensorSpec:
    reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
    return TensorSpec(
        name=tensor.name,
        datatype=config_to_wire(mc.DataType.Name(tensor.data_type)),
        dims=tuple(tensor.dims),
        reshape=reshape,
        optional=getattr(tensor, "optional", False),
    )


def _matches(shape: tuple[int, ...], dims: tuple[int, ...]) -> bool:
    return len(shape) == len(dims) and all(
        d == -1 or d == s for s, d in zip(shape, dims, strict=True)
    )


def _shape_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


class TensorChecker:
    """Validates requests for one model version and builds its responses."""

    def __init__(
        self, config: mc.ModelConfig, version: str, labels: Mapping[str, Labels] | None = None
    ) -> None:
        self.model = config.name
        self.version = version
        self.max_batch_size = config.max_batch_size
        self.inputs = {t.name: _spec(t) for t in config.input}
        self.outputs = {t.name: _spec(t) for t in config.output}
        self._required = [s.name for s in self.inputs.values() if not s.optional]
        self.labels = dict(labels or {})  # output name -> its classification labels

    def check_request(self, request: InferRequest) -> None:
        """Raise ServeError(INVALID_ARGUMENT) naming the tensor; apply config reshapes."""
        model = self.model
        for name in request.inputs:
            if name not in self.inputs:
                raise ServeError.invalid(f"unexpected inference input '{name}' for model '{model}'")
        for name in self._required:
            if name not in request.inputs:
                raise ServeError.invalid(
                    f"expected {len(self._required)} inputs but got {len(request.inputs)} "
                    f"inputs for model '{model}'; missing input '{name}'"
                )
        batch = None
        for name, array in request.inputs.items():
            spec = self.inputs[name]
            sent = request.input_datatypes.get(name)
            if sent is not None and sent != spec.datatype:
                raise ServeError.invalid(
                    f"inference input '{name}' data-type is '{sent}', but model '{model}' "
                    f"expects '{spec.datatype}'"
                )
            if sent is None and array.dtype != WIRE_TO_NUMPY[spec.datatype]:
                raise ServeError.invalid(
                    f"inference input '{name}' has dtype {array.dtype}, but model '{model}' "
                    f"expects '{spec.datatype}'"
                )
            shape = tuple(int(d) for d in array.shape)
            item_shape = shape
            if self.max_batch_size > 0:
                if not shape:
                    raise ServeError.invalid(
                        f"inference input '{name}' for model '{model}' needs a batch dimension"
                    )
                if batch is None:
                    batch = shape[0]
                elif shape[0] != batch:
                    raise ServeError.invalid(
                        f"input '{name}' batch size {shape[0]} does not match the other "
                        f"inputs' batch size {batch} for model '{model}'"
                    )
                if not 1 <= shape[0] <= self.max_batch_size:
                    raise ServeError.invalid(
                        f"inference request batch-size must be <= {self.max_batch_size} for "
                        f"'{model}', got {shape[0]} for input '{name}'"
                    )
                item_shape = shape[1:]
            if not _matches(item_shape, spec.dims):
                expected = (-1, *spec.dims) if self.max_batch_size > 0 else spec.dims
                raise ServeError.invalid(
                    f"unexpected shape for input '{name}' for model '{model}'. "
                    f"Expected {_shape_text(expected)}, got {_shape_text(shape)}"
                )
            if spec.reshape is not None:
                lead = shape[:1] if self.max_batch_size > 0 else ()
                request.inputs[name] = array.reshape(lead + spec.reshape)
        if request.requested_outputs is not None:
            for output in request.requested_outputs:
                if output.name not in self.outputs:
                    raise ServeError.invalid(
                        f"unexpected inference output '{output.name}' for model '{model}'"
                    )
                if CLASSIFICATION in output.parameters:  # kept as the checked int
                    output.parameters[CLASSIFICATION] = check_classification(
                        output.parameters[CLASSIFICATION],
                        self.outputs[output.name].datatype,
                        output.name,
                        model,
                    )

    def responder(
        self,
        request: InferRequest,
        on_done: Callable[[InferResponse | ServeError], None],
    ) -> Callable[[dict[str, np.ndarray] | ServeError], None]:
        """A completion for `request`: what the model produced becomes the response `on_done`
        gets (an error as it is, or the error making the response raised)."""

        def finish(result: dict[str, np.ndarray] | ServeError) -> None:
            if isinstance(result, ServeError):
                on_done(result)
                return
            try:
                response = self.make_response(request, result)
            except ServeError as exc:
                on_done(exc)
                return
            on_done(response)

        return finish

    def wanted_outputs(self, request: InferRequest) -> list[str]:
        """The outputs `request` is answered with: those it asks for (each once), or all."""
        if request.requested_outputs is None:
            return list(self.outputs)
        return list(dict.fromkeys(o.name for o in request.requested_outputs))

    def make_response(
        self, request: InferRequest, produced: dict[str, np.ndarray]
    ) -> InferResponse:
        classify: dict[str, int] = {}
        if request.requested_outputs is None:
            names = list(self.outputs)
        else:
            names = [o.name for o in request.requested_outputs]
            for o in request.requested_outputs:
                if CLASSIFICATION in o.parameters:
                    classify[o.name] = o.parameters[CLASSIFICATION]
        outputs = []
        for name in names:
            spec = self.outputs[name]
            array = produced.get(name)
            if array is None:
                raise ServeError.internal(f"model '{self.model}' did not produce output '{name}'")
            expected = WIRE_TO_NUMPY[spec.datatype]
            if array.dtype != expected and spec.datatype != "BYTES":
                array = array.astype(expected)
            if spec.reshape is not None:
                lead = array.shape[:1] if self.max_batch_size > 0 else ()
                array = array.reshape(lead + spec.dims)
            if name in classify:
                batched = self.max_batch_size > 0
                classes = topk_classification(
                    array, classify[name], batched, self.labels.get(name), name
                )
                outputs.append(OutputTensor(name, "BYTES", classes))
                continue
            outputs.append(OutputTensor(name, spec.datatype, array))
        return InferResponse(
            model_name=self.model,
            model_version=self.version,
            outputs=outputs,
            id=request.id,
            parameters=produced.parameters if isinstance(produced, ProducedOutputs) else {},
        )
