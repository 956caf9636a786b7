"""Model lifecycle over a repository: load, reload, unload, index, and polling for changes.

A model whose config or files are broken is UNAVAILABLE with its reason while the others
serve. Reloading loads the new versions first and swaps them in, so a failed reload leaves the
previous versions serving.

Several repositories may be served together (tritonserver's repeated --model-repository): a
model is a folder of any of them; a name that is a folder of two is not served (as in Triton).

A load answers as tritonserver does where its clients check: what fails before any version
loads (no such model, a config that cannot be read, files that cannot be written) is INTERNAL,
"failed to load '<name>', failed to poll from model repository: <why>"; a version that fails to
load is INVALID_ARGUMENT, "failed to load '<name>': version <n>: <why>".
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from serve.config.ensemble import composing_models, is_ensemble
from serve.errors import ErrorKind, ServeError
from serve.model.ensemble_version import EnsembleVersion, load_ensemble_version
from serve.model.loader import ServerServices, load_model_version
from serve.model.served import ServedModel
from serve.repository.discovery import (
    NoVersionError,
    ensemble_steps_on_disk,
    model_directories,
    prepare_config,
)
from serve.repository.names import (
    check_model_file,
    check_model_name,
    check_version,
    printable,
)

log = logging.getLogger("serve.repository")

# Triton's reason for a model whose name is a folder of two repositories
DUPLICATE_REASON = "model appears in two or more repositories"


class ControlMode(enum.Enum):
    """tritonserver's --model-control-mode: what loads models (the start only, the repository
    API, or the repository's changes)."""

    NONE = "none"
    EXPLICIT = "explicit"
    POLL = "poll"


@dataclass(slots=True)
class VersionState:
    """One version's state as the repository index reports it, and why when unavailable."""

    state: str  # READY | UNAVAILABLE | LOADING | UNLOADING
    reason: str = ""


@dataclass(slots=True)
class ModelRecord:
    """Everything the repository knows of one model name: its loaded versions and their
    states, why it failed, the config and files it was loaded from; `lock` serialises its
    loads and unloads."""

    name: str
    versions: dict[int, ServedModel] = field(default_factory=dict)
    states: dict[int, VersionState] = field(default_factory=dict)
    failure: str = ""  # why the model as a whole is unavailable (e.g. its config)
    config: mc.ModelConfig | None = None
    fingerprint: tuple[Any, ...] = ()
    scratch_dir: Path | None = None  # model files sent with a load request
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def _fingerprint(model_dir: Path) -> tuple[Any, ...]:
    """What polling compares to notice a changed model: every file's path, size and mtime."""
    entries = []
    for path in sorted(model_dir.rglob("*")):
        if path.is_file():
            stat = path.stat()
            entries.append((str(path.relative_to(model_dir)), stat.st_size, stat.st_mtime_ns))
    return tuple(entries)


@dataclass(frozen=True, slots=True)
class ModelReading:
    """How a model's folder is read and loaded (tritonserver's flags)."""

    # --model-config-name: a model with configs/<name>.pbtxt is served with that config
    config_name: str = ""
    # false: configs are taken as written (--disable-auto-complete-config)
    auto_complete: bool = True
    # backend name ("" for every backend) -> settings (--backend-config)
    backend_settings: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # how many times a version that failed to load is tried again (--model-load-retry-count)
    load_retries: int = 0


