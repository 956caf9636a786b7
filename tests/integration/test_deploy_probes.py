"""The containers' entry commands run here and pass the probes their manifests declare.

Each command is taken from deploy/ as written: the image's (deploy/Dockerfile's ENTRYPOINT +
CMD, which the Kubernetes Deployment runs unchanged) and the KServe ServingRuntime's (its
container's command + args). Only what a container changes is changed: the repository path
(the bundled models, built, for /models or /mnt/models), every address (127.0.0.1 for
0.0.0.0) and every port (0, a free one, for the fixed ones; the server logs the one it took).
The probes' paths and ports are read from the manifests (a named port through the
container's ports), and a probe passes as the kubelet judges it: an HTTP status from 200 to
399 within the probe's timeoutSeconds. Then Prometheus' scrape target (the manifests'
annotations) must serve the series the autoscaling rules query, and SIGTERM must end the
server with exit code 0 within the pod's grace period, leaving none of its processes."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from common.serve_process import serve_env, service_address, stop_serve_process
from tests.support.deploy import (
    ADAPTER_RULES,
    KSERVE,
    KUBERNETES,
    Document,
    documents,
    find,
    flag_value,
    pod_spec,
    read_dockerfile,
    with_flags,
)

pytestmark = pytest.mark.timeout(600)

# The flag naming each endpoint's port, and the server's "Started <service> at" log name.
PORT_FLAGS = {
    "--http-port": "HTTPService",
    "--grpc-port": "GRPCInferenceService",
    "--metrics-port": "Metrics Service",
}
ADDRESS_FLAGS = ("--http-address", "--grpc-address", "--metrics-address")
PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


@dataclass(frozen=True)
class Entry:
    """A container as deploy/ declares it: what it runs and how it is watched."""

    command: tuple[str, ...]
    container: Document
    """the container's manifest (ports, probes)"""
    scrape_port: str
    scrape_path: str
    grace_s: float
    """the pod's terminationGracePeriodSeconds (Kubernetes' default: 30)"""


def _kubernetes_entry() -> Entry:
    deployment = find(KUBERNETES, "Deployment", "autotune")
    (container,) = pod_spec(deployment)["containers"]
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    return Entry(
        command=read_dockerfile().entry_command,  # no command or args: the image's entry
        container=container,
        scrape_port=annotations["prometheus.io/port"],
        scrape_path=annotations["prometheus.io/path"],
        grace_s=float(pod_spec(deployment).get("terminationGracePeriodSeconds", 30)),
    )


def _kserve_entry() -> Entry:
    runtime = find(KSERVE, "ServingRuntime")
    (container,) = runtime["spec"]["containers"]
    annotations = runtime["spec"]["annotations"]
    return Entry(
        command=(*container["command"], *container["args"]),
        container=container,
        scrape_port=annotations["prometheus.kserve.io/port"],
        scrape_path=annotations["prometheus.kserve.io/path"],
        grace_s=30.0,
    )


ENTRIES = {"deployment": _kubernetes_entry, "kserve-runtime": _kserve_entry}


@dataclass
class Running:
    process: subprocess.Popen[bytes]
    ports: dict[int, int]
    """the port the manifest declares -> the free port it took here"""
    log: Path


def _executable(name: str) -> str:
    """The console script `name` of the Python running the tests (what the image's PATH finds
    in /opt/autotune/bin)."""
    script = Path(sysconfig.get_path("scripts")) / name
    assert script.exists(), f"{name} is not installed next to {sys.executable}"
    return str(script)


