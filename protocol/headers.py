"""HTTP header names and the parameter names of Triton's binary tensor data extension."""

from __future__ import annotations

# A body that carries binary tensors is a JSON header followed by the tensors; this header
# gives the JSON header's length in bytes.
HEADER_LENGTH = "Inference-Header-Content-Length"
# The same name as ASGI servers hand headers over: lower-case bytes.
HEADER_LENGTH_ASGI = HEADER_LENGTH.lower().encode("latin-1")

CONTENT_TYPE_JSON = "application/json"
CONTENT_TYPE_BINARY = "application/octet-stream"

# Tensor parameters: the size of a tensor's binary data after the JSON header (inputs and
# outputs), whether one output is wanted binary, and the request-wide default for outputs.
BINARY_DATA_SIZE = "binary_data_size"
BINARY_DATA = "binary_data"
BINARY_DATA_OUTPUT = "binary_data_output"
