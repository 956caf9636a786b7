"""The serving engine: a Triton-compatible model server (KServe v2 over HTTP and gRPC)."""

__version__ = "0.1.0"
