"""Binding a list of values: the ``?`` of an ``IN (...)`` list, and a list cut to what SQLite takes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def chunks(items: list[T], size: int = 500) -> Iterator[list[T]]:
    """``items`` in slices SQLite takes as IN (...) parameters."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