class ModelRepository:
    """The models of one or more repository folders as the server serves them: loads them at
    start, through the repository API or by polling (per `ControlMode`), resolves a request's
    model and version, and reports the index; every change runs on the event loop."""

    def __init__(
        self,
        paths: Path | Sequence[Path],
        mode: ControlMode,
        poll_seconds: float = 15.0,
        reading: ModelReading | None = None,
    ) -> None:
        self.paths = [paths] if isinstance(paths, Path) else list(paths)
        if not self.paths:
            raise ValueError("a model repository needs at least one folder")
        self.reading = reading or ModelReading()
        self.mode = mode
        self.poll_seconds = poll_seconds
        self._records: dict[str, ModelRecord] = {}
        self._poller: asyncio.Task[None] | None = None
        self.services = ServerServices()  # what models loaded from now on may call

    # -- the folders ----------------------------------------------------------------------------

    def _on_disk(self) -> dict[str, list[Path]]:
        """Every model folder of every repository by name (a name in two repositories has two
        folders); ServeError when a repository is no folder."""
        found: dict[str, list[Path]] = {}
        for repository in self.paths:
            for model_dir in model_directories(repository):
                found.setdefault(model_dir.name, []).append(model_dir)
        return found

    def _folders(self, name: str) -> list[Path]:
        """The folders named `name` (a checked model name) across the repositories."""
        return [repository / name for repository in self.paths if (repository / name).is_dir()]

    def _model_dir(self, name: str) -> Path | None:
        """The folder of model `name` (a checked name); None when no repository has it;
        ServeError when two have it."""
        folders = self._folders(name)
        if len(folders) > 1:
            raise ServeError.unavailable(
                f"{DUPLICATE_REASON}: {', '.join(str(folder) for folder in folders)}"
            )
        return folders[0] if folders else None

    def _where(self) -> str:
        return ", ".join(str(path) for path in self.paths)

    # -- start-up and shutdown ----------------------------------------------------------------

    async def start(self, load_models: list[str]) -> list[str]:
        """Load what the control mode asks for at start-up; failures are logged and recorded,
        not raised. Returns the names of the models that failed to load."""
        names = sorted(self._on_disk())
        if self.mode == ControlMode.EXPLICIT:
            names = names if "*" in load_models else load_models
        failed: list[str] = []
        for layer in await self._load_layers(names):
            loaded = await asyncio.gather(*(self._load_quietly(name) for name in layer))
            failed += [name for name, ok in zip(layer, loaded, strict=True) if not ok]
        if self.mode == ControlMode.POLL:
            self._poller = asyncio.create_task(self._poll_forever())
        return [name for name in names if name in failed]

    async def _load_layers(self, names: list[str]) -> list[list[str]]:
        """`names` in loading order: models first, then each ensemble after the ensembles it
        calls (a cycle is left to the load to report)."""
        steps = {name: await asyncio.to_thread(self._ensemble_steps, name) for name in names}
        layers = [[name for name in names if steps[name] is None]]
        left = [name for name in names if steps[name] is not None]
        while left:
            layer = [n for n in left if not any(m in left and m != n for m in steps[n] or [])]
            layer = layer or left
            layers.append(layer)
            left = [n for n in left if n not in layer]
        return [layer for layer in layers if layer]

    def _ensemble_steps(self, name: str) -> list[str] | None:
        folders = self._folders(name)
        if len(folders) != 1:
            return None
        return ensemble_steps_on_disk(folders[0], self.reading.config_name)

    async def _load_quietly(self, name: str) -> bool:
        try:
            await self.load(name)
        except ServeError as exc:
            log.error("%s", exc.message)
            return False
        return True

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
        await asyncio.gather(*(self.unload(name) for name in list(self._records)))

    # -- load and unload ----------------------------------------------------------------------

    def check_control(self) -> None:
        """Raise when the repository API may not load or unload in this mode."""
        if self.mode != ControlMode.EXPLICIT:
            raise ServeError(
                ErrorKind.UNSUPPORTED,
                f"explicit model load / unload is not allowed in model control mode "
                f"'{self.mode.value}' (start the server with --model-control-mode explicit)",
            )

    async def load(
        self,
        name: str,
        override: mc.ModelConfig | None = None,
        files: dict[str, bytes] | None = None,
        *,
        callers: tuple[str, ...] = (),
    ) -> None:
        """(Re)load a model; raise ServeError with the reason when no version could be loaded.
        `callers`: the ensembles whose loading asked for this one (to refuse a cycle)."""
        try:
            check_model_name(name)
        except ServeError as exc:  # the name as given may hold anything: printed escaped
            raise ServeError(
                exc.kind, f"failed to load '{printable(name)}': {exc.message}"
            ) from None
        try:
            for relative in files or {}:
                check_model_file(name, relative)
            if not files and name not in self._records and not self._folders(name):
                # before a record exists: a name that is no model must not appear in the index
                raise ServeError.not_found(f"no such model in {self._where()}")
        except ServeError as exc:
            raise poll_failure(name, exc.message) from None
        record = self._records.setdefault(name, ModelRecord(name))
        async with record.lock:
            try:
                await self._load_locked(record, override, files, callers)
            except ServeError as exc:
                raise _load_failure(name, exc) from None
            except OSError as exc:  # e.g. a file sent with the request that cannot be written
                raise poll_failure(name, str(exc)) from None

    async def _load_locked(
        self,
        record: ModelRecord,
        override: mc.ModelConfig | None,
        files: dict[str, bytes] | None,
        callers: tuple[str, ...] = (),
    ) -> None:
        name = record.name
        scratch: Path | None = None
        try:
            if files:
                if override is None:
                    raise ServeError.invalid(
                        f"load of '{name}': file overrides need a 'config' parameter as well"
                    )
                scratch = await asyncio.to_thread(_write_scratch_model, name, files)
                model_dir = scratch
            else:
                found = self._model_dir(name)
                if found is None:
                    raise ServeError.not_found(f"no such model in {self._where()}")
                model_dir = found
        except ServeError as exc:
            if not record.versions:
                record.failure = exc.message
            raise poll_failure(name, exc.message) from None
        try:
            fingerprint = await asyncio.to_thread(_fingerprint, model_dir)
            config, versions, _ = await asyncio.to_thread(
                prepare_config,
                model_dir,
                override,
                self.reading.config_name,
                self.reading.auto_complete,
                self.reading.backend_settings,
            )
        except ServeError as exc:
            _discard(scratch)
            if not record.versions:
                record.failure = exc.message
            if isinstance(exc, NoVersionError):  # Triton: a load failure, not a poll failure
                raise ServeError.invalid(exc.message) from None
            raise poll_failure(name, exc.message) from None
        if is_ensemble(config):
            try:
                await self._load_composing(config, (*callers, name))
            except ServeError:
                _discard(scratch)
                raise
        for version in versions:
            record.states[version] = VersionState("LOADING")
        loaded: dict[int, ServedModel] = {}
        errors: list[str] = []
        for version in versions:
            for attempt in range(1 + self.reading.load_retries):
                try:
                    loaded[version] = await self._load_version(config, version, model_dir)
                    break
                except Exception as exc:  # a backend's failure is this model's problem
                    message = (
                        exc.message
                        if isinstance(exc, ServeError)
                        else f"{type(exc).__name__}: {exc}"
                    )
                    if attempt < self.reading.load_retries:
                        log.warning(
                            "'%s' version %d failed to load (%s); trying again",
                            name,
                            version,
                            message,
                        )
                        continue
                    errors.append(f"version {version}: {message}")
                    record.states[version] = VersionState("UNAVAILABLE", message)
        if not loaded:
            _discard(scratch)
            for version in record.versions:
                record.states[version] = VersionState("READY")
            if not record.versions:
                record.failure = "; ".join(errors)
            raise ServeError.invalid("; ".join(errors))
        previous = record.versions
        previous_scratch = record.scratch_dir
        record.versions = loaded
        record.config = config
        record.failure = ""
        record.fingerprint = fingerprint
        record.scratch_dir = scratch
        for version in loaded:
            record.states[version] = VersionState("READY")
        for version in previous:
            if version not in loaded and version not in versions:
                record.states[version] = VersionState("UNAVAILABLE", "unloaded")
        await asyncio.gather(*(old.unload() for old in previous.values()))
        _discard(previous_scratch)
        if errors:
            log.warning("'%s' loaded with failed versions: %s", name, "; ".join(errors))
        log.info("loaded '%s' versions %s", name, sorted(loaded))

    async def _load_version(
        self, config: mc.ModelConfig, version: int, model_dir: Path
    ) -> ServedModel:
        if is_ensemble(config):
            return await load_ensemble_version(
                config, version, model_dir, self.get, self.services.response_cache
            )
        return await load_model_version(config, version, model_dir, model_dir.parent, self.services)

    async def _load_composing(self, config: mc.ModelConfig, callers: tuple[str, ...]) -> None:
        """In explicit mode, load the composing models that are not loaded yet (as Triton
        does); a cycle of ensembles is refused naming the step."""
        steps = config.ensemble_scheduling.step
        for model in composing_models(config):
            index = next(i for i, step in enumerate(steps) if step.model_name == model)
            where = f"ensemble_scheduling.step[{index}] (model '{model}')"
            if model in callers:
                raise ServeError.invalid(
                    f"{where}: ensembles call each other in a cycle: {' -> '.join(callers)}"
                    f" -> {model}"
                )
            record = self._records.get(model)
            if self.mode != ControlMode.EXPLICIT or (record is not None and record.versions):
                continue
            try:
                await self.load(model, callers=callers)
            except ServeError as exc:
                raise ServeError(exc.kind, f"{where}: {exc.message}") from None

    async def unload(self, name: str, *, unload_dependents: bool = False) -> None:
        """Unload `name`; with `unload_dependents`, an ensemble's composing models too, those
        no other loaded ensemble still calls."""
        await self._unload_one(name)
        record = self._records.get(name)
        if not unload_dependents or record is None or record.config is None:
            return
        if not is_ensemble(record.config):
            return
        for model in composing_models(record.config):
            if not self._used_by_a_loaded_ensemble(model):
                await self.unload(model, unload_dependents=True)

    def _used_by_a_loaded_ensemble(self, model: str) -> bool:
        return any(
            other.versions and other.config is not None and model in composing_models(other.config)
            for other in self._records.values()
            if other.config is not None and is_ensemble(other.config)
        )

    async def _unload_one(self, name: str) -> None:
        record = self._records.get(name)
        if record is None:
            try:
                check_model_name(name)
            except ServeError as exc:
                raise ServeError.invalid(
                    f"failed to unload '{printable(name)}': {exc.message}"
                ) from None
            # nothing loaded under that name: nothing to do (tritonserver answers success too,
            # for a model in no repository as well)
            return
        async with record.lock:
            versions = record.versions
            for version in versions:
                record.states[version] = VersionState("UNLOADING")
            record.versions = {}
            record.failure = ""  # unloaded on purpose: no longer a model that should be ready
            await asyncio.gather(*(v.unload() for v in versions.values()))
            for version in versions:
                record.states[version] = VersionState("UNAVAILABLE", "unloaded")
            _discard(record.scratch_dir)
            record.scratch_dir = None
        log.info("unloaded '%s'", name)

    # -- lookups ------------------------------------------------------------------------------

    def get(self, name: str, version: str = "") -> ServedModel:
        """The version to serve; NOT_FOUND for unknown names or versions, UNAVAILABLE otherwise."""
        record = self._records.get(name)
        if record is None:
            raise ServeError.not_found(f"Request for unknown model: '{name}' is not found")
        if version:
            number = check_version(version)
            found = record.versions.get(number)
            if found is not None:
                return found
            state = record.states.get(number)
            if state is None:
                raise ServeError.not_found(
                    f"Request for unknown model: '{name}' version {version} is not found"
                )
            raise ServeError.unavailable(
                f"model '{name}' version {version} is not ready: {state.state} {state.reason}"
            )
        if record.versions:
            return record.versions[max(record.versions)]
        reason = record.failure or "; ".join(
            f"version {v}: {s.reason}" for v, s in sorted(record.states.items())
        )
        raise ServeError.unavailable(f"model '{name}' is not ready: {reason or 'not loaded'}")

    def knows(self, name: str) -> bool:
        """The model is in the repository (on disk, or loaded from a request)."""
        record = self._records.get(name)
        if record is not None and (record.versions or record.states or record.failure):
            return True
        try:
            check_model_name(name)
        except ServeError:
            return False
        return bool(self._folders(name))

    def all_ready(self) -> bool:
        """Every model the server was asked to serve has all its versions ready (versions
        unloaded on purpose do not count), as tritonserver's strict readiness requires."""
        for record in self._records.values():
            if record.failure and not record.versions:
                return False
            for version, state in record.states.items():
                if state.state != "READY" and state.reason != "unloaded":
                    return False
                if state.state == "READY" and _unready_ensemble(record, version):
                    return False
        return True

    def ready_versions(self, name: str) -> list[int]:
        record = self._records.get(name)
        return sorted(record.versions) if record else []

    def loaded(self) -> list[ServedModel]:
        return [
            version
            for name in sorted(self._records)
            for _, version in sorted(self._records[name].versions.items())
        ]

    def index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: every model on disk, with each version's state."""
        on_disk = self._on_disk()
        names = set(on_disk) | set(self._records)
        entries: list[dict[str, str]] = []
        for name in sorted(names):
            record = self._records.get(name)
            if len(on_disk.get(name, [])) > 1:
                if not ready_only:
                    duplicate = {"state": "UNAVAILABLE", "reason": DUPLICATE_REASON}
                    entries.append({"name": name, "version": "", **duplicate})
                continue
            if record is None or (not record.states and not record.failure):
                if not ready_only:
                    entries.append({"name": name})
                continue
            if not record.states:
                if not ready_only:
                    entries.append(
                        {
                            "name": name,
                            "version": "",
                            "state": "UNAVAILABLE",
                            "reason": record.failure,
                        }
                    )
                continue
            for version, state in sorted(record.states.items()):
                shown = state
                if state.state == "READY":
                    reason = _unready_ensemble(record, version)
                    shown = VersionState("UNAVAILABLE", reason) if reason else state
                if ready_only and shown.state != "READY":
                    continue
                entries.append(
                    {
                        "name": name,
                        "version": str(version),
                        "state": shown.state,
                        "reason": shown.reason,
                    }
                )
        return entries

    # -- polling ------------------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.poll_once()
            except Exception:
                log.exception("repository poll failed")

    async def poll_once(self) -> None:
        """Load new models, reload changed ones and unload removed ones."""
        folders = self._on_disk()
        on_disk = set(folders)
        changed: dict[str, tuple[Any, ...]] = {}
        for name in sorted(on_disk):
            record = self._records.get(name)
            if len(folders[name]) > 1:  # not served while two repositories have it
                if record is not None and (record.versions or not record.failure):
                    await self.unload(name)
                    record.failure = DUPLICATE_REASON
                    record.fingerprint = ()
                continue
            fingerprint = await asyncio.to_thread(_fingerprint, folders[name][0])
            if record is None or fingerprint != record.fingerprint:
                changed[name] = fingerprint
        for name in sorted(on_disk - set(changed)):  # an ensemble that waited for its models
            record = self._records.get(name)
            if record is None or record.versions:
                continue
            steps = await asyncio.to_thread(self._ensemble_steps, name)
            if steps and any(model in changed for model in steps):
                changed[name] = record.fingerprint
        for layer in await self._load_layers(list(changed)):  # ensembles after their models
            for name in layer:
                await self._load_quietly(name)
                if name in self._records:
                    self._records[name].fingerprint = changed[name]
        for name in sorted(set(self._records) - on_disk):
            await self.unload(name)
            self._records.pop(name, None)


