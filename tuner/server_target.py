"""Which server a tuning run measures (`--server`): a private `autotune serve` (the default),
a private tritonserver (`--server tritonserver`, `--tritonserver PATH`, Triton's own flags
through `--server-arg`), or a server someone else runs in explicit model control
(`--server-url HOST:PORT`: remote, left with its models as they were found). The search, the
measurement and the write-back (to the local repository) do not depend on which."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tuner.errors import TunerError

AUTOTUNE = "autotune"
TRITONSERVER = "tritonserver"
REMOTE = "remote"
SERVER_KINDS = (AUTOTUNE, TRITONSERVER)


class ServerChoiceError(TunerError):
    """The server flags contradict each other."""


@dataclass(frozen=True, slots=True)
class ServerChoice:
    """The server a run measures, from the flags: its kind (autotune, tritonserver or remote)
    and, for a private tritonserver or a remote one, where it is."""

    kind: str = AUTOTUNE
    tritonserver: Path | None = None  # --tritonserver; None: the one on PATH
    server_args: tuple[str, ...] = ()  # passed through to a private tritonserver
    url: str = ""  # remote: its HTTP host:port
    grpc_url: str = ""  # remote: its gRPC host:port (needed for --protocol grpc)
    metrics_url: str = ""  # remote: its metrics host:port (GPUs from nv_gpu_*), optional

    @property
    def remote(self) -> bool:
        return self.kind == REMOTE

    @classmethod
    def from_flags(
        cls,
        server: str | None,
        tritonserver: Path | None,
        server_args: tuple[str, ...],
        url: str | None,
        grpc_url: str | None = None,
        metrics_url: str | None = None,
    ) -> ServerChoice:
        """The choice the flags make; ServerChoiceError when they contradict each other."""
        if url:
            if server not in (None, REMOTE):
                raise ServerChoiceError(
                    f"--server-url names a running server: not --server {server}"
                )
            if tritonserver is not None or server_args:
                raise ServerChoiceError(
                    "--tritonserver and --server-arg start a private tritonserver: "
                    "not with --server-url"
                )
            return cls(REMOTE, url=url, grpc_url=grpc_url or "", metrics_url=metrics_url or "")
        kind = server or AUTOTUNE
        if kind not in SERVER_KINDS:
            raise ServerChoiceError(
                f"--server {kind}: one of {', '.join(SERVER_KINDS)} (or --server-url HOST:PORT)"
            )
        if kind != TRITONSERVER and (tritonserver is not None or server_args):
            raise ServerChoiceError("--tritonserver and --server-arg go with --server tritonserver")
        return cls(kind, tritonserver, tuple(server_args))
