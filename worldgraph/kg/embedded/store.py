"""The embedded graph store: the system of record when no server is running.

One SQLite file in WAL mode (``<data>/worldgraph.db``). Each public write is one transaction,
so a record that was committed survives ``kill -9`` and a half-written batch is rolled back on
the next open. Several processes may open the same file: SQLite's locking serialises writers
and ``busy_timeout`` makes them wait instead of failing. Records are stored as the same JSON
dicts the Neo4j store holds, with the columns that queries filter on copied out beside them.

This module opens the file, holds the schema and the transaction; the two halves of the store
live beside it, one per protocol: ``embedded.episodes`` (EpisodeStore) and ``embedded.world``
(WorldStore), plus ``embedded.leases`` (scene leases).
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import NotFoundError, ReadOnlyError, StorageError
from worldgraph.filemodes import create_private_file
from worldgraph.kg.codec import dumps as _dumps
from worldgraph.kg.codec import loads as _loads
from worldgraph.kg.embedded import cypher as embedded_cypher
from worldgraph.kg.embedded.cypher import ProjectionCache
from worldgraph.kg.embedded.episodes import SqliteEpisodes
from worldgraph.kg.embedded.leases import SqliteSceneLeases
from worldgraph.kg.embedded.lifecycle import LIFECYCLE_SCHEMA, SqliteLifecycle
from worldgraph.kg.embedded.sqlite_open import ReadOnlyConnection, connect_read_only
from worldgraph.kg.embedded.world import SqliteWorld
from worldgraph.kg.store import GraphStore, Record
from worldgraph.schema import SCHEMA_VERSIONS, check_schema_version, needs_upgrade

SCHEMA_VERSION = SCHEMA_VERSIONS["embedded"]  # worldgraph.schema keeps every store's version

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_info (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS episodes (
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, agent_id TEXT NOT NULL, ts REAL NOT NULL,
  index_status TEXT NOT NULL DEFAULT 'pending', index_error TEXT, data TEXT NOT NULL,
  PRIMARY KEY (tenant_id, id));
CREATE INDEX IF NOT EXISTS episodes_agent ON episodes (tenant_id, agent_id, ts);
-- Only the episodes still to index (a partial index): marking a batch indexed removes its
-- entries instead of moving 1,000 entries to random places of a million-entry index.
DROP INDEX IF EXISTS episodes_index_status;
CREATE INDEX IF NOT EXISTS episodes_unindexed ON episodes (ts, id) WHERE index_status != 'indexed';
CREATE TABLE IF NOT EXISTS agents (
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (tenant_id, id));
CREATE TABLE IF NOT EXISTS feedback (
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, episode_id TEXT NOT NULL, category TEXT,
  score REAL NOT NULL, created_at TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (tenant_id, id));
CREATE INDEX IF NOT EXISTS feedback_episode ON feedback (tenant_id, episode_id);
CREATE TABLE IF NOT EXISTS canvases (
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (tenant_id, id));
CREATE TABLE IF NOT EXISTS canvas_audits (
  tenant_id TEXT NOT NULL, id TEXT NOT NULL, episode_id TEXT NOT NULL, canvas_id TEXT NOT NULL,
  timestamp TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (tenant_id, id));
CREATE INDEX IF NOT EXISTS audits_episode ON canvas_audits (tenant_id, episode_id);
CREATE TABLE IF NOT EXISTS world_nodes (
  tenant_id TEXT NOT NULL, env_name TEXT NOT NULL, id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (tenant_id, env_name, id));
CREATE INDEX IF NOT EXISTS nodes_entity ON world_nodes (tenant_id, env_name, json_extract(data, '$.entity_id'));
CREATE TABLE IF NOT EXISTS world_edges (
  tenant_id TEXT NOT NULL, env_name TEXT NOT NULL, id TEXT NOT NULL, src_id TEXT NOT NULL,
  dst_id TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (tenant_id, env_name, id));
CREATE INDEX IF NOT EXISTS edges_src ON world_edges (tenant_id, env_name, src_id);
CREATE INDEX IF NOT EXISTS edges_dst ON world_edges (tenant_id, env_name, dst_id);
CREATE TABLE IF NOT EXISTS world_rules (
  tenant_id TEXT NOT NULL, env_name TEXT NOT NULL, id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (tenant_id, env_name, id));
CREATE TABLE IF NOT EXISTS scene_links (
  tenant_id TEXT NOT NULL, env_name TEXT NOT NULL, scene_id TEXT NOT NULL, kind TEXT NOT NULL,
  record_id TEXT NOT NULL, PRIMARY KEY (tenant_id, scene_id, kind, record_id));
CREATE TABLE IF NOT EXISTS scenes (
  tenant_id TEXT NOT NULL, env_name TEXT NOT NULL, id TEXT NOT NULL, status TEXT NOT NULL,
  created_at TEXT NOT NULL, episode_id TEXT, data TEXT NOT NULL, PRIMARY KEY (tenant_id, id));
CREATE INDEX IF NOT EXISTS scenes_env ON scenes (tenant_id, env_name, created_at);
CREATE INDEX IF NOT EXISTS scenes_status ON scenes (status, created_at);
CREATE INDEX IF NOT EXISTS scenes_episode ON scenes (tenant_id, episode_id);
CREATE TABLE IF NOT EXISTS session_links (
  tenant_id TEXT NOT NULL, episode_id TEXT NOT NULL, session_id TEXT NOT NULL, ts REAL NOT NULL,
  seq INTEGER NOT NULL, next_id TEXT, PRIMARY KEY (tenant_id, episode_id));
CREATE INDEX IF NOT EXISTS session_order ON session_links (tenant_id, session_id, ts, seq);
CREATE INDEX IF NOT EXISTS session_prev ON session_links (tenant_id, next_id);
CREATE INDEX IF NOT EXISTS nodes_name ON world_nodes (tenant_id, env_name, json_extract(data, '$.norm_name'));
CREATE TABLE IF NOT EXISTS scene_reports (
  tenant_id TEXT NOT NULL, env_name TEXT NOT NULL, scene_id TEXT NOT NULL, data TEXT NOT NULL,
  PRIMARY KEY (tenant_id, scene_id));
CREATE TABLE IF NOT EXISTS env_meta (
  tenant_id TEXT NOT NULL, env_name TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (tenant_id, env_name));
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, created_at TEXT NOT NULL, data TEXT NOT NULL);
"""


