"""Request tracing as Triton's trace extension describes it: global settings with per-model
overrides, 1-in-N sampling, a count of traces left, and traces written as Triton's trace JSON.

The serving path asks `Tracer.active` (one attribute read) and does nothing more while no
setting traces. Settings are replaced, not changed, on update (as Triton does): a replaced
setting writes what it collected, and traces still in flight are written when they finish.
Runs on the event loop's thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from protocol.datatypes import wire_datatype
from serve.errors import ServeError
from serve.trace.request_trace import RequestTrace
from serve.trace.settings import DEFAULTS, SETTING_FIELDS, TraceValues, Update, parse_update
from serve.trace.trace_file import TraceFile

if TYPE_CHECKING:
    from serve.inference import InferRequest, InferResponse

    Completion = Callable[[InferResponse | ServeError], None]


class LiveSetting:
    """One scope's settings in force, with its sampling state and the traces not yet written."""

    def __init__(self, values: TraceValues, file: TraceFile | None) -> None:
        self.values = values
        self.remaining = values.count
        self._file = file
        self._seen = 0
        self._created = 0
        self._finished = 0
        self._collected: list[dict[str, Any]] = []
        self._in_batch = 0
        self._retired = False

    @property
    def tracing(self) -> bool:
        return bool(self.values.level) and self._file is not None and self.remaining != 0

    def sample(self) -> bool:
        """Count a request; True when it is the one in `rate` to trace."""
        if not self.tracing:
            return False
        self._seen += 1
        if self._seen % self.values.rate:
            return False
        if self.remaining > 0:
            self.remaining -= 1
        self._created += 1
        return True

    def collect(self, trace: RequestTrace) -> None:
        self._finished += 1
        self._collected += trace.entries()
        self._in_batch += 1
        frequency = self.values.log_frequency
        batch_full = bool(frequency) and self._in_batch >= frequency
        all_done = self.remaining == 0 and self._finished == self._created
        if batch_full or all_done or self._retired:
            self.flush()

    def flush(self) -> None:
        collected, self._collected, self._in_batch = self._collected, [], 0
        if self._file is None or not collected:
            return
        if self.values.log_frequency:
            self._file.write_indexed(collected)
        else:
            self._file.append(collected)

    def retire(self) -> None:
        """Replaced or stopping: write what was collected; late traces are written as they end."""
        self._retired = True
        self.flush()


