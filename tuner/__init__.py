"""The auto-tuner: searches model configurations under a latency budget."""
