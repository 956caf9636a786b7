"""Request tracing (Triton's trace extension): settings, sampling, trace files."""
