"""Triton's python backend: each model instance runs in its own stub process.

`PythonBackend` is imported on first access: the stub processes import modules of this package
too, and should not pay for the server-side imports (tritonclient, grpc) they never use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from serve.backends.python.backend import PythonBackend

__all__ = ["PythonBackend"]


def __getattr__(name: str) -> Any:
    if name == "PythonBackend":
        from serve.backends.python.backend import PythonBackend

        return PythonBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