class Tracer:
    """The server's trace settings (global and per model, Triton's trace extension) and the sampling
    of requests under them; `active` tells the serving path whether any setting traces."""

    def __init__(self, defaults: TraceValues = DEFAULTS) -> None:
        self._defaults = defaults
        self._global_overrides: dict[str, Any] = {}
        self._model_overrides: dict[str, dict[str, Any]] = {}
        self._files: dict[str, TraceFile] = {}
        self._global = self._live(defaults)
        self._models: dict[str, LiveSetting] = {}
        self._next_id = 1
        self.active = False  # some setting traces: the serving path's one check

    # -- settings -----------------------------------------------------------------------------

    def setting(self, model: str = "") -> dict[str, list[str]]:
        live = self._models.get(model, self._global) if model else self._global
        values = live.values
        if values.count != live.remaining:
            values = values.with_overrides({"count": live.remaining})
        return values.to_setting()

    def update(self, model: str, update: Update) -> dict[str, list[str]]:
        """Apply `update` to the model's settings ("" = global) and answer the settings now in
        force there; nothing changes when any value is bad."""
        parsed = parse_update(update)
        if not parsed:
            return self.setting(model)
        self._keep_remaining_counts()
        own = dict(self._model_overrides.get(model, {}) if model else self._global_overrides)
        for name, value in parsed.items():
            if value is None:
                own.pop(name, None)
            else:
                own[name] = value
        global_overrides = self._global_overrides if model else own
        model_overrides = dict(self._model_overrides)
        if model:
            if own:
                model_overrides[model] = own
            else:
                model_overrides.pop(model, None)
        # Check every scope the update reaches before changing any.
        global_values = self._defaults.with_overrides(global_overrides)
        global_values.check("globally")
        # A global change reaches the models that take some of their values from it.
        changed = (
            [model]
            if model
            else [n for n, o in model_overrides.items() if len(o) < len(SETTING_FIELDS)]
        )
        resolved = {
            name: global_values.with_overrides(model_overrides[name])
            for name in changed
            if name in model_overrides
        }
        for name, values in resolved.items():
            values.check(f"model '{name}'")
        self._global_overrides = global_overrides
        self._model_overrides = model_overrides
        if not model:
            self._replace_global(global_values)
        for name in changed:
            old = self._models.pop(name, None)
            if old is not None:
                old.retire()
            if name in resolved:
                self._models[name] = self._live(resolved[name])
        self._refresh()
        return self.setting(model)

    def _keep_remaining_counts(self) -> None:
        """A count given earlier carries on from what is left of it, as in Triton."""
        if "count" in self._global_overrides:
            self._global_overrides["count"] = self._global.remaining
        for name, overrides in self._model_overrides.items():
            if "count" in overrides and name in self._models:
                overrides["count"] = self._models[name].remaining

    def _replace_global(self, values: TraceValues) -> None:
        old, self._global = self._global, self._live(values)
        old.retire()

    def _live(self, values: TraceValues) -> LiveSetting:
        file = None
        if values.file:
            file = self._files.get(values.file)
            if file is None:
                file = self._files[values.file] = TraceFile(values.file)
        return LiveSetting(values, file)

    def _refresh(self) -> None:
        self.active = self._global.tracing or any(m.tracing for m in self._models.values())

    # -- requests -----------------------------------------------------------------------------

    def sample(self, model_name: str) -> RequestTrace | None:
        """A new trace when this request of `model_name` is one to trace."""
        live = self._models.get(model_name, self._global)
        if not live.sample():
            return None
        trace = RequestTrace(self._next_id, model_name, live.values.level, live.collect)
        self._next_id += 1
        if live.remaining == 0:
            self._refresh()
        return trace

    def attach(self, request: InferRequest, version: int, on_done: Completion) -> Completion:
        """Trace the request from here to its completion when it is sampled (or a transport
        sampled it already); returns the completion to use in place of `on_done`."""
        trace = request.trace
        if trace is None:
            trace = self.sample(request.model_name)
            if trace is None:
                return on_done
            request.trace = trace
        trace.model_version = version
        trace.request_id = request.id
        trace.core_held = True
        trace.hold()
        trace.stamp("REQUEST_START")
        return lambda result: self._complete(request, trace, result, on_done)

    @staticmethod
    def _complete(
        request: InferRequest,
        trace: RequestTrace,
        result: InferResponse | ServeError,
        on_done: Completion,
    ) -> None:
        if trace.tensors_on:
            # Inputs are recorded here, once shared-memory inputs have been read in as well.
            for name, array in request.inputs.items():
                datatype = request.input_datatypes.get(name) or wire_datatype(array.dtype)
                trace.tensor("TENSOR_QUEUE_INPUT", name, datatype, array)
        if trace.tensors_on and not isinstance(result, ServeError):
            for output in result.outputs:
                trace.tensor("TENSOR_BACKEND_OUTPUT", output.name, output.datatype, output.data)
        trace.stamp("REQUEST_END")
        try:
            on_done(result)
        finally:
            Tracer.detach(request)

    @staticmethod
    def detach(request: InferRequest) -> None:
        """The core is done with the request's trace (it failed before it was queued, or it
        completed)."""
        trace = request.trace
        if trace is not None and trace.core_held:
            trace.core_held = False
            trace.release()

    def close(self) -> None:
        """Write everything collected (at server stop)."""
        self._global.retire()
        for live in self._models.values():
            live.retire()
        self.active = False
