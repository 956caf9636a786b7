"""Product code checks its invariants in every run: no `assert` statement (stripped under
`python -O`) in the product packages; `common.invariant` raises instead."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("serve", "analyzer", "tuner", "gate", "protocol", "common")


def asserts(source: str) -> list[int]:
    """The lines of `source`'s assert statements."""
    return [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Assert)]


def test_the_product_packages_hold_no_assert_statement() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        for line in asserts(path.read_text())
    ]
    assert found == [], "asserts in product code (use common.invariant):\n" + "\n".join(found)


def test_the_check_finds_an_assert_anywhere() -> None:
    assert asserts("def f(x):\n    if x:\n        assert x > 1\n") == [3]
    assert asserts("x = 1\n") == []
