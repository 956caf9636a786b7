"""Every public module-level class and function of the product packages has a docstring that
says what it is for (its role or its contract): read from the sources with `ast`. Methods and
names starting with "_" are not held to it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PACKAGES = ("serve", "tuner", "analyzer", "gate", "protocol", "common")

_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def undocumented(source: str) -> list[tuple[int, str]]:
    """(line, name) of each public module-level class or function of `source` without a
    docstring."""
    return [
        (node.lineno, node.name)
        for node in ast.parse(source).body
        if isinstance(node, _DEFINITIONS)
        and not node.name.startswith("_")
        and ast.get_docstring(node) is None
    ]


def test_every_public_class_and_function_has_a_docstring() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, name in undocumented(path.read_text())
    ]
    assert not offenders, (
        f"public classes and functions without a docstring ({len(offenders)}); say what "
        "each is for:\n" + "\n".join(offenders)
    )


def test_the_check_sees_public_definitions_only() -> None:
    source = '''
def bare(): pass
async def bare_async(): pass
class Bare: pass
def documented():
    """Why it exists."""
def _private(): pass
class Documented:
    """Its role."""
    def method(self): pass
'''
    assert undocumented(source) == [(2, "bare"), (3, "bare_async"), (4, "Bare")]
