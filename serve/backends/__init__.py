"""Model runtimes behind one small interface (see `serve.backends.base`)."""
