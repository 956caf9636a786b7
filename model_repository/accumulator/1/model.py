"""Triton python-backend model for the sequence batcher: a running sum per sequence.

OUTPUT is the sum of the sequence's INPUT values so far. The sequence batcher tells the model,
per request, whether the sequence starts (START), ends (END), whether the row holds a request
at all (READY: a batch row of an empty slot does not) and which sequence it is (CORRID, a
string; numeric sequence ids arrive as their decimal text). START resets the sum; END forgets
it. Sums are kept per instance: a sequence's requests all run on the instance it was bound to.
"""

import numpy as np
import triton_python_backend_utils as pb_utils


def _scalar(request, name: str):
    return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        self.sums: dict[object, np.ndarray] = {}

    def execute(self, requests: list) -> list:
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            if not _scalar(request, "READY"):
                zeros = np.zeros_like(value, dtype=np.float32)
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", zeros)]))
                continue
            sequence = _scalar(request, "CORRID")
            previous = 0 if _scalar(request, "START") else self.sums.get(sequence, 0)
            total = (previous + value).astype(np.float32)
            if _scalar(request, "END"):
                self.sums.pop(sequence, None)
            else:
                self.sums[sequence] = total
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", total)]))
        return responses
