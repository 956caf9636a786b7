"""Model builders used by scripts/build_model_repository.py, one module per model family."""
