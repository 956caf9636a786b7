"""Small models that tests write into scratch repositories."""

from __future__ import annotations

from pathlib import Path

ECHO_BYTES_CONFIG = """\
name: "echo_bytes"
backend: "python"
max_batch_size: 4
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 2 ] } ]
output [ { name: "ECHO" data_type: TYPE_STRING dims: [ 2 ] } ]
"""

ECHO_BYTES_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            out = pb_utils.Tensor("ECHO", text)
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""


def write_echo_bytes(repository: Path) -> None:
    """`echo_bytes`: a python model returning its BYTES input TEXT ([-1, 2]) as ECHO."""
    echo = repository / "echo_bytes"
    (echo / "1").mkdir(parents=True)
    (echo / "1" / "model.py").write_text(ECHO_BYTES_MODEL)
    (echo / "config.pbtxt").write_text(ECHO_BYTES_CONFIG)
