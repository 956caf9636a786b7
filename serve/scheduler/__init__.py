"""Schedulers: the dynamic batcher (which also serves as the default, one-request scheduler)."""
