"""The CI performance gate: `autotune baseline` records throughput and latency at fixed loads,
`autotune gate` measures again and fails on a regression beyond a tolerance."""