_WRITE_RE = re.compile(r"\s*(?:INSERT|REPLACE|UPDATE|DELETE)\b", re.I)
_PARTS = {**{t: "episodes" for t in embedded_cypher.EPISODE_SOURCES}, **{t: "world" for t in embedded_cypher.WORLD_SOURCES}}
_NOT_PROJECTED = ("api_keys", "schema_info")
WORLD_LOG_KEPT = 256  # world commits whose written rows are remembered (for a projection's refresh)


# Upserts whose parameters name the world row they write: (table, how many parameters after
# tenant_id make its key in embedded_cypher.WorldRows). scene_links is not read by the projection.
_KEYED_RE = re.compile(r"\s*INSERT INTO (world_nodes|world_edges|world_rules|scenes|scene_reports|env_meta)"
                       r"\(tenant_id, env_name(, (?:id|scene_id))?\b")
_UNREAD = ("scene_links",)


class _Tracked:
    """A transaction's cursor that notes which part of a Cypher projection each write touches (by
    the tables its statement names); a write naming no known table marks both, to be safe. Of the
    world part it also notes the rows written ((tenant, table, key) in ``touched[0]``), or None
    when a write's rows are not known from its parameters."""

    def __init__(self, cur: sqlite3.Cursor, parts: set[str], touched: list[set[tuple[str, str, Any]] | None]) -> None:
        self._cur, self._parts, self._touched = cur, parts, touched

    def _note(self, sql: str, rows: Iterable[Any]) -> None:
        if _WRITE_RE.match(sql):
            found = {part for table, part in _PARTS.items() if re.search(rf"\b{table}\b", sql)}
            if not found and not any(re.search(rf"\b{t}\b", sql) for t in _NOT_PROJECTED):
                found = {"episodes", "world"}
            self._parts |= found
            if "world" in found and self._touched[0] is not None:
                m = _KEYED_RE.match(sql)
                if m is None:
                    if not any(re.search(rf"\b{t}\b", sql) for t in _UNREAD):
                        self._touched[0] = None
                    return
                table, keyed = m.group(1), m.group(2) is not None
                for row in rows:
                    key = (row[1], row[2]) if table.startswith("world_") else row[2] if keyed else row[1]
                    self._touched[0].add((row[0], table, key))

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self._note(sql, args[:1])
        return self._cur.execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        rows = list(args[0]) if args else []
        self._note(sql, rows)
        return self._cur.executemany(sql, rows, *args[1:])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)


