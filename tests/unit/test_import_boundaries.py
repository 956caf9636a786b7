"""Which of our packages may import which: read from the sources with `ast`, so an import
anywhere in a module counts (inside a function, under `if TYPE_CHECKING:`, a relative one, an
`importlib.import_module("...")` with a literal name).

- protocol: the KServe v2 / Triton protocol, a leaf: nothing of ours.
- common: small shared helpers: the protocol at most.
- serve: itself, protocol, common.
- analyzer: itself, protocol, common (it is a client of any KServe v2 server, ours or not).
- tuner: itself, protocol, common and the public modules of the others: serve.api,
  analyzer.api, and the commands it mounts (serve.cli, analyzer.cli). tuner/cli.py is the
  composition root: it alone may import gate.cli.
- gate: itself, protocol, common, serve.api, analyzer.api.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# package -> modules (and everything under them) it may import
ALLOWED: dict[str, tuple[str, ...]] = {
    "protocol": ("protocol",),
    "common": ("common", "protocol"),
    "serve": ("serve", "protocol", "common"),
    "analyzer": ("analyzer", "protocol", "common"),
    "tuner": (
        "tuner",
        "protocol",
        "common",
        "serve.api",
        "serve.cli",
        "analyzer.api",
        "analyzer.cli",
    ),
    "gate": ("gate", "protocol", "common", "serve.api", "analyzer.api"),
}
# module -> what it may import beyond its package's rule
EXTRA: dict[str, tuple[str, ...]] = {
    "tuner.cli": ("gate.cli",),
}
OURS = (*ALLOWED, "tests", "scripts", "benchmarks")


@dataclass(frozen=True, slots=True)
class Violation:
    module: str
    line: int
    imported: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.imported}"


def module_name(path: Path, root: Path) -> tuple[str, bool]:
    """The dotted name of a source file and whether it is a package's __init__."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def imported_names(source: str, module: str, is_package: bool) -> Iterator[tuple[int, str]]:
    """(line, full dotted name) of everything a module's source imports, anywhere in it.

    `from a.b import c` gives `a.b.c` (c may be a module or a name in a.b: either way it is
    something of a.b); relative imports are resolved against `module`."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, base if alias.name == "*" else f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield node.lineno, first.value


def _is_import_module(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def _within(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(
    source: str,
    module: str,
    is_package: bool = False,
    allowed: Mapping[str, tuple[str, ...]] = ALLOWED,
    extra: Mapping[str, tuple[str, ...]] = EXTRA,
) -> list[Violation]:
    """The imports of `module` (given its source) that its package's rule does not allow."""
    package = module.split(".")[0]
    if package not in allowed:
        return []
    permitted = (*allowed[package], *extra.get(module, ()))
    return [
        Violation(module, line, name)
        for line, name in imported_names(source, module, is_package)
        if name.split(".")[0] in OURS and not _within(name, permitted)
    ]


def tree_violations(root: Path, packages: Sequence[str]) -> list[Violation]:
    found: list[Violation] = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name, is_package = module_name(path, root)
            found += violations(path.read_text(encoding="utf-8"), name, is_package)
    return found


def _packages_in_pyproject() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(pattern.rstrip("*") for pattern in include)


def test_every_package_has_a_rule() -> None:
    assert _packages_in_pyproject() == sorted(ALLOWED)


def test_the_packages_keep_their_boundaries() -> None:
    found = tree_violations(ROOT, sorted(ALLOWED))
    assert found == [], "\n".join(map(str, found))


def test_tuner_and_gate_use_only_public_modules_of_serve_and_analyzer() -> None:
    used = {
        ".".join(name.split(".")[:2])
        for package in ("tuner", "gate")
        for path in (ROOT / package).rglob("*.py")
        for _, name in imported_names(path.read_text(), *module_name(path, ROOT))
        if name.split(".")[0] in ("serve", "analyzer")
    }
    assert used <= {"serve.api", "serve.cli", "analyzer.api", "analyzer.cli"}, used


# The checker itself: each rule fails on a deliberate violation, wherever the import sits.

