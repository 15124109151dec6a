"""Names a package exports but imports on first use (PEP 562): ``worldgraph`` (the service and its
libraries, ~1.7 s) and ``worldgraph.config`` (pydantic and the settings models), so that a tool, a
child process or ``worldgraph --help`` that needs one small module does not load them all."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, namespace: dict[str, Any],
                 exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps a name to the module that
    defines it; the first lookup imports it and keeps it in the package's ``namespace``."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exports})

    return getattr_, dir_
