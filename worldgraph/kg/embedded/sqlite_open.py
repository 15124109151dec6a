"""Opening the embedded store's SQLite file without writing to its folder.

A WAL database is read through three files: the database, its ``-wal`` (committed transactions
not yet copied into the database) and its ``-shm`` (the index of the WAL, shared by readers and
writers). A reader needs the ``-shm``; SQLite creates it when it is missing, which a read-only
folder (a mounted snapshot, a backup, a full disk) does not allow. So, in order:

1. ``mode=ro``: works whenever the ``-shm`` exists or can be made, and stays consistent with a
   writer in another process (SQLite's own locking). In a writable folder SQLite may create the
   empty ``-wal`` / ``-shm`` coordination files; it never changes the database.
2. ``immutable=1`` when there is no WAL content to miss (no ``-wal`` file, or an empty one): the
   database file alone is the whole state. Immutable skips all locking, which is only safe
   because nothing can write where the ``-shm`` could not be created.
3. Otherwise (a crash left committed transactions in the ``-wal`` and the ``-shm`` is gone) the
   three files are copied to a private temporary folder and opened there, so those transactions
   are read too. The copy is removed on ``close``.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import tempfile
from pathlib import Path
from urllib.parse import quote

from worldgraph.errors import NotFoundError, StorageError
from worldgraph.kg.embedded import sql

log = logging.getLogger("worldgraph")

__all__ = ["ReadOnlyConnection", "connect_read_only"]


class ReadOnlyConnection:
    """A read-only sqlite3 connection and how it was opened (``how``: ro, immutable or copy)."""

    def __init__(self, conn: sqlite3.Connection, how: str, tmpdir: str | None = None) -> None:
        self.conn = conn
        self.how = how
        self._tmpdir = tmpdir

    def close(self) -> None:
        self.conn.close()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


def _uri(path: Path, **params: str) -> str:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return f"file:{quote(str(path.resolve()))}?{query}"


def _try(uri: str) -> sqlite3.Connection | None:
    conn = sqlite3.connect(uri, uri=True, timeout=30.0, check_same_thread=False, isolation_level=None)
    try:
        conn.execute(sql.QUERY_ONLY)
        conn.execute(sql.READ_PROBE).fetchone()  # reads: needs the -shm
        return conn
    except sqlite3.OperationalError as exc:
        conn.close()
        log.debug("read-only open %s failed: %s", uri, exc)
        return None


def connect_read_only(path: Path) -> ReadOnlyConnection:
    """A connection that can only read ``path`` and writes nothing beside it (see the module doc)."""
    if not path.is_file():
        raise NotFoundError("database", str(path), "there is no worldgraph store to open read-only here "
                            "(open the folder writable once to create one)")
    conn = _try(_uri(path, mode="ro"))
    if conn is not None:
        return ReadOnlyConnection(conn, "ro")
    wal = path.with_name(path.name + "-wal")
    if not wal.exists() or wal.stat().st_size == 0:
        conn = _try(_uri(path, mode="ro", immutable="1"))
        if conn is not None:
            return ReadOnlyConnection(conn, "immutable")
    tmpdir = tempfile.mkdtemp(prefix="worldgraph-ro-")
    try:
        for suffix in ("", "-wal"):
            src = path.with_name(path.name + suffix)
            if src.exists():
                shutil.copyfile(src, Path(tmpdir) / (path.name + suffix))
    except OSError as exc:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise StorageError(f"cannot read {path} read-only: its write-ahead log needs a -shm file that cannot be "
                           f"created there, and copying it to {tempfile.gettempdir()} failed ({exc})") from exc
    log.warning("%s: read through a private copy (its -wal holds transactions and no -shm can be created "
                "beside it)", path)
    copy = Path(tmpdir) / path.name
    conn = sqlite3.connect(str(copy), timeout=30.0, check_same_thread=False, isolation_level=None)
    conn.execute(sql.QUERY_ONLY)
    return ReadOnlyConnection(conn, "copy", tmpdir)
