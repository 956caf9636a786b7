"""Triton's gRPC protocol (`inference.GRPCInferenceService`) over the DataPlane."""
