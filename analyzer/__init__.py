"""The load generator: a perf_analyzer-style client of any KServe v2 server."""
