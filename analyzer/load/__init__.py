"""Load generation: concurrency, request-rate and custom-interval modes."""
