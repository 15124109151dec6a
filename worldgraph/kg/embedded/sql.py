"""What the two halves of the embedded store share: the statement helpers and the two methods
each half needs from ``EmbeddedGraphStore`` (its transaction and its read)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["SqliteAccess", "placeholders", "chunks"]


class SqliteAccess:
    """Declares what a mixin of EmbeddedGraphStore may call: ``_tx()`` (one IMMEDIATE write
    transaction) and ``_query(sql, params)`` (one read, under the store's lock)."""

    _tx: Callable[[], AbstractContextManager[sqlite3.Cursor]]
    _query: Callable[..., list[tuple[Any, ...]]]


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    """``items`` in slices SQLite takes as IN (...) parameters."""
    for i in range(0, len(items), size):
        yield items[i : i + size]
