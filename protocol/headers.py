"""HTTP header names and the tensor parameter names of Triton's extensions (binary tensor data,
shared memory)."""

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

# Tensor parameters of the shared-memory extensions (HTTP JSON and gRPC alike): the region
# holding an input's data (or receiving an output's), its size and its offset in the region.
SHARED_MEMORY_REGION = "shared_memory_region"
SHARED_MEMORY_BYTE_SIZE = "shared_memory_byte_size"
SHARED_MEMORY_OFFSET = "shared_memory_offset"
