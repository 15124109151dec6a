"""The one SQLite connection the parts of the embedded store share (``SqliteConnection``).

One file in WAL mode (``<data>/worldgraph.db``). Each public write of the store is one
``transaction()``, so a record that was committed survives ``kill -9`` and a half-written batch is
rolled back on the next open. Several processes may open the same file: SQLite's locking
serialises writers and ``busy_timeout`` makes them wait instead of failing. One lock serialises
this process's threads on the connection.

The connection also counts the commits that wrote the tables of a Cypher projection's episode or
world part: each such transaction bumps the part's generation in the ``projection_gens`` table
before it commits, so the count is durable and shared by every process writing the file
(``version``; a projection saved on disk names the generations it holds). It remembers which
world rows this connection's last ``WORLD_LOG_KEPT`` world commits wrote (``world_touched``), so
that ``cypher()`` refreshes a projection row by row.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from worldgraph.errors import ReadOnlyError, StorageError
from worldgraph.filemodes import create_private_file
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.checkpointer import Checkpointer
from worldgraph.kg.embedded.cypher.model import EPISODE_SOURCES, WORLD_SOURCES, Gens
from worldgraph.kg.embedded.sqlite_open import ReadOnlyConnection, connect_read_only
from worldgraph.schema import SCHEMA_VERSIONS, check_schema_version, needs_upgrade

__all__ = ["Gens", "SqliteConnection", "SCHEMA_VERSION", "WORLD_LOG_KEPT"]

SCHEMA_VERSION = SCHEMA_VERSIONS["embedded"]  # worldgraph.schema keeps every store's version
WORLD_LOG_KEPT = 256  # world commits whose written rows are remembered (for a projection's refresh)

_WRITE_RE = re.compile(r"\s*(?:INSERT|REPLACE|UPDATE|DELETE)\b", re.I)
_PARTS = {**{t: "episodes" for t in EPISODE_SOURCES}, **{t: "world" for t in WORLD_SOURCES}}
_NOT_PROJECTED = ("api_keys", "schema_info", "projection_gens", "forget_log", "idempotency", "purge_gens",
                  "index_appends")

# Upserts whose parameters name the world row they write: (table, how many parameters after
# tenant_id make its key in cypher.load.WorldRows). scene_links is not read by the projection.
_KEYED_RE = re.compile(r"\s*INSERT INTO (world_nodes|world_edges|world_rules|scenes|scene_reports|env_meta)"
                       r"\(tenant_id, env_name(, (?:id|scene_id))?\b")
_UNREAD = ("scene_links",)

# rows a world commit wrote: (tenant, table, key); None when not known from its parameters
Touched = set[tuple[str, str, Any]] | None


class _Tracked:
    """A transaction's cursor that notes which part of a Cypher projection each write touches (by
    the tables its statement names); a write naming no known table marks both, to be safe. Of the
    world part it also notes the rows written ((tenant, table, key) in ``touched[0]``), or None
    when a write's rows are not known from its parameters."""

    def __init__(self, cur: sqlite3.Cursor, parts: set[str], touched: list[Touched]) -> None:
        self._cur, self._parts, self._touched = cur, parts, touched

    def _note(self, statement: str, rows: Iterable[Any]) -> None:
        if _WRITE_RE.match(statement):
            found = {part for table, part in _PARTS.items() if re.search(rf"\b{table}\b", statement)}
            if not found and not any(re.search(rf"\b{t}\b", statement) for t in _NOT_PROJECTED):
                found = {"episodes", "world"}
            self._parts |= found
            if "world" in found and self._touched[0] is not None:
                m = _KEYED_RE.match(statement)
                if m is None:
                    if not any(re.search(rf"\b{t}\b", statement) for t in _UNREAD):
                        self._touched[0] = None
                    return
                table, keyed = m.group(1), m.group(2) is not None
                for row in rows:
                    key = (row[1], row[2]) if table.startswith("world_") else row[2] if keyed else row[1]
                    self._touched[0].add((row[0], table, key))

    def execute(self, statement: str, *args: Any) -> sqlite3.Cursor:
        self._note(statement, args[:1])
        return self._cur.execute(statement, *args)

    def executemany(self, statement: str, *args: Any) -> sqlite3.Cursor:
        rows = list(args[0]) if args else []
        self._note(statement, rows)
        return self._cur.executemany(statement, rows, *args[1:])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)