def _unready_ensemble(record: ModelRecord, version: int) -> str:
    """Why a loaded ensemble version cannot serve (a composing model is not ready), or ""."""
    served = record.versions.get(version)
    if isinstance(served, EnsembleVersion):
        return served.unready_reason()
    return ""


def _write_scratch_model(name: str, files: dict[str, bytes]) -> Path:
    """Write files sent with a load request ("<version>/<file>", checked by `load`) into a
    private model folder; nothing is left behind when one cannot be written."""
    root = Path(tempfile.mkdtemp(prefix="autotune-model-"))
    try:
        model_dir = root / name
        model_dir.mkdir()
        inside = model_dir.resolve()
        for relative, content in files.items():
            target = (model_dir / relative).resolve()
            if inside not in target.parents:  # a symlink could still lead out: never follow
                raise ServeError.invalid(
                    f"load of '{name}': file path '{relative}' leaves the model"
                )
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            except (FileExistsError, IsADirectoryError, NotADirectoryError):
                raise ServeError.invalid(
                    f"load of '{name}': file path '{relative}' is both a file and a folder "
                    "among the files sent"
                ) from None
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return model_dir


def _discard(scratch: Path | None) -> None:
    if scratch is not None:
        shutil.rmtree(scratch.parent, ignore_errors=True)


def poll_failure(name: str, why: str) -> ServeError:
    """A load that failed before any version could load, answered as tritonserver answers it
    (INTERNAL, "failed to load '<name>', failed to poll from model repository"), with why."""
    return ServeError.internal(
        f"failed to load '{name}', failed to poll from model repository: {why}"
    )


def _load_failure(name: str, exc: ServeError) -> ServeError:
    """Every load failure says "failed to load '<name>'", as Triton's clients expect."""
    prefix = f"failed to load '{name}'"
    if exc.message.startswith(prefix):
        return exc
    return ServeError(exc.kind, f"{prefix}: {exc.message}")
