"""The KServe v2 / Triton protocol, shared by the server and its clients.

A leaf package: it imports nothing else of this project (only numpy, orjson, httptools and the
standard library), so serve, analyzer, tuner and the gate all build on it.

- `protocol.datatypes`: wire datatypes, numpy dtypes, config enum names, element sizes.
- `protocol.tensors`: the binary tensor forms (fixed-size and BYTES framing).
- `protocol.headers`: HTTP header and binary-extension parameter names.
- `protocol.statistics`: the statistics extension's duration fields.
- `protocol.metadata`: model and tensor metadata parsed from the JSON.
- `protocol.errors`: ProtocolError (malformed data) and ClientError (a failed call).
- `protocol.client`: the client for control calls and inference (HTTP today).
"""
