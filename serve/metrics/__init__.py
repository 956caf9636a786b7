"""Prometheus metrics in Triton's names: per-model inference counters read from the models'
statistics at scrape time, CPU and memory, and GPU metrics where NVML finds a GPU."""