@contextmanager
def running(entry: Entry, repository: Path, log: Path) -> Iterator[Running]:
    """The entry command on `repository`, loopback addresses and free ports; stopped when the
    body leaves, however it leaves (SIGTERM, SIGKILL after 30 s)."""
    local = with_flags(
        entry.command,
        {
            "--model-repository": str(repository),
            **dict.fromkeys(ADDRESS_FLAGS, "127.0.0.1"),
            **dict.fromkeys(PORT_FLAGS, "0"),
        },
    )
    local[0] = _executable(local[0])
    env = serve_env()
    env.update({k: v for k, v in read_dockerfile().env.items() if k != "PATH"})
    with log.open("wb") as out:
        process = subprocess.Popen(local, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        ports = {
            int(flag_value(entry.command, flag)): int(
                service_address(log, process, service, timeout_s=120).rpartition(":")[2]
            )
            for flag, service in PORT_FLAGS.items()
        }
        yield Running(process, ports, log)
    finally:
        stop_serve_process(process)


def _probe_url(entry: Entry, running: Running, probe: Document) -> str:
    port = probe["httpGet"]["port"]
    if isinstance(port, str):  # a named port of the container
        port = {p["name"]: p["containerPort"] for p in entry.container["ports"]}[port]
    return f"http://127.0.0.1:{running.ports[int(port)]}{probe['httpGet']['path']}"


def _passes(url: str, probe: Document) -> bool:
    """One probe as the kubelet runs it."""
    try:
        response = httpx.get(url, timeout=float(probe.get("timeoutSeconds", 1)))
    except httpx.HTTPError:
        return False
    return 200 <= response.status_code < 400


def _wait_until_passes(url: str, probe: Document, budget_s: float, log: Path) -> None:
    deadline = time.monotonic() + budget_s
    while not _passes(url, probe):
        assert time.monotonic() < deadline, (
            f"{url} did not pass within {budget_s} s:\n{log.read_text(errors='replace')[-3000:]}"
        )
        time.sleep(0.1)


def _queried_metrics() -> set[str]:
    """The server metrics the autoscaling rules read: the Prometheus Adapter's series and the
    KServe InferenceService's KEDA query."""
    names = set()
    for rule in documents(ADAPTER_RULES)[0]["rules"]:
        names.add(rule["seriesQuery"].split("{")[0].strip("'\" "))
        names.update(re.findall(r"\bnv_\w+", rule["metricsQuery"]))
    service = find(KSERVE, "InferenceService")
    for metric in service["spec"]["predictor"]["autoScaling"]["metrics"]:
        names.update(re.findall(r"\bnv_\w+", metric["external"]["metric"]["query"]))
    return names


@pytest.mark.parametrize("which", ENTRIES.keys())
def test_the_entry_command_passes_its_probes_and_stops_cleanly(
    which: str, repository_copy: Path, tmp_path: Path
) -> None:
    entry = ENTRIES[which]()
    log = tmp_path / "server.log"
    with running(entry, repository_copy, log) as server:
        startup = entry.container["startupProbe"]
        budget = float(startup.get("periodSeconds", 10)) * int(startup.get("failureThreshold", 3))
        # the kubelet runs liveness and readiness once the startup probe has passed
        for name in PROBES:
            probe = entry.container[name]
            _wait_until_passes(_probe_url(entry, server, probe), probe, budget, log)
        for name in PROBES:  # each passes again, at once, on a running server
            probe = entry.container[name]
            assert _passes(_probe_url(entry, server, probe), probe), name

        scraped = httpx.get(
            f"http://127.0.0.1:{server.ports[int(entry.scrape_port)]}{entry.scrape_path}",
            timeout=10,
        )
        assert scraped.status_code == 200, scraped.text
        for metric in sorted(_queried_metrics()):
            assert re.search(rf"^{metric}\{{.*model=", scraped.text, re.M), (
                f"{metric} is not on {entry.scrape_path}"
            )

        if which == "deployment":  # the image's HEALTHCHECK, its port mapped as the others
            check = list(read_dockerfile().healthcheck)
            http = int(flag_value(entry.command, "--http-port"))
            check[-1] = check[-1].replace(f":{http}/", f":{server.ports[http]}/")
            done = subprocess.run([sys.executable, *check[1:]], capture_output=True, timeout=30)
            assert done.returncode == 0, done.stderr

        processes = [
            psutil.Process(server.process.pid),
            *psutil.Process(server.process.pid).children(recursive=True),
        ]
        server.process.send_signal(signal.SIGTERM)
        code = server.process.wait(timeout=entry.grace_s)
        assert code == 0, log.read_text(errors="replace")[-3000:]
        _, alive = psutil.wait_procs(processes, timeout=10)
        assert not alive, f"left running after the server exited: {alive}"
