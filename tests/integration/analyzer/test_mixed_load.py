"""`find_max_mixed_load`: two models loaded at once, each at its share of a total request
rate, against a real server; the highest total rate is bounded by the model that saturates
first, because every model must stay within the limit.

Both models are the python add_sub model sleeping per execution, one instance, no batching:
"fast" sleeps 5 ms (about 200 requests/s), "slow" 40 ms (about 25/s). At equal shares the mix
cannot pass a total rate at which "slow" is far past its 25/s, though "fast" alone would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from analyzer.api import LoadOptions, MeasureSettings, MixedModelLoad, find_max_mixed_load
from tests.integration.conftest import RepositoryFactory
from tests.support.server_process import RunningServer, start_server, stop_server

LIMIT_US = 200_000
SLOW_CAPACITY = 1000 / 40  # requests/s of one instance sleeping 40 ms


def _delay_model(name: str, delay_ms: int) -> str:
    return f"""# from: add_sub_py
name: "{name}"
backend: "python"
max_batch_size: 0
input [{{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] }},
       {{ name: "INPUT1" data_type: TYPE_FP32 dims: [16] }}]
output [{{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] }},
        {{ name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }}]
instance_group [{{ count: 1 kind: KIND_CPU }}]
parameters {{ key: "EXECUTE_DELAY_MS" value {{ string_value: "{delay_ms}" }} }}
"""


@pytest.fixture
def server(
    make_repository: RepositoryFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    repository = make_repository(
        {"fast": _delay_model("fast", 5), "slow": _delay_model("slow", 40)}
    )
    running = start_server(repository, tmp_path_factory.mktemp("mixed") / "server.log")
    try:
        yield running
    finally:
        stop_server(running)


def test_the_mix_is_bounded_by_the_model_that_saturates_first(server: RunningServer) -> None:
    loads = [
        MixedModelLoad(LoadOptions(url=server.url, model=name, worker_processes=1), 1.0)
        for name in ("fast", "slow")
    ]
    settings = MeasureSettings(
        measurement_interval_ms=1000, stability_percentage=50, warmup_request_count=10
    )
    result = find_max_mixed_load(
        loads, settings, LIMIT_US, percentile=95, max_binary_steps=2, unstable_retries=2
    )
    best = result.search.best
    assert best is not None, result.search.reason
    assert result.shares == {"fast": 0.5, "slow": 0.5}
    models = result.models_at(best.request_rate)
    assert set(models) == {"fast", "slow"}
    for model in models.values():  # each at its share, each within the limit
        assert model.request_rate == pytest.approx(best.request_rate / 2)
        assert model.latency_p95_us <= LIMIT_US
        assert model.error_count == 0
    assert best.throughput == pytest.approx(sum(m.throughput for m in models.values()))
    assert best.latency_p95_us == max(m.latency_p95_us for m in models.values())
    # "slow" bounds the mix: its rate stays near its capacity (a constant-rate load a little
    # past it queues slowly, so allow half again), far below what "fast" alone sustains.
    assert models["slow"].request_rate <= 1.5 * SLOW_CAPACITY, models["slow"]
    # The search went past the best and found a total rate that fails.
    assert any(level.total_rate > best.request_rate for level in result.levels)
