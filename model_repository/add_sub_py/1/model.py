"""Triton python-backend model: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1.

The config parameter EXECUTE_DELAY_MS (default "0") adds a sleep to every execute call,
which makes a deliberately slow model for tests and tuning experiments.
"""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        parameters = config.get("parameters") or {}
        raw = parameters.get("EXECUTE_DELAY_MS", {}).get("string_value", "0")
        try:
            delay_ms = float(raw)
        except ValueError:
            raise ValueError(f"parameter EXECUTE_DELAY_MS must be a number, got {raw!r}") from None
        if delay_ms < 0:
            raise ValueError(f"parameter EXECUTE_DELAY_MS must be >= 0, got {raw!r}")
        self.delay_s = delay_ms / 1000.0

    def execute(self, requests: list) -> list:
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        responses = []
        for request in requests:
            in0 = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            in1 = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            out0 = pb_utils.Tensor("OUTPUT0", (in0 + in1).astype(np.float32))
            out1 = pb_utils.Tensor("OUTPUT1", (in0 - in1).astype(np.float32))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out0, out1]))
        return responses

    def finalize(self) -> None:
        pass
