"""The in-process tier: the server's ASGI app driven through httpx.ASGITransport, with no
server process and no socket. For route-level checks (status codes, JSON bodies, error
mapping); what needs a real connection or a real client (tritonclient, perf_analyzer,
keep-alive, pipelining, signals) stays in tests/integration.

Tests here are coroutines run by anyio's pytest plugin (`pytestmark = pytest.mark.anyio`) on
asyncio, the loop the server runs on."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from serve.repository.manager import ControlMode
from serve.server import open_http_app
from serve.server_options import ServerOptions

BASE_URL = "http://testserver"


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@contextlib.asynccontextmanager
async def asgi_client_for(
    repository: Path,
    control_mode: ControlMode = ControlMode.NONE,
    load_models: list[str] | None = None,
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client whose requests go straight into the app serving `repository`; the
    models are unloaded (python stub processes stopped) when the block ends."""
    options = ServerOptions([repository], control_mode=control_mode, load_models=load_models or [])
    async with open_http_app(options) as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL, timeout=30) as client:
            yield client


@pytest.fixture(scope="module")
async def asgi_client(repository_copy: Path) -> AsyncIterator[httpx.AsyncClient]:
    """The app on the bundled models (as the integration tier's `server` serves them), loaded
    once per test module."""
    async with asgi_client_for(repository_copy) as client:
        yield client
