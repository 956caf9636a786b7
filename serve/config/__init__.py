"""Model configuration: Triton's ModelConfig protobuf, read, validated, completed and written."""
