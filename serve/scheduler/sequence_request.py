"""A request's sequence parameters (sequence_id, sequence_start, sequence_end), checked with
Triton's rules and worded as Triton words its errors."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from serve.backends.base import RequestResult
from serve.errors import ServeError
from serve.inference import InferRequest

SequenceId = int | str

_UINT64_MAX = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class SequenceFlags:
    """A request's sequence id and whether it starts or ends its sequence (`sequence_flags`)."""

    id: SequenceId  # a non-zero number or a non-empty string
    start: bool
    end: bool


@dataclass(slots=True, eq=False)
class SequencePending:
    """A request waiting in, or running from, a sequence slot."""

    request: InferRequest
    on_done: Callable[[RequestResult], None]
    flags: SequenceFlags
    enqueue_ns: int
    dispatch_ns: int = 0


def _flag(request: InferRequest, key: str) -> bool:
    value = request.parameters.get(key, False)
    if not isinstance(value, bool):
        raise ServeError.invalid(
            f"request parameter '{key}' for model '{request.model_name}' must be a boolean, "
            f"got {value!r}"
        )
    return value


def sequence_flags(
    request: InferRequest, batched: bool, auto_id: Callable[[], SequenceId] | None = None
) -> SequenceFlags:
    """The request's sequence id and flags; ServeError(INVALID_ARGUMENT) when the sequence
    batcher cannot take it (batch size over 1, no id, a malformed parameter). With `auto_id`
    (iterative sequences), a request without an id starts a sequence of its own."""
    model = request.model_name
    if batched:
        for array in request.inputs.values():
            if array.ndim and array.shape[0] > 1:
                raise ServeError.invalid(
                    f"inference request to model '{model}' must specify batch-size 1 due to "
                    "requirements of sequence batcher"
                )
            break
    value = request.parameters.get("sequence_id", 0)
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ServeError.invalid(
            f"request parameter 'sequence_id' for model '{model}' must be an unsigned integer "
            f"or a string, got {value!r}"
        )
    if isinstance(value, int) and not 0 <= value <= _UINT64_MAX:
        raise ServeError.invalid(
            f"request parameter 'sequence_id' for model '{model}' must be an unsigned 64-bit "
            f"integer, got {value}"
        )
    if value == 0 or value == "":
        if auto_id is not None:
            return SequenceFlags(auto_id(), True, False)
        raise ServeError.invalid(
            f"inference request to model '{model}' must specify a non-zero or non-empty "
            "correlation ID"
        )
    return SequenceFlags(value, _flag(request, "sequence_start"), _flag(request, "sequence_end"))
