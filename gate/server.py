"""The server the baseline and the gate measure: one at --url, or our own on the repository
(free loopback ports, only the models asked for loaded), and what it serves; over HTTP or
gRPC (the address is that protocol's endpoint)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from analyzer.api import AnalyzerError
from common.serve_process import (
    ServeProcessError,
    log_tail,
    service_address,
    start_serve_process,
    stop_serve_process,
)
from protocol.client.control import ControlClient, open_client
from protocol.errors import ClientError
from serve.api import ServeError, model_names

STARTUP_TIMEOUT_S = 180.0


class TargetError(Exception):
    """The server cannot be started or reached, or lacks a model: an environment error."""


@dataclass(frozen=True, slots=True)
class ServedModel:
    """A model as the server serves it: the version measured (its highest ready one) and the
    hash of its served config, recorded in the baseline and compared by the gate."""

    name: str
    version: str
    config_sha256: str


def models_on_disk(repository: Path) -> list[str]:
    """The models of `repository` (its folders), sorted; TargetError when it is no folder."""
    try:
        return model_names(repository)
    except ServeError as exc:
        raise TargetError(str(exc)) from None


@contextlib.contextmanager
def served(
    url: str | None, repository: Path, models: Sequence[str], protocol: str = "http"
) -> Iterator[str]:
    """Yield the host:port to measure: `url` as given, or the `protocol` endpoint of a server
    of ours started on `repository` with `models` loaded (all of them when empty), stopped on
    exit."""
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="autotune-gate-") as scratch:
        log_path = Path(scratch) / "server.log"
        process, address = _start(repository, models, log_path)
        try:
            if protocol == "grpc":
                try:
                    address = service_address(log_path, process)
                except ServeProcessError as exc:
                    raise TargetError(str(exc)) from None
            yield address
        except AnalyzerError as exc:
            if process.poll() is None:
                raise
            raise TargetError(
                f"{exc}\nthe server exited with {process.returncode}:\n{log_tail(log_path, 15)}"
            ) from None
        finally:
            stop_serve_process(process)


def _start(
    repository: Path, models: Sequence[str], log_path: Path
) -> tuple[subprocess.Popen[bytes], str]:
    extra: list[str] = []
    if models:
        extra += ["--model-control-mode", "explicit"]
        for name in models:
            extra += ["--load-model", name]
    else:  # every model that loads is gated: one that fails must not stop the server
        extra += ["--exit-on-error", "false"]
    try:
        return start_serve_process(repository, log_path, extra, STARTUP_TIMEOUT_S)
    except ServeProcessError as exc:
        raise TargetError(str(exc)) from None


def survey(url: str, names: Sequence[str], protocol: str = "http") -> list[ServedModel]:
    """The models `names` (every ready model when empty) as the server at `url` serves them
    (asked over `protocol`); TargetError when it is unreachable or a model is missing or not
    ready."""
    try:
        return asyncio.run(_survey(url, names, protocol))
    except ClientError as exc:
        raise TargetError(str(exc)) from None


async def _survey(url: str, names: Sequence[str], protocol: str) -> list[ServedModel]:
    client = open_client(protocol, url)
    try:
        await client.server_metadata()
        states = await _index(client)
        chosen = list(names) or [n for n, (state, _, _) in states.items() if state == "READY"]
        problems = [_problem(name, states) for name in chosen]
        problems = [p for p in problems if p]
        if problems:
            raise TargetError("; ".join(problems))
        if not chosen:
            raise TargetError(f"the server at {url} serves no ready model")
        served_models = []
        for name in chosen:
            config = await client.model_config(name)
            served_models.append(ServedModel(name, states[name][2], config_hash(config)))
        return served_models
    finally:
        await client.close()


async def _index(client: ControlClient) -> dict[str, tuple[str, str, str]]:
    """name -> (state, reason, highest ready version) from the repository index."""
    states: dict[str, tuple[str, str, str]] = {}
    for entry in await client.repository_index():
        name = str(entry.get("name", ""))
        state = str(entry.get("state", "")) or "UNLOADED"
        version = str(entry.get("version", ""))
        known = states.get(name)
        if known is None or (state == "READY" and known[0] != "READY"):
            states[name] = (state, str(entry.get("reason", "")), version)
        elif state == "READY" and version.isdigit() and known[2].isdigit():
            states[name] = (state, "", str(max(int(version), int(known[2]))))
    return states


def _problem(name: str, states: dict[str, tuple[str, str, str]]) -> str:
    if name not in states:
        return f"model '{name}' is not in the repository (models: {', '.join(states) or 'none'})"
    state, reason, _ = states[name]
    if state != "READY":
        return f"model '{name}' is {state}" + (f": {reason}" if reason else "")
    return ""


def config_hash(config: dict[str, object]) -> str:
    """sha256 of the served config, keys sorted: the same config gives the same hash."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