class SqliteConnection:
    """The embedded store's file, opened once: ``transaction()`` for writes, ``query()`` for reads.

    ``conn`` (the sqlite3 connection) and ``lock`` are public for the store's parts, which run
    several statements under one lock (``snapshot()``); ``read_only`` opens without writing
    anything (see ``sqlite_open``; ``opened`` then says how)."""

    def __init__(self, path: str | Path, read_only: bool, cache_mb: int, wal_autocheckpoint_pages: int) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.lock = threading.RLock()
        # (world generation, the world rows its commit wrote, None: not known), the last few of this
        # connection's world commits
        self._world_log: list[tuple[int, Touched]] = []
        self.opened: ReadOnlyConnection | None = None
        self.checkpointer: Checkpointer | None = None
        if read_only:
            # No mkdir, no schema script, no pragma that writes: see sqlite_open for how WAL is read.
            self.opened = connect_read_only(self.path)
            self.conn = self.opened.conn
            try:
                row = self.conn.execute(sql.SCHEMA_VERSION_READ).fetchone()
            except sqlite3.OperationalError:  # no schema_info table: nothing was written yet
                row = None
            check_schema_version("embedded", row[0] if row else None)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # 0600 before SQLite opens it: SQLite gives the -wal and -shm files the database's mode
        create_private_file(self.path)
        self.conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False, isolation_level=None)
        for pragma in sql.pragmas(cache_mb, wal_autocheckpoint_pages):
            self.conn.execute(pragma)
        self.checkpointer = Checkpointer(self.path)  # copies the WAL beside the writes (checkpointer.py)
        with self.lock:
            self.conn.executescript(sql.SCHEMA + sql.LIFECYCLE_SCHEMA + sql.IDEMPOTENCY_SCHEMA)
        with self.transaction() as cur:
            row = cur.execute(sql.SCHEMA_VERSION_READ).fetchone()
            if needs_upgrade("embedded", row[0] if row else None):  # raises for a newer worldgraph's file
                cur.execute(sql.SCHEMA_VERSION_WRITE, (str(SCHEMA_VERSION),))

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """One IMMEDIATE transaction: the write lock is taken up front, so no deadlock upgrade.

        A failure anywhere, COMMIT included (a full disk fails there), rolls back: the call
        raises and nothing of it is stored. SQLite's own errors become StorageError."""
        if self.read_only:
            raise ReadOnlyError("writing to the graph store", "the store was opened read-only")
        with self.lock:
            cur = self.conn.cursor()
            parts: set[str] = set()
            touched: list[Touched] = [set()]
            try:
                cur.execute("BEGIN IMMEDIATE")
                yield cast(sqlite3.Cursor, _Tracked(cur, parts, touched))
                gens = {part: cur.execute(sql.BUMP_PROJECTION_GEN, (part, uuid.uuid4().hex)).fetchone()[0]
                        for part in sorted(parts)}
                cur.execute("COMMIT")
                if self.checkpointer is not None:
                    self.checkpointer.kick()
                if "world" in gens:
                    self._world_log.append((gens["world"], touched[0]))
                    del self._world_log[:-WORLD_LOG_KEPT]
            except BaseException as exc:
                if self.conn.in_transaction:  # SQLite may have rolled back itself (SQLITE_FULL)
                    try:
                        cur.execute("ROLLBACK")
                    except sqlite3.Error:  # pragma: no cover - the connection is gone; nothing committed
                        pass
                if isinstance(exc, sqlite3.OperationalError):
                    raise StorageError(f"the graph store {self.path} refused a write ({exc}); "
                                       "the transaction was rolled back, nothing of it is stored") from exc
                raise

    def query(self, statement: str, params: tuple[Any, ...] | list[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read, under the lock."""
        with self.lock:
            return self.conn.execute(statement, params).fetchall()

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """One read transaction (a consistent view of the file) unless one is open already; the
        caller holds ``lock``."""
        in_tx = self.conn.in_transaction
        if not in_tx:
            self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if not in_tx:
                self.conn.execute("COMMIT")

    def version(self) -> Gens:
        """((the episode part's generation, its stamp), (the world part's, its stamp)): how many
        commits of any process wrote the tables of a Cypher projection's part, and a random stamp
        of the last (so a restored or recreated file never matches a projection of another one).
        A read-only open of a file written before the generations were kept gives SQLite's
        data_version (it moves with every commit of another connection)."""
        with self.lock:
            try:
                rows = self.conn.execute(sql.PROJECTION_GENS).fetchall()
            except sqlite3.OperationalError:  # no projection_gens table, and a read-only open adds none
                dv = -int(self.conn.execute(sql.DATA_VERSION).fetchone()[0])
                return ((dv, ""), (dv, ""))
            gens = {part: (int(gen), str(stamp)) for part, gen, stamp in rows}
            return (gens.get("episodes", (0, "")), gens.get("world", (0, "")))

    def world_touched(self, tenant_id: str, since: int, upto: int) -> set[tuple[str, Any]] | None:
        """The world rows ((table, key)) of ``tenant_id`` written by the world commits after
        generation ``since`` up to ``upto``; None when not known: one of them was another
        connection's (or older than the log), or a write not keyed by its parameters."""
        out: set[tuple[str, Any]] = set()
        logged = [(gen, rows) for gen, rows in self._world_log if since < gen <= upto]
        if len(logged) != upto - since:
            return None
        for _gen, rows in logged:
            if rows is None:
                return None
            out |= {(table, key) for t, table, key in rows if t == tenant_id}
        return out

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        with self.lock:
            if self.opened is not None:
                self.opened.close()
            else:
                self.conn.close()
