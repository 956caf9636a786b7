"""Completing a python model's config from its `auto_complete_config` hook.

The hook is user code, so it runs in a short-lived child process; the server only applies what
the hook asked for, filling what the config lacks and refusing contradictions.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from protocol.proto_json import message_to_json
from serve.backends.python.environment import child_env, execution_env_paths
from serve.config.tensor_completion import FoundTensor, complete_tensors
from serve.errors import ServeError

CHILD_MODULE = "serve.backends.python.autocomplete_child"
HOOK_NAME = "auto_complete_config"
MODEL_CLASS = "TritonPythonModel"


def autocomplete_python_config(
    config: mc.ModelConfig, model_path: Path, timeout_s: float = 60.0
) -> None:
    """Apply the model's `TritonPythonModel.auto_complete_config`, if it has one, to `config`."""
    if not model_path.is_file():
        return  # loading reports the missing file
    if not may_define_hook(model_path.read_bytes()):
        return
    name = config.name or model_path.parent.parent.name
    recorded = _run_hook(config, model_path, name, timeout_s)
    apply_recorded(config, recorded, name)


def may_define_hook(source: bytes) -> bool:
    """False only when `source` surely has no auto_complete_config: the name appears nowhere
    in it and its TritonPythonModel is a plain class of the module, bound once (no base but
    object, no metaclass or decorator that could bring the hook). Then the helper process,
    which imports the model (a python start and the model's own imports, about 0.25 s), is
    skipped; anything less certain (an unparsable file, a class imported, rebound or built
    elsewhere) still runs it."""
    if HOOK_NAME.encode() in source:
        return True
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return True  # the helper reports it, naming the file
    classes = [
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == MODEL_CLASS
    ]
    if len(classes) != 1 or _bindings(tree, MODEL_CLASS) != 1:
        return True
    model_class = classes[0]
    bases_plain = all(isinstance(b, ast.Name) and b.id == "object" for b in model_class.bases)
    return not bases_plain or bool(model_class.keywords or model_class.decorator_list)


def _bindings(tree: ast.Module, name: str) -> int:
    """How many times the module binds `name` anywhere (definitions, assignments, imports)."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            count += node.name == name
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            count += node.id == name
        elif isinstance(node, ast.alias):
            count += (node.asname or node.name.split(".")[0]) == name
    return count


def _run_hook(
    config: mc.ModelConfig, model_path: Path, name: str, timeout_s: float
) -> dict[str, Any]:
    config_json = json.dumps(message_to_json(config))
    with tempfile.TemporaryDirectory(prefix="autotune-autocomplete-") as tmp:
        result_file = Path(tmp) / "result.json"
        try:
            proc = subprocess.run(
                [sys.executable, "-m", CHILD_MODULE, str(model_path), str(result_file)],
                input=config_json.encode(),
                env=child_env(execution_env_paths(config, model_path.parent.parent)),
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ServeError.unavailable(
                f"{name}: auto_complete_config did not finish within {timeout_s:g} s"
            ) from None
        if not result_file.is_file():
            raise ServeError.unavailable(
                f"{name}: auto_complete_config failed: "
                f"helper process exited with code {proc.returncode}"
            )
        result = json.loads(result_file.read_text())
    if "error" in result:
        raise ServeError.unavailable(f"{name}: auto_complete_config failed: {result['error']}")
    recorded: dict[str, Any] = result["recorded"]
    return recorded


def apply_recorded(config: mc.ModelConfig, recorded: dict[str, Any], name: str) -> None:
    """Fill `config` with what auto_complete_config asked for (see pb_utils.ModelConfig)."""
    max_batch_size = recorded.get("max_batch_size")
    if max_batch_size is not None:
        if config.max_batch_size == 0:
            config.max_batch_size = max_batch_size
        elif config.max_batch_size > max_batch_size:
            raise ServeError.invalid(
                f"{name}: max_batch_size {config.max_batch_size} in the config exceeds "
                f"{max_batch_size}, the most auto_complete_config allows"
            )
    if recorded.get("dynamic_batching") and config.WhichOneof("scheduling_choice") is None:
        config.dynamic_batching.SetInParent()
    for entry in recorded.get("input", []):
        _merge_tensor(config.input, mc.ModelInput(), entry, "input", name)
    for entry in recorded.get("output", []):
        _merge_tensor(config.output, mc.ModelOutput(), entry, "output", name)
    policy = recorded.get("model_transaction_policy")
    if policy and not config.HasField("model_transaction_policy"):
        _parse(policy, config.model_transaction_policy, f"{name}: model_transaction_policy")


def _merge_tensor(existing: Any, parsed: Any, entry: dict[str, Any], kind: str, model: str) -> None:
    where = f"{model}: auto_complete_config {kind} '{entry.get('name', '')}'"
    _parse(entry, parsed, where)
    if not any(t.name == parsed.name for t in existing):
        existing.add().CopyFrom(parsed)  # every field the hook gave (optional, format...)
        return
    found = FoundTensor(parsed.name, parsed.data_type, tuple(parsed.dims))
    complete_tensors(
        existing,
        [found],
        kind=kind,
        where=model,
        origin="from auto_complete_config",
        refuse_conflicts=True,
    )


def _parse(entry: dict[str, Any], message: Any, where: str) -> None:
    try:
        json_format.ParseDict(entry, message)
    except json_format.ParseError as exc:
        raise ServeError.invalid(f"{where}: {exc}") from None