_HIDDEN_IMPORTS = """
from __future__ import annotations
from typing import TYPE_CHECKING
if TYPE_CHECKING:
    from serve.errors import ServeError
def later():
    import analyzer.load.factory
    from serve import repository
    importlib.import_module("tuner.run")
"""


def test_the_checker_finds_imports_hidden_in_functions_and_type_checking() -> None:
    found = violations(_HIDDEN_IMPORTS, "gate.server")
    assert [(v.line, v.imported) for v in found] == [
        (5, "serve.errors.ServeError"),
        (7, "analyzer.load.factory"),
        (8, "serve.repository"),
        (9, "tuner.run"),
    ]


def test_the_checker_enforces_each_rule() -> None:
    assert violations("import serve.api", "protocol.tensors")
    assert violations("from analyzer.api import measure", "common.atomic")
    assert violations("from tuner.run import tune_model", "serve.api")
    assert violations("from serve.api import open_model_directory", "analyzer.api")
    assert violations("from serve import errors", "tuner.run")
    assert violations("import serve", "tuner.run")
    assert violations("from gate.cli import gate_command", "tuner.report.cli")
    assert violations("from tuner.space import Platform", "gate.machine")
    assert violations("from ..serve import errors", "gate.server")  # relative, resolved


def test_the_checker_allows_what_the_rules_allow() -> None:
    allowed = {
        "protocol.client.http": "from protocol.errors import ClientError\nimport numpy",
        "common.serve_process": "from protocol import datatypes",
        "serve.api": "from .config import model_config\nfrom common.atomic import publish",
        "analyzer.api": "from protocol.client import HttpClient",
        "tuner.run": "from serve.api import open_model_directory\nfrom serve import api",
        "tuner.cli": "from gate.cli import gate_command\nfrom analyzer.cli import perf_command",
        "gate.measuring": "from analyzer.api import measure\nfrom . import baseline_file",
    }
    for module, source in allowed.items():
        assert violations(source, module) == [], module


def test_the_tree_check_fails_on_a_violating_file(tmp_path: Path) -> None:
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "__init__.py").write_text("")
    (tmp_path / "gate" / "sneaky.py").write_text(
        "def helper():\n    from tuner.space import usable_cpu_count\n"
    )
    assert [str(v) for v in tree_violations(tmp_path, ["gate"])] == [
        "gate.sneaky:2 imports tuner.space.usable_cpu_count"
    ]


# Within serve, a transport's library belongs to its transport package alone: the serving core
# stays protocol-neutral.
TRANSPORT_LIBRARIES: dict[str, str] = {
    "grpc": "serve.grpc",
    "hpack": "serve.grpc",
    "fastapi": "serve.http",
    "starlette": "serve.http",
    "httptools": "serve.http",
}


def transport_violations(source: str, module: str, is_package: bool = False) -> list[Violation]:
    """The imports of a serve module of a transport library outside that library's package."""
    if module.split(".")[0] != "serve":
        return []
    found = []
    for line, name in imported_names(source, module, is_package):
        owner = TRANSPORT_LIBRARIES.get(name.split(".")[0])
        if owner is not None and not _within(module, (owner,)):
            found.append(Violation(module, line, name))
    return found


def test_only_the_transports_import_their_libraries() -> None:
    found = [
        violation
        for path in sorted((ROOT / "serve").rglob("*.py"))
        for violation in transport_violations(
            path.read_text(encoding="utf-8"), *module_name(path, ROOT)
        )
    ]
    assert found == [], "\n".join(map(str, found))


def test_the_transport_check_finds_a_core_module_importing_grpc() -> None:
    assert transport_violations("import grpc", "serve.dataplane")
    assert transport_violations("from fastapi import FastAPI", "serve.grpc.service")
    assert transport_violations("from grpc import aio", "serve.http.app")
    assert transport_violations("import httptools", "serve.dataplane")
    assert not transport_violations("import httptools", "serve.http.native.protocol")
    assert not transport_violations("from grpc import aio", "serve.grpc.endpoint")
    assert not transport_violations("import grpc", "protocol.client.grpc")
