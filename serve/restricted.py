"""APIs restricted to callers presenting a key: tritonserver's `--http-restricted-api` and
`--grpc-restricted-protocol`, each `<api>[,<api>...]:<key>=<value>`.

A request to a restricted API must carry the header (HTTP) or metadata entry (gRPC) `<key>`
with the value `<value>`; any other is refused (HTTP 403, gRPC PERMISSION_DENIED) with
Triton's message. The APIs are Triton's groups of routes and methods (`API_GROUPS`); which
group a request belongs to is decided here, once for both transports.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable
from dataclasses import dataclass

API_GROUPS = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

# gRPC method -> API group (inference.GRPCInferenceService)
GRPC_METHOD_GROUPS = {
    "ServerLive": "health",
    "ServerReady": "health",
    "ModelReady": "health",
    "ServerMetadata": "metadata",
    "ModelMetadata": "metadata",
    "ModelInfer": "inference",
    "ModelStreamInfer": "inference",
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    "RepositoryIndex": "model-repository",
    "RepositoryModelLoad": "model-repository",
    "RepositoryModelUnload": "model-repository",
    "SystemSharedMemoryStatus": "shared-memory",
    "SystemSharedMemoryRegister": "shared-memory",
    "SystemSharedMemoryUnregister": "shared-memory",
    "CudaSharedMemoryStatus": "shared-memory",
    "CudaSharedMemoryRegister": "shared-memory",
    "CudaSharedMemoryUnregister": "shared-memory",
    "TraceSetting": "trace",
    "LogSettings": "logging",
}

# the last part of /v2/models/<name>[/versions/<v>]/<action> -> API group
_MODEL_ACTIONS = {
    "ready": "health",
    "config": "model-config",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
    "stats": "statistics",
    "trace": "trace",
}


@dataclass(frozen=True)
class Restriction:
    """One key=value pair that a group of APIs asks for."""

    key: str  # lower-case: HTTP header names and gRPC metadata keys are
    value: str

    @property
    def refusal(self) -> str:
        return f"This API is restricted, expecting header '{self.key}'"

    def allows(self, presented: str | bytes | None) -> bool:
        if presented is None:
            return False
        if isinstance(presented, str):
            presented = presented.encode("latin-1", "replace")
        return hmac.compare_digest(presented, self.value.encode("latin-1", "replace"))


class RestrictedApis:
    """Which API groups ask for which key (none: every API is open)."""

    def __init__(self, by_group: dict[str, Restriction] | None = None) -> None:
        self._by_group = dict(by_group or {})

    def __bool__(self) -> bool:
        return bool(self._by_group)

    @classmethod
    def parse(cls, specs: Iterable[str], flag: str) -> RestrictedApis:
        """From the flag's values; ValueError naming the flag and the value when one is not
        `<api>[,<api>...]:<key>=<value>` of known APIs, or names an API twice."""
        by_group: dict[str, Restriction] = {}
        for spec in specs:
            groups, colon, pair = spec.partition(":")
            key, equals, value = pair.partition("=")
            if not (colon and equals and groups and key.strip()):
                raise ValueError(f"{flag} '{spec}': expected <api>[,<api>...]:<key>=<value>")
            restriction = Restriction(key.strip().lower(), value)
            for group in (g.strip() for g in groups.split(",")):
                if group not in API_GROUPS:
                    raise ValueError(
                        f"{flag} '{spec}': unknown API '{group}' (one of {', '.join(API_GROUPS)})"
                    )
                if group in by_group:
                    raise ValueError(f"{flag}: API '{group}' is restricted more than once")
                by_group[group] = restriction
        return cls(by_group)

    def restriction(self, group: str) -> Restriction | None:
        return self._by_group.get(group)

    def for_http(self, path: str) -> Restriction | None:
        return self._by_group.get(http_api_group(path)) if self._by_group else None

    def for_grpc(self, method: str) -> Restriction | None:
        """`method`: the method's name, or its full path (/inference.GRPCInferenceService/X)."""
        if not self._by_group:
            return None
        return self._by_group.get(GRPC_METHOD_GROUPS.get(method.rpartition("/")[2], ""))

    def describe(self) -> str:
        groups: dict[str, list[str]] = {}
        for group, restriction in self._by_group.items():
            groups.setdefault(restriction.key, []).append(group)
        return "; ".join(f"{', '.join(g)} need '{key}'" for key, g in groups.items())


def http_api_group(path: str) -> str:
    """The API group of a KServe v2 HTTP path (decoded); "metadata" for /v2 and the unknown."""
    parts = path.strip("/").split("/")
    if len(parts) < 2 or parts[0] != "v2":
        return "metadata"
    section = parts[1]
    if section == "health":
        return "health"
    if section == "repository":
        return "model-repository"
    if section in ("systemsharedmemory", "cudasharedmemory"):
        return "shared-memory"
    if section == "logging":
        return "logging"
    if section == "trace":
        return "trace"
    if section != "models" or len(parts) < 3:
        return "metadata"
    if len(parts) == 3:  # /v2/models/stats, else a model's metadata
        return "statistics" if parts[2] == "stats" else "metadata"
    rest = parts[3:]
    if rest[0] == "versions":
        rest = rest[2:]
    return _MODEL_ACTIONS.get(rest[0], "metadata") if rest else "metadata"
