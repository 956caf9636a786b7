"""Queue policies under load, over a real socket: priority levels put urgent requests ahead of
a queue already full of others; a queue timeout with REJECT answers the requests that waited
too long with 503 "Request timeout expired" (and counts them as failures), with DELAY it moves
them behind the others and every request is still served.

The models run one request at a time (max_batch_size 1, one instance) for 100 ms each, so the
order of execution is the order the batcher picks, whatever the machine's speed."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, serving

DELAY_MS = 100
TENSORS = """max_batch_size: 1
input [{ name: "INPUT0" data_type: TYPE_FP32 dims: [16] },
       { name: "INPUT1" data_type: TYPE_FP32 dims: [16] }]
output [{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [16] },
        { name: "OUTPUT1" data_type: TYPE_FP32 dims: [16] }]
instance_group [{ count: 1 kind: KIND_CPU }]
"""
MODELS = {
    "ranked": "dynamic_batching { priority_levels: 2 default_priority_level: 2 }",
    "rejecting": "dynamic_batching { default_queue_policy { timeout_action: REJECT "
    "default_timeout_microseconds: 150000 } }",
    "delaying": "dynamic_batching { default_queue_policy { timeout_action: DELAY "
    "default_timeout_microseconds: 150000 } }",
}
BODY = {
    "inputs": [
        {"name": n, "shape": [1, 16], "datatype": "FP32", "data": [1.0] * 16}
        for n in ("INPUT0", "INPUT1")
    ]
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("queue-policy")
    source = BUNDLED_REPOSITORY / "add_sub_py"
    for name, batching in MODELS.items():
        model = root / "repository" / name
        for version in (p for p in source.iterdir() if p.name.isdigit()):
            shutil.copytree(version, model / version.name)
        (model / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\n{TENSORS}{batching}\n'
            f'parameters {{ key: "EXECUTE_DELAY_MS" value {{ string_value: "{DELAY_MS}" }} }}\n'
        )
    with serving(root / "repository", root / "server.log") as running:
        yield running


async def _infer(
    client: httpx.AsyncClient, model: str, priority: int | None = None
) -> tuple[int, str, float]:
    """Status, error message ("" on success) and the moment the answer arrived."""
    body = dict(BODY, parameters={"priority": priority}) if priority is not None else BODY
    response = await client.post(f"/v2/models/{model}/infer", json=body)
    error = "" if response.status_code == 200 else response.json()["error"]
    return response.status_code, error, time.monotonic()


def _inference_counts(server: RunningServer, model: str) -> tuple[int, int]:
    stats = httpx.get(f"{server.base}/v2/models/{model}/stats").json()["model_stats"][0]
    return stats["inference_stats"]["success"]["count"], stats["inference_stats"]["fail"]["count"]


def test_urgent_requests_overtake_a_full_queue(server: RunningServer) -> None:
    async def scenario() -> tuple[list[float], list[float], float]:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(base_url=server.base, limits=limits, timeout=60) as client:
            routine = [asyncio.create_task(_infer(client, "ranked")) for _ in range(12)]
            await asyncio.sleep(0.2)  # the 12 routine ones queue up behind the first
            urgent_sent = time.monotonic()
            urgent = [asyncio.create_task(_infer(client, "ranked", priority=1)) for _ in range(4)]
            answers = await asyncio.gather(*routine, *urgent)
        assert all(status == 200 for status, _, _ in answers), answers
        done = [at for _, _, at in answers]
        return done[:12], done[12:], urgent_sent

    routine_done, urgent_done, urgent_sent = asyncio.run(scenario())
    waiting = [at for at in routine_done if at > urgent_sent]
    assert len(waiting) >= 6, "the routine requests should still be queued"
    overtaken = [at for at in waiting if at < max(urgent_done)]
    # the routine request running when the urgent ones came, and one more that the batcher
    # may have picked while they were still on the wire; FIFO would be every waiting one
    assert len(overtaken) <= 2, (
        f"{len(overtaken)} of {len(waiting)} waiting routine requests finished before the "
        "last urgent one"
    )


def test_requests_waiting_past_a_reject_timeout_are_refused_and_counted(
    server: RunningServer,
) -> None:
    before = _inference_counts(server, "rejecting")

    async def scenario() -> list[tuple[int, str, float]]:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(base_url=server.base, limits=limits, timeout=60) as client:
            return await asyncio.gather(*(_infer(client, "rejecting") for _ in range(8)))

    answers = asyncio.run(scenario())
    statuses = [status for status, _, _ in answers]
    assert set(statuses) <= {200, 503}, answers
    # 100 ms each, one at a time, 150 ms allowed in the queue: two or three are served (three
    # when the requests reached the server spread out), the rest are refused
    assert 1 <= statuses.count(200) <= 4, answers
    assert all("Request timeout expired" in error for status, error, _ in answers if status == 503)
    after = _inference_counts(server, "rejecting")
    assert (after[0] - before[0], after[1] - before[1]) == (
        statuses.count(200),
        statuses.count(503),
    ), "the statistics count every request once, as the client saw it"


def test_requests_waiting_past_a_delay_timeout_are_all_served(server: RunningServer) -> None:
    async def scenario() -> list[tuple[int, str, float]]:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(base_url=server.base, limits=limits, timeout=60) as client:
            return await asyncio.gather(*(_infer(client, "delaying") for _ in range(6)))

    answers = asyncio.run(scenario())
    assert [status for status, _, _ in answers] == [200] * 6, answers


def test_the_policies_are_the_served_configs(server: RunningServer) -> None:
    # what the scenarios above rely on: a field lost on the way would be a plain FIFO queue
    ranked = httpx.get(f"{server.base}/v2/models/ranked/config").json()["dynamic_batching"]
    assert (ranked["priority_levels"], ranked["default_priority_level"]) == (2, 2)
    rejecting = httpx.get(f"{server.base}/v2/models/rejecting/config").json()
    policy = rejecting["dynamic_batching"]["default_queue_policy"]
    assert policy["timeout_action"] == "REJECT"
    assert int(policy["default_timeout_microseconds"]) == 150_000
