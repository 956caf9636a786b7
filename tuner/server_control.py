"""A private `autotune serve` process for tuning: explicit model control on a scratch
repository, candidates loaded through the repository API with a config override.

The scratch repository holds, per model, links to the real version folders' files plus links
to the precision variants, so a candidate is a config (which may name a variant through
`default_model_filename`) and loading it is one repository-API call.

For a pipeline the scratch repository holds the ensemble and each composing model (their
config.pbtxt copied, so that whatever the server loads on its own is the config as written);
a trial reloads each composing model with its candidate config, and the ensemble, loaded once,
calls whatever is loaded at request time.
For a traffic mix it holds every model of the mix the same way (the first as `model_dir`,
the others as `composing`); a trial reloads the models whose config changed.

The server is the run's target (`tuner.server_target.ServerChoice`): a private `autotune
serve` or a private tritonserver on the scratch repository, or a running server (remote):
there no scratch repository is served, a variant's files travel with the load as `file:`
overrides, and on stop every model the run loaded is put back as it was found (loaded from
the server's own repository, or unloaded).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
from tritonclient.grpc import model_config_pb2 as mc

from common.serve_process import (
    ServeProcessError,
    log_tail,
    service_address,
    start_serve_process,
    stop_serve_process,
)
from protocol.client import BlockingClient
from protocol.errors import ClientError
from serve.api import config_to_json
from tuner.errors import TunerError
from tuner.run_schema import ServerInfo
from tuner.server_target import AUTOTUNE, TRITONSERVER, ServerChoice
from tuner.tritonserver_process import (
    TritonStartError,
    find_tritonserver,
    start_tritonserver,
    stop_tritonserver,
)

LOAD_TIMEOUT_S = 300.0
_log = logging.getLogger(__name__)


class ServerError(TunerError):
    """The tuning server could not be started or refused a candidate."""


class TuningServer:
    """Starts the server on a scratch copy of one model (with `composing`: an ensemble and
    its composing models' folders) and loads candidate configs."""

    def __init__(
        self,
        model_dir: Path,
        work_dir: Path,
        startup_timeout_s: float = 120.0,
        failure_log: Path | None = None,
        composing: Sequence[Path] = (),
        choice: ServerChoice | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.choice = choice or ServerChoice()
        self._log_dir = log_dir  # where a private tritonserver's log is kept
        self.model_name = model_dir.name  # the model measured (for a pipeline, the ensemble)
        self._source = model_dir
        self._root = Path(tempfile.mkdtemp(prefix="scratch-", dir=work_dir))
        self.repository = self._root / "repository"
        self._log_path = self._root / "server.log"
        self._failure_log = failure_log  # where the log is kept when the server does not start
        self._timeout = startup_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""  # HTTP host:port
        self._grpc_url = ""
        self._file_overrides: dict[str, dict[str, Path]] = {}  # remote: model -> files
        self._found: dict[str, bool] = {}  # remote: model -> loaded when the run began
        # remote: each model the run loaded -> its config as found (None: it was not loaded)
        self._as_found: dict[str, dict[str, Any] | None] = {}
        self.metrics_url = ""
        self._link_model(self._source, keep_config=bool(composing))
        for source in composing:
            self._link_model(source, keep_config=True)

    def _link_model(self, source: Path, *, keep_config: bool) -> None:
        """Version folders of links to the real files (nothing large is copied)."""
        model_dir = self.repository / source.name
        model_dir.mkdir(parents=True)
        for entry in source.iterdir():
            if entry.is_dir() and entry.name.isdigit():
                target = model_dir / entry.name
                target.mkdir()
                for item in entry.iterdir():
                    (target / item.name).symlink_to(item.resolve())
            elif entry.name == "config.pbtxt":
                if keep_config and entry.is_file():
                    shutil.copyfile(entry, model_dir / entry.name)
            elif entry.is_file():
                (model_dir / entry.name).symlink_to(entry.resolve())

    def add_variant(
        self, version: int, filename: str, path: Path, model: str | None = None
    ) -> None:
        """Make a precision variant of `model` (default: the measured one) servable as
        `<version>/<filename>`."""
        name = model or self.model_name
        self._file_overrides.setdefault(name, {})[f"{version}/{filename}"] = path
        link = self.repository / name / str(version) / filename
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path.resolve())

    def add_file(self, relative: str, path: Path, model: str | None = None) -> None:
        """Make `path` appear as `relative` inside the folder of `model` (default: the measured
        one), e.g. trt_int8's calibration table."""
        name = model or self.model_name
        self._file_overrides.setdefault(name, {})[relative] = path
        link = self.repository / name / relative
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(path.resolve())

    def start(self) -> None:
        if self.choice.remote:
            self._start_remote()
        elif self.choice.kind == TRITONSERVER:
            self._start_tritonserver()
        else:
            self._start_autotune()

    def _start_autotune(self) -> None:
        try:
            self._process, self.url = start_serve_process(
                self.repository,
                self._log_path,
                ("--model-control-mode", "explicit"),
                self._timeout,
            )
        except ServeProcessError:
            reason = log_tail(self._log_path, 1).strip() or "its log is empty"
            if self._failure_log is not None:
                self._failure_log.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self._log_path, self._failure_log)
                reason += f" (its log: {self._failure_log})"
            self.stop()
            raise ServerError(f"the tuning server did not start: {reason}") from None

    def _start_tritonserver(self) -> None:
        if self._log_dir is not None:
            self._log_path = self._log_dir / f"tritonserver-{os.getpid()}.log"
        try:
            executable = find_tritonserver(self.choice.tritonserver)
            started = start_tritonserver(
                executable, self.repository, self._log_path, self.choice.server_args, self._timeout
            )
        except TritonStartError as exc:
            self.stop()
            raise ServerError(str(exc)) from None
        self._process, self.url, self._grpc_url = started.process, started.http, started.grpc
        self.metrics_url = started.metrics

    def _start_remote(self) -> None:
        """Note which models the running server has loaded now (put back so on stop)."""
        self.url, self._grpc_url = self.choice.url, self.choice.grpc_url
        self.metrics_url = self.choice.metrics_url
        client = BlockingClient(self.url, timeout_s=LOAD_TIMEOUT_S)
        try:
            extensions = client.server_metadata().get("extensions") or []
            if "model_repository" not in extensions:
                raise ServerError(
                    f"the server at {self.url} has no model_repository extension: "
                    "candidates cannot be loaded into it"
                )
            index = client.repository_index()
        except ClientError as exc:
            raise ServerError(f"the server at {self.url} did not answer: {exc}") from None
        self._found = {str(entry.get("name")): entry.get("state") == "READY" for entry in index}

    def process_ids(self) -> set[int]:
        """The server's process and its descendants (python models' stubs); empty when it is
        not running."""
        process = self._process
        if process is None or process.poll() is not None:
            return set()
        try:
            children = psutil.Process(process.pid).children(recursive=True)
        except psutil.Error:
            return {process.pid}
        return {process.pid, *(child.pid for child in children)}

    def restart_if_exited(self) -> str | None:
        """When the server process has exited (killed, out of memory, a crash), start it again
        (models are loaded by the next trial) and say how it ended; None while it runs.
        ServerError when it cannot start again."""
        process = self._process
        if process is None or process.poll() is None:
            return None
        code = process.returncode
        last = log_tail(self._log_path, 1).strip()
        self._process = None
        self._grpc_url = ""
        self.start()
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        return f"the tuning server exited ({how}{'; ' + last if last else ''}) and was restarted"

    def url_for(self, protocol: str) -> str:
        """host:port of the endpoint of `protocol` ("http" or "grpc")."""
        if protocol != "grpc":
            return self.url
        if not self._grpc_url and self.choice.remote:
            raise ServerError("--protocol grpc on a remote server needs --server-grpc-url")
        if not self._grpc_url:
            if self._process is None:
                raise ServerError("the tuning server is not running")
            try:
                self._grpc_url = service_address(self._log_path, self._process)
            except ServeProcessError as exc:
                raise ServerError(str(exc)) from None
        return self._grpc_url

    def load(self, config: mc.ModelConfig, model: str | None = None) -> None:
        """Load (or reload) `model` (default: the measured one) with `config`; ServerError
        with the server's reason."""
        name = model or self.model_name
        parameters = {"config": json.dumps(config_to_json(config))}
        if self.choice.remote:
            # Its disk is not ours: a variant's files travel with the load.
            used = config.default_model_filename
            parameters |= {
                f"file:{relative}": base64.b64encode(path.read_bytes()).decode()
                for relative, path in self._file_overrides.get(name, {}).items()
                if used and relative.endswith("/" + used)
            }
        if self.choice.remote:
            self._note_as_found(name)
        try:
            BlockingClient(self.url, timeout_s=LOAD_TIMEOUT_S).load_model(name, parameters)
        except ClientError as exc:
            if exc.status is None:
                raise ServerError(f"the tuning server did not answer a load: {exc}") from None
            raise ServerError(str(exc)) from None

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self._log_path, lines)

    def describe(self) -> ServerInfo:
        """The server tuned: its name and version (from its metadata) and its address."""
        try:
            metadata = BlockingClient(self.url, timeout_s=10.0).server_metadata()
        except ClientError:
            metadata = {}
        kind = {AUTOTUNE: "private", TRITONSERVER: "private"}.get(self.choice.kind, "remote")
        return ServerInfo(
            name=str(metadata.get("name", self.choice.kind)),
            version=str(metadata.get("version", "")),
            address=self.url,
            launch=kind,
        )

    def _note_as_found(self, model: str) -> None:
        """Before the run first loads `model` on a remote server: the config it is served
        with now (None when it is not loaded), to put back at the end."""
        if model in self._as_found:
            return
        client = BlockingClient(self.url, timeout_s=LOAD_TIMEOUT_S)
        config = None
        if self._found.get(model, False):
            try:
                config = client.model_config(model)
            except ClientError as exc:
                raise ServerError(f"the server did not give {model}'s config: {exc}") from None
        self._as_found[model] = config

    def restore(self) -> None:
        """A remote server: each model the run loaded put back as it was found (loaded from
        the server's own repository, or unloaded). Errors are reported, not raised: the run
        is ending."""
        if not self.choice.remote:
            return
        client = BlockingClient(self.url, timeout_s=LOAD_TIMEOUT_S)
        for model, config in self._as_found.items():
            try:
                if config is not None:
                    # A plain load would keep the last override: the config it had, given.
                    client.load_model(model, {"config": json.dumps(config)})
                else:
                    client.unload_model(model)
            except ClientError as exc:
                _log.error("%s could not be put back as it was on %s: %s", model, self.url, exc)
        self._as_found.clear()

    def stop(self) -> None:
        self.restore()
        process, self._process = self._process, None
        if process is not None:
            if self.choice.kind == TRITONSERVER:
                stop_tritonserver(process)
            else:
                stop_serve_process(process)
        shutil.rmtree(self._root, ignore_errors=True)


@contextlib.contextmanager
def tuning_server(
    model_dir: Path,
    work_dir: Path,
    failure_log: Path | None = None,
    composing: Sequence[Path] = (),
    choice: ServerChoice | None = None,
) -> Iterator[TuningServer]:
    """The run's target started (a remote one: its models noted) and stopped at the end (a
    remote one: its models put back), also on an error or an interrupt."""
    server = TuningServer(
        model_dir,
        work_dir,
        failure_log=failure_log,
        composing=composing,
        choice=choice,
        log_dir=failure_log.parent if failure_log is not None else None,
    )
    try:
        server.start()
        yield server
    finally:
        server.stop()
