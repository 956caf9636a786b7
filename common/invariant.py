"""Invariants the code relies on, checked in every run (an `assert` is gone under `python -O`).

Breaking one is a bug of ours, not bad input: `InvariantError` says which rule broke, and the
transports answer it as any unexpected error (INTERNAL / 500)."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


class InvariantError(RuntimeError):
    """A state the code rules out was reached; the message names the rule."""


def present(value: T | None, rule: str) -> T:
    """`value`, which `rule` says cannot be None here."""
    if value is None:
        raise InvariantError(rule)
    return value
