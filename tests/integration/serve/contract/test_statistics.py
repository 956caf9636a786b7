"""The statistics extension counts what the transport carried: requests, inferences,
executions, per-phase durations and batch sizes."""

from __future__ import annotations

from tests.integration.serve.contract.clients import ContractClient
from tests.integration.serve.contract.support import simple_inputs


def test_statistics_count_the_requests_just_made(client: ContractClient) -> None:
    (before,) = client.statistics("simple").model_stats
    for seed in range(3):
        client.infer("simple", simple_inputs(seed, batch=2), ["OUTPUT0"])
    (after,) = client.statistics("simple", "1").model_stats
    assert (after.name, after.version) == ("simple", "1")
    stats = after.inference_stats
    assert stats.success.count - before.inference_stats.success.count == 3
    assert after.inference_count - before.inference_count == 6
    assert after.execution_count - before.execution_count >= 1
    assert after.last_inference > 0
    for phase in ("queue", "compute_input", "compute_infer", "compute_output"):
        duration = getattr(stats, phase)
        assert duration.count == stats.success.count, phase
        assert duration.ns > 0, phase
    assert stats.success.ns >= stats.compute_infer.ns
    assert any(entry.batch_size == 2 for entry in after.batch_stats)


def test_statistics_of_every_model(client: ContractClient) -> None:
    every = client.statistics()
    assert {(s.name, s.version) for s in every.model_stats} >= {
        ("simple", "1"),
        ("digits", "1"),
        ("resnet18", "1"),
        ("add_sub_py", "1"),
    }
