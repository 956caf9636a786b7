"""Schemathesis against the OpenAPI description of the HTTP routes (docs/openapi/kserve-v2.yaml):
requests that fit the description and requests that break it (wrong types, missing fields,
odd path values), on every route. Whatever comes, the server answers with a status the
description lists, never 500 (but for a load's poll failure, as tritonserver answers it), and
every error answer is JSON naming the problem; the server keeps serving.

Deterministic (schemathesis's derandomized generation, a fixed number of examples per route)
and bounded in time. The server runs in explicit model-control mode, so load and unload calls
are served (the fuzzer may unload `simple`: a later infer is then 503, an answer the
description lists)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from schemathesis.generation.modes import GenerationMode

from tests.conftest import BUNDLED_REPOSITORY
from tests.support.server_process import RunningServer, serving

DESCRIPTION = Path(__file__).resolve().parents[4] / "docs" / "openapi" / "kserve-v2.yaml"
EXAMPLES = 25  # per route and mode

schema = schemathesis.openapi.from_path(DESCRIPTION)
schema.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE],
    max_examples=EXAMPLES,
    deterministic=True,
)
POLL_FAILURE = "failed to poll from model repository"
# Answers with no JSON error body: liveness and readiness say "not ready" with an empty 400.
FLAG_ROUTES = ("/v2/health/live", "/v2/health/ready", "/ready")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    root = tmp_path_factory.mktemp("openapi_fuzz")
    shutil.copytree(BUNDLED_REPOSITORY / "simple", root / "repository" / "simple")
    with serving(
        root / "repository",
        root / "server.log",
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        "--http-max-input-size",
        str(1 << 20),
    ) as running:
        yield running


@schema.parametrize()
def test_every_route_answers_fuzzed_requests_without_a_server_error(
    case: schemathesis.Case, server: RunningServer
) -> None:
    response = case.call(base_url=server.base, timeout=30)
    where = f"{case.method} {case.formatted_path}"
    # 501: what this server does not support (CUDA shared memory without a GPU); 503: a model
    # not ready; 500 "failed to poll from model repository": a load of a model that cannot be
    # polled, as tritonserver answers it. All answers the description lists, not failures.
    polled = response.status_code == 500 and POLL_FAILURE in response.text
    assert response.status_code < 500 or response.status_code in (501, 503) or polled, (
        f"{where} -> {response.status_code}: {response.text[:300]}"
    )
    if response.status_code >= 400 and not case.formatted_path.endswith(FLAG_ROUTES):
        body = response.json()
        assert isinstance(body, dict) and body.get("error"), f"{where}: {response.text[:300]}"
    assert httpx.get(f"{server.base}/v2/health/live", timeout=10).status_code == 200


def test_the_fuzzing_left_the_server_serving_in_bounded_memory(server: RunningServer) -> None:
    """Runs after the fuzzing above (file order): the server's peak RSS stayed bounded."""
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    peak_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM"))
    assert peak_kb < 1024 * 1024, f"peak RSS {peak_kb / 1024:.0f} MB under fuzzing"
    ready = httpx.get(f"{server.base}/v2/health/ready", timeout=10)
    assert ready.status_code in (200, 400)  # 400 when the fuzzer unloaded `simple`
