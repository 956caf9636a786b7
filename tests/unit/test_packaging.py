"""pyproject.toml tells the truth: a plain `pip install .` brings every package the product
imports, every declared package is used, and the declared Python floor is the one the linters
check the code against (CI installs the test extra, so only these checks see what a plain
install lacks; scripts/check_plain_install.sh proves it end to end)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PRODUCT_PACKAGES = tuple(
    pattern.rstrip("*")
    for pattern in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
)


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(requirement: str) -> str:
    return _normalize(re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0])


BASE = {_requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
EXTRAS = {
    extra: {_requirement_name(r) for r in requirements}
    for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items()
}


def _imports(tree: ast.AST) -> Iterator[tuple[str, bool]]:
    """(top-level module, imported lazily) for every absolute import in a module's tree.

    Lazy means inside a function or under `if TYPE_CHECKING:`, where an optional package is
    only needed when that code runs.
    """

    def walk(node: ast.AST, lazy: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name.split(".")[0], lazy
            elif isinstance(child, ast.ImportFrom):
                if child.level == 0 and child.module:
                    yield child.module.split(".")[0], lazy
            else:
                inner = lazy or isinstance(
                    child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
                )
                if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                    inner = True
                yield from walk(child, inner)

    yield from walk(tree, False)


# Optional packages whose import name is not their distribution's name: where the package is
# not installed, packages_distributions cannot tell whose module it is.
OPTIONAL_MODULE_DISTRIBUTIONS = {"pynvml": "nvidia-ml-py", "cupy": "cupy-cuda12x"}


def _third_party_imports() -> dict[str, list[tuple[str, bool]]]:
    """distribution -> [(file, lazy)] for every third-party import of the product."""
    module_dists = packages_distributions()
    found: dict[str, list[tuple[str, bool]]] = {}
    for package in PRODUCT_PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for module, lazy in _imports(ast.parse(path.read_text(), str(path))):
                if module in PRODUCT_PACKAGES or module in sys.stdlib_module_names:
                    continue
                dists = {_normalize(d) for d in module_dists.get(module, [])} or {
                    OPTIONAL_MODULE_DISTRIBUTIONS.get(module, module)
                }
                owner = next(iter(sorted(dists & BASE)), None) or sorted(dists)[0]
                found.setdefault(owner, []).append((str(path.relative_to(ROOT)), lazy))
    return found


def test_every_product_import_is_declared() -> None:
    optional = set().union(*(names for extra, names in EXTRAS.items() if extra != "test"))
    problems = []
    for dist, places in _third_party_imports().items():
        if dist in BASE:
            continue
        eager = [file for file, lazy in places if not lazy]
        if dist in optional and not eager:
            continue  # an optional runtime behind a lazy import
        where = ", ".join(sorted({file for file, _ in places})[:3])
        problems.append(f"{dist} (imported in {where}) is not a base dependency")
    assert problems == []


# Base dependencies no product module imports by name: a library the product calls needs them
# and does not declare them itself.
NEEDED_BY_A_DEPENDENCY = {
    "sympy": "onnxruntime.quantization.quant_pre_process (the INT8 variants) imports it",
}


# Base dependencies the bundled models or their build script import (not the packages): a plain
# install must build and serve model_repository/ (scripts/check_plain_install.sh does).
USED_BY_THE_MODEL_REPOSITORY = {
    "tokenizers": "model_repository/minilm_tokenizer/1/model.py",
    "safetensors": "scripts/builders/minilm.py",
}


def test_every_base_dependency_is_imported() -> None:
    imported = set(_third_party_imports())
    unused = sorted(
        BASE - imported - set(NEEDED_BY_A_DEPENDENCY) - set(USED_BY_THE_MODEL_REPOSITORY)
    )
    assert unused == [], f"declared in pyproject.toml but imported nowhere: {unused}"


def test_the_model_repository_s_dependencies_are_base_ones_it_imports() -> None:
    for dist, file in USED_BY_THE_MODEL_REPOSITORY.items():
        assert dist in BASE, f"{dist} ({file} imports it) is not a base dependency"
        modules = {module for module, _ in _imports(ast.parse((ROOT / file).read_text()))}
        assert dist in modules, f"{file} does not import {dist}"


def test_python_floor_is_what_the_linters_check() -> None:
    floor = re.fullmatch(r">=\s*3\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert floor is not None, "requires-python should read '>=3.N'"
    minor = int(floor.group(1))
    assert PYPROJECT["tool"]["mypy"]["python_version"] == f"3.{minor}"
    assert PYPROJECT["tool"]["ruff"]["target-version"] == f"py3{minor}"
    assert sys.version_info >= (3, minor)