class EmbeddedGraphStore(SqliteEpisodes, SqliteWorld, SqliteSceneLeases, SqliteLifecycle, GraphStore):
    """SQLite-backed GraphStore; safe across threads (one lock) and processes (SQLite locks)."""

    name = "embedded"

    def __init__(self, path: str | Path, read_only: bool = False, cache_mb: int | None = None,
                 wal_autocheckpoint_pages: int | None = None, cypher_timeout: float | None = None,
                 cypher_max_rows: int | None = None, cypher_max_result_bytes: int | None = None) -> None:
        """``cache_mb``, ``wal_autocheckpoint_pages``, ``cypher_timeout``, ``cypher_max_rows`` and
        ``cypher_max_result_bytes``: see
        the config fields ``sqlite_*`` and ``cypher_*``, whose defaults apply when they are None (one
        place for the numbers)."""
        fields = WorldGraphConfig.model_fields
        self.cypher_timeout = float(cypher_timeout if cypher_timeout is not None
                                    else fields["cypher_timeout_seconds"].default)
        self.cypher_max_rows = int(cypher_max_rows if cypher_max_rows is not None else fields["cypher_max_rows"].default)
        self.cypher_max_result_bytes = int(cypher_max_result_bytes if cypher_max_result_bytes is not None
                                           else fields["cypher_max_result_bytes"].default)
        self._projections = ProjectionCache()
        # commits through this object that wrote a table of a Cypher projection's episode / world part
        self._write_gens = {"episodes": 0, "world": 0}
        # (world generation, the world rows its commit wrote, None: not known), the last few
        self._world_log: list[tuple[int, set[tuple[str, str, Any]] | None]] = []
        if cache_mb is None:
            cache_mb = int(fields["sqlite_cache_mb"].default)
        if wal_autocheckpoint_pages is None:
            wal_autocheckpoint_pages = int(fields["sqlite_wal_autocheckpoint_pages"].default)
        self.path = Path(path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._ro: ReadOnlyConnection | None = None
        if read_only:
            # No mkdir, no schema script, no pragma that writes: see sqlite_open for how WAL is read.
            self._ro = connect_read_only(self.path)
            self._conn = self._ro.conn
            try:
                row = self._conn.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchone()
            except sqlite3.OperationalError:  # no schema_info table: nothing was written yet
                row = None
            check_schema_version("embedded", row[0] if row else None)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # 0600 before SQLite opens it: SQLite gives the -wal and -shm files the database's mode
        create_private_file(self.path)
        self._conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a transaction that returned is on disk, even if the machine loses power next.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._conn.execute("PRAGMA foreign_keys=OFF")
        # deleted content is overwritten with zeros in the pages (forgetting, see embedded_lifecycle)
        self._conn.execute("PRAGMA secure_delete=ON")
        self._conn.execute(f"PRAGMA cache_size=-{int(cache_mb) * 1024}")
        self._conn.execute(f"PRAGMA wal_autocheckpoint={int(wal_autocheckpoint_pages)}")
        with self._lock:
            self._conn.executescript(_SCHEMA + LIFECYCLE_SCHEMA)
        with self._tx() as cur:
            row = cur.execute("SELECT value FROM schema_info WHERE key = 'schema_version'").fetchone()
            if needs_upgrade("embedded", row[0] if row else None):  # raises for a newer worldgraph's file
                cur.execute("INSERT OR REPLACE INTO schema_info(key, value) VALUES ('schema_version', ?)",
                            (str(SCHEMA_VERSION),))

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        """One IMMEDIATE transaction: the write lock is taken up front, so no deadlock upgrade.

        A failure anywhere, COMMIT included (a full disk fails there), rolls back: the call
        raises and nothing of it is stored. SQLite's own errors become StorageError."""
        if self.read_only:
            raise ReadOnlyError("writing to the graph store", "the store was opened read-only")
        with self._lock:
            cur = self._conn.cursor()
            parts: set[str] = set()
            touched: list[set[tuple[str, str, Any]] | None] = [set()]
            try:
                cur.execute("BEGIN IMMEDIATE")
                yield cast(sqlite3.Cursor, _Tracked(cur, parts, touched))
                cur.execute("COMMIT")
                for part in parts:
                    self._write_gens[part] += 1
                if "world" in parts:
                    self._world_log.append((self._write_gens["world"], touched[0]))
                    del self._world_log[:-WORLD_LOG_KEPT]
            except BaseException as exc:
                if self._conn.in_transaction:  # SQLite may have rolled back itself (SQLITE_FULL)
                    try:
                        cur.execute("ROLLBACK")
                    except sqlite3.Error:  # pragma: no cover - the connection is gone; nothing committed
                        pass
                if isinstance(exc, sqlite3.OperationalError):
                    raise StorageError(f"the graph store {self.path} refused a write ({exc}); "
                                       "the transaction was rolled back, nothing of it is stored") from exc
                raise

    def _query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def tenants(self) -> list[str]:
        rows = self._query(
            "SELECT tenant_id FROM episodes UNION SELECT tenant_id FROM scenes UNION SELECT tenant_id FROM env_meta "
            "ORDER BY 1"
        )
        return [r[0] for r in rows]

    def stats(self, tenant_id: str) -> dict[str, int]:
        tables = {"episodes": "episodes", "agents": "agents", "feedback": "feedback", "canvases": "canvases",
                  "canvas_audits": "canvas_audits", "scenes": "scenes", "nodes": "world_nodes",
                  "edges": "world_edges", "rules": "world_rules"}
        return {k: self._query(f"SELECT COUNT(*) FROM {t} WHERE tenant_id = ?", (tenant_id,))[0][0]
                for k, t in tables.items()}

    # ---------------------------------------------------------------- Cypher
    def cypher(self, tenant_id: str, query: str, params: dict[str, Any] | None = None) -> list[Record]:
        """Read-only Cypher on a projection of the caller's tenant alone (``embedded.cypher``),
        rebuilt first when anything was committed since it was built (here or by another process)."""
        embedded_cypher.check_text(query)
        # what the engine cannot run, or must not (a runaway string or list), is refused before a
        # projection is built for it (run() translates again: a few regex passes)
        embedded_cypher.translate(query)
        embedded_cypher.check_abandoned(tenant_id, self.cypher_timeout)  # before a projection is built for it

        def read(sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            return self._conn.execute(sql, args).fetchall()

        def build() -> embedded_cypher.Projection:
            with self._lock, self._snapshot():
                nodes, rels, episodes, world = embedded_cypher.load_tenant(read, tenant_id)
            proj = embedded_cypher.Projection(tenant_id, nodes, rels, episodes, world)
            proj.world_gen = version[2]
            return proj

        def read_edges(env: str, ids: list[str]) -> list[tuple[str, str]]:
            marks = ",".join("?" * len(ids))
            return read(f"SELECT id, data FROM world_edges WHERE tenant_id = ? AND env_name = ? AND "
                        f"(src_id IN ({marks}) OR dst_id IN ({marks}))", (tenant_id, env, *ids, *ids))

        def refresh_world(proj: embedded_cypher.Projection) -> None:
            # the rows a world write changed (and the links touching them) are reloaded one by one;
            # anything else (scenes, a new environment, a large import) reloads the world part
            with self._lock, self._snapshot():
                touched = self._world_touched(tenant_id, proj.world_gen)
                raw = (embedded_cypher.read_world_rows(read, tenant_id) if touched is None
                       else embedded_cypher.read_world_keys(read, tenant_id, proj.world.raw, touched))
                if proj.update_world(raw, read_edges):
                    proj.world_gen = version[2]
                    return
                world = embedded_cypher.load_world_part(embedded_cypher.read_world_rows(read, tenant_id), tenant_id,
                                                        proj.episodes)
            proj.replace_world(world)
            proj.world_gen = version[2]
        # One deadline for the query, from when its first projection is ready (building one is not
        # bounded by it), retries on a fresh projection included: embedded_cypher.run ends at most
        # GRACE seconds past it.
        deadline: float | None = None
        for _ in range(3):
            with self._lock:
                # data_version changes with every commit of another connection (then all is rebuilt);
                # _write_gens with ours, by part (a world delta reloads only the world part)
                version = (self._conn.execute("PRAGMA data_version").fetchone()[0], self._write_gens["episodes"],
                           self._write_gens["world"])
            proj = self._projections.get(tenant_id, version, build, refresh_world)
            if deadline is None:
                deadline = time.monotonic() + self.cypher_timeout
            try:
                return embedded_cypher.run(proj, tenant_id, query, params, timeout=self.cypher_timeout,
                                           max_rows=self.cypher_max_rows, max_bytes=self.cypher_max_result_bytes,
                                           deadline=deadline)
            except embedded_cypher.ProjectionClosed:  # replaced, or abandoned by a query past its deadline
                continue
        raise StorageError("the Cypher projection kept being replaced by concurrent writes; try the query again")

    def _world_touched(self, tenant_id: str, since: int) -> set[tuple[str, Any]] | None:
        """The world rows ((table, key)) of ``tenant_id`` this store's commits wrote after world
        generation ``since``; None when not known (a write not keyed by its parameters, or older
        than the log)."""
        out: set[tuple[str, Any]] = set()
        gens = [gen for gen, _ in self._world_log if gen > since]
        if len(gens) != self._write_gens["world"] - since:
            return None
        for gen, rows in self._world_log:
            if gen > since:
                if rows is None:
                    return None
                out |= {(table, key) for t, table, key in rows if t == tenant_id}
        return out

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction (a consistent view of the file) unless one is open already."""
        in_tx = self._conn.in_transaction
        if not in_tx:
            self._conn.execute("BEGIN")
        try:
            yield
        finally:
            if not in_tx:
                self._conn.execute("COMMIT")

    # ---------------------------------------------------------------- API keys
    def add_api_key(self, key: Record) -> None:
        with self._tx() as cur:
            cur.execute("INSERT INTO api_keys(id, tenant_id, created_at, data) VALUES (?,?,?,?)",
                        (key["id"], key["tenant_id"], key["created_at"], _dumps(key)))

    def get_api_key(self, key_id: str) -> Record | None:
        rows = self._query("SELECT data FROM api_keys WHERE id = ?", (key_id,))
        return _loads(rows[0][0]) if rows else None

    def list_api_keys(self, tenant_id: str | None = None) -> list[Record]:
        rows = self._query("SELECT data FROM api_keys WHERE ? IS NULL OR tenant_id = ? ORDER BY created_at, id",
                           (tenant_id, tenant_id))
        return [_loads(d) for (d,) in rows]

    def revoke_api_key(self, key_id: str, revoked_at: str) -> Record:
        with self._tx() as cur:
            row = cur.execute("SELECT data FROM api_keys WHERE id = ?", (key_id,)).fetchone()
            if row is None:
                raise NotFoundError("api key", key_id, "`worldgraph keys list` shows the key ids")
            key: Record = _loads(row[0])
            if key.get("revoked_at") is None:
                key["revoked_at"] = revoked_at
                cur.execute("UPDATE api_keys SET data = ? WHERE id = ?", (_dumps(key), key_id))
        return key

    def close(self) -> None:
        self._projections.close()
        with self._lock:
            if self._ro is not None:
                self._ro.close()
            else:
                self._conn.close()
