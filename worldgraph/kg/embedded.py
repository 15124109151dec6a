"""The embedded graph store: the system of record when no server is running.

One SQLite file in WAL mode (``<data>/worldgraph.db``). Each public write is one transaction,
so a record that was committed survives ``kill -9`` and a half-written batch is rolled back on
the next open. Several processes may open the same file: SQLite's locking serialises writers
and ``busy_timeout`` makes them wait instead of failing. Records are stored as the same JSON
dicts the Neo4j store holds, with the columns that queries filter on copied out beside them.

This module opens the file, holds the schema and the transaction; the two halves of the store
live beside it, one per protocol: ``embedded_episodes`` (EpisodeStore) and ``embedded_world``
(WorldStore), plus ``embedded_leases`` (scene leases).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import NotFoundError, ReadOnlyError, StorageError
from worldgraph.filemodes import create_private_file
from worldgraph.kg.codec import dumps as _dumps
from worldgraph.kg.codec import loads as _loads
from worldgraph.kg.embedded_episodes import SqliteEpisodes
from worldgraph.kg.embedded_leases import SqliteSceneLeases
from worldgraph.kg.embedded_world import SqliteWorld
from worldgraph.kg.sqlite_open import ReadOnlyConnection, connect_read_only
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


class EmbeddedGraphStore(SqliteEpisodes, SqliteWorld, SqliteSceneLeases, GraphStore):
    """SQLite-backed GraphStore; safe across threads (one lock) and processes (SQLite locks)."""

    name = "embedded"

    def __init__(self, path: str | Path, read_only: bool = False, cache_mb: int | None = None,
                 wal_autocheckpoint_pages: int | None = None) -> None:
        """``cache_mb`` and ``wal_autocheckpoint_pages``: see the config fields ``sqlite_*``, whose
        defaults apply when they are None (one place for the numbers)."""
        fields = WorldGraphConfig.model_fields
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
        self._conn.execute(f"PRAGMA cache_size=-{int(cache_mb) * 1024}")
        self._conn.execute(f"PRAGMA wal_autocheckpoint={int(wal_autocheckpoint_pages)}")
        with self._lock:
            self._conn.executescript(_SCHEMA)
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
            try:
                cur.execute("BEGIN IMMEDIATE")
                yield cur
                cur.execute("COMMIT")
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
        with self._lock:
            if self._ro is not None:
                self._ro.close()
            else:
                self._conn.close()
