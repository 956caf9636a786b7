"""The HTTP transport: KServe v2 REST with Triton's extensions."""
