"""The embedded graph store: the system of record when no server is running.

One SQLite file in WAL mode (``<data>/worldgraph.db``). Each public write is one transaction,
so a record that was committed survives ``kill -9`` and a half-written batch is rolled back on
the next open. Several processes may open the same file: SQLite's locking serialises writers
and ``busy_timeout`` makes them wait instead of failing. Records are stored as the same JSON
dicts the Neo4j store holds, with the columns that queries filter on copied out beside them.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from worldgraph.errors import NotFoundError, ReadOnlyError, StorageError
from worldgraph.gcpause import gc_paused
from worldgraph.kg.codec import dumps as _dumps
from worldgraph.kg.codec import loads as _loads
from worldgraph.kg.embedded_leases import SqliteSceneLeases, check_fence
from worldgraph.kg.records import GraphView, MergePlan, MetaRecord, SceneRecord
from worldgraph.kg.sessions import Link, by_session, new_links, relink
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


def _placeholders(n: int) -> str:
    return ",".join("?" * n)


def _chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


class EmbeddedGraphStore(SqliteSceneLeases, GraphStore):
    """SQLite-backed GraphStore; safe across threads (one lock) and processes (SQLite locks)."""

    name = "embedded"

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
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
        self._conn = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # FULL: a transaction that returned is on disk, even if the machine loses power next.
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA busy_timeout=30000")
        self._conn.execute("PRAGMA foreign_keys=OFF")
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

    # ---------------------------------------------------------------- episodes
    def add_episodes(self, tenant_id: str, episodes: list[Record], canvases: list[Record], audits: list[Record]) -> None:
        with self._tx() as cur:
            cur.executemany(
                "INSERT INTO episodes(tenant_id, id, agent_id, ts, index_status, data) VALUES (?,?,?,?,?,?)",
                [(tenant_id, e["id"], e["agent_id"], e["ts"], e.get("index_status", "pending"), _dumps(e)) for e in episodes],
            )
            agents = {e["agent_id"]: {"id": e["agent_id"], "tenant_id": tenant_id, "agent_role": e.get("agent_role", "")}
                      for e in episodes}
            cur.executemany(
                "INSERT INTO agents(tenant_id, id, data) VALUES (?,?,?) "
                "ON CONFLICT(tenant_id, id) DO UPDATE SET data = excluded.data",
                [(tenant_id, a["id"], _dumps(a)) for a in agents.values()],
            )
            cur.executemany(
                "INSERT INTO canvases(tenant_id, id, data) VALUES (?,?,?) "
                "ON CONFLICT(tenant_id, id) DO UPDATE SET data = excluded.data",
                [(tenant_id, c["id"], _dumps(c)) for c in canvases],
            )
            cur.executemany(
                "INSERT INTO canvas_audits(tenant_id, id, episode_id, canvas_id, timestamp, data) VALUES (?,?,?,?,?,?)",
                [(tenant_id, a["id"], a["episode_id"], a["canvas_id"], a["timestamp"], _dumps(a)) for a in audits],
            )
            for session_id, eps in by_session(episodes).items():
                _link_session(cur, tenant_id, session_id, eps)

    def session_neighbors(self, tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        out: dict[str, tuple[str | None, str | None]] = {}
        for chunk in _chunks(list(dict.fromkeys(episode_ids))):
            ph = _placeholders(len(chunk))
            nxt = dict(self._query(f"SELECT episode_id, next_id FROM session_links WHERE tenant_id = ? "
                                   f"AND episode_id IN ({ph})", [tenant_id, *chunk]))
            prev = {n: e for e, n in self._query(f"SELECT episode_id, next_id FROM session_links WHERE tenant_id = ? "
                                                 f"AND next_id IN ({ph})", [tenant_id, *chunk])}
            out.update((e, (prev.get(e), nxt[e])) for e in chunk if e in nxt)
        return out

    def session_episode_before(self, tenant_id: str, session_id: str, ts: float) -> Record | None:
        rows = self._query("SELECT episode_id FROM session_links WHERE tenant_id = ? AND session_id = ? AND ts <= ? "
                           "ORDER BY ts DESC, seq DESC LIMIT 1", (tenant_id, session_id, ts))
        return self.get_episodes(tenant_id, [rows[0][0]]).get(rows[0][0]) if rows else None

    def get_episodes(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        out: dict[str, Record] = {}
        for chunk in _chunks(list(dict.fromkeys(episode_ids))):
            rows = self._query(
                f"SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ? "
                f"AND id IN ({_placeholders(len(chunk))})",
                [tenant_id, *chunk],
            )
            for row in rows:
                rec = _episode(row)
                out[rec["id"]] = rec
        return out

    def agent_episodes(self, tenant_id: str, agent_id: str, limit: int) -> list[Record]:
        rows = self._query(
            "SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ? AND agent_id = ? "
            "ORDER BY ts DESC, id DESC LIMIT ?",
            (tenant_id, agent_id, limit),
        )
        return [_episode(r) for r in rows]

    def iter_episodes(self, tenant_id: str | None = None, batch_size: int = 1000) -> Iterator[list[Record]]:
        last: tuple[str, str] = ("", "")
        while True:
            if tenant_id is None:
                rows = self._query(
                    "SELECT data, index_status, index_error, tenant_id, id FROM episodes "
                    "WHERE (tenant_id, id) > (?, ?) ORDER BY tenant_id, id LIMIT ?", (*last, batch_size))
            else:
                rows = self._query(
                    "SELECT data, index_status, index_error, tenant_id, id FROM episodes "
                    "WHERE tenant_id = ? AND id > ? ORDER BY id LIMIT ?", (tenant_id, last[1], batch_size))
            if not rows:
                return
            last = (rows[-1][3], rows[-1][4])
            yield [_episode(r) for r in rows]

    def set_index_status(self, tenant_id: str, episode_ids: list[str], status: str, error: str | None = None) -> None:
        # Only the columns change: rewriting each record's JSON would make indexing cost a second insert.
        with self._tx() as cur:
            for chunk in _chunks(list(episode_ids)):
                cur.execute(
                    f"UPDATE episodes SET index_status = ?, index_error = ? WHERE tenant_id = ? "
                    f"AND id IN ({_placeholders(len(chunk))})", [status, error, tenant_id, *chunk])

    def mark_pending(self, tenant_id: str | None = None) -> int:
        with self._tx() as cur:
            if tenant_id is None:
                cur.execute("UPDATE episodes SET index_status = 'pending', index_error = NULL "
                            "WHERE index_status != 'pending'")
            else:
                cur.execute("UPDATE episodes SET index_status = 'pending', index_error = NULL "
                            "WHERE tenant_id = ? AND index_status != 'pending'", (tenant_id,))
            return int(cur.rowcount)

    def unindexed_episodes(self, limit: int = 1000) -> list[Record]:
        rows = self._query(
            "SELECT data, index_status, index_error FROM episodes WHERE index_status != 'indexed' "
            "ORDER BY ts, id LIMIT ?", (limit,)
        )
        return [_episode(r) for r in rows]

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

    # ---------------------------------------------------------------- feedback
    def add_feedback(self, tenant_id: str, feedback: Record) -> None:
        with self._tx() as cur:
            found = cur.execute(
                "SELECT 1 FROM episodes WHERE tenant_id = ? AND id = ?", (tenant_id, feedback["episode_id"])
            ).fetchone()
            if not found:
                raise NotFoundError("episode", feedback["episode_id"], f"tenant {tenant_id!r} holds no such episode")
            cur.execute(
                "INSERT INTO feedback(tenant_id, id, episode_id, category, score, created_at, data) VALUES (?,?,?,?,?,?,?)",
                (tenant_id, feedback["id"], feedback["episode_id"], feedback.get("feedback_category"),
                 feedback["feedback_score"], feedback["created_at"], _dumps(feedback)),
            )

    def feedback_for(self, tenant_id: str, episode_id: str) -> list[Record]:
        rows = self._query(
            "SELECT data FROM feedback WHERE tenant_id = ? AND episode_id = ? ORDER BY created_at, id",
            (tenant_id, episode_id),
        )
        return [_loads(d) for (d,) in rows]

    def feedback_stats(self, tenant_id: str, episode_ids: list[str], category: str | None = None) -> dict[str, tuple[float, int]]:
        out: dict[str, tuple[float, int]] = {}
        for chunk in _chunks(list(dict.fromkeys(episode_ids))):
            sql = (f"SELECT episode_id, AVG(score), COUNT(*) FROM feedback WHERE tenant_id = ? "
                   f"AND episode_id IN ({_placeholders(len(chunk))})")
            params: list[Any] = [tenant_id, *chunk]
            if category is not None:
                sql += " AND category = ?"
                params.append(category)
            for eid, avg, cnt in self._query(sql + " GROUP BY episode_id", params):
                out[eid] = (float(avg), int(cnt))
        return out

    # ---------------------------------------------------------------- canvases
    def get_canvas(self, tenant_id: str, canvas_id: str) -> Record | None:
        rows = self._query("SELECT data FROM canvases WHERE tenant_id = ? AND id = ?", (tenant_id, canvas_id))
        return _loads(rows[0][0]) if rows else None

    def canvas_audits(self, tenant_id: str, episode_id: str) -> list[Record]:
        rows = self._query(
            "SELECT data FROM canvas_audits WHERE tenant_id = ? AND episode_id = ? ORDER BY timestamp, id",
            (tenant_id, episode_id),
        )
        return [_loads(d) for (d,) in rows]

    # ---------------------------------------------------------------- world graph
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        view = GraphView(tenant_id=tenant_id, env_name=env_name)
        ids = list(dict.fromkeys(node_ids))
        for chunk in _chunks(list(dict.fromkeys(names))):
            ids += [r[0] for r in self._query(
                f"SELECT id FROM world_nodes WHERE tenant_id = ? AND env_name = ? "
                f"AND json_extract(data, '$.norm_name') IN ({_placeholders(len(chunk))})",
                [tenant_id, env_name, *chunk])]
        ids = list(dict.fromkeys(ids))
        # One SELECT per indexed column, joined by UNION ALL (a row found twice is kept once):
        # with ``a IN (...) OR b IN (...)`` SQLite used only the (tenant_id, env_name) prefix
        # and checked every row of the environment; this way each arm is an index lookup
        # (primary key, nodes_entity, edges_src, edges_dst; see EXPLAIN QUERY PLAN).
        def either(table: str, col_a: str, col_b: str, chunk: list[str], into: dict[str, Any]) -> None:
            """Rows of ``table`` whose ``col_a`` or ``col_b`` is in ``chunk``, each kept once."""
            ph = _placeholders(len(chunk))
            for rid, d in self._query(
                f"SELECT id, data FROM {table} WHERE tenant_id = ? AND env_name = ? AND {col_a} IN ({ph}) "
                f"UNION ALL SELECT id, data FROM {table} WHERE tenant_id = ? AND env_name = ? AND {col_b} IN ({ph})",
                [tenant_id, env_name, *chunk, tenant_id, env_name, *chunk],
            ):
                if rid not in into:
                    into[rid] = _loads(d)

        for chunk in _chunks(ids):
            # the nodes asked for, and the states of those that are entities (a new state closes them)
            either("world_nodes", "id", "json_extract(data, '$.entity_id')", chunk, view.nodes)
            either("world_edges", "src_id", "dst_id", chunk, view.edges)
            # the current containment chain above them (the merge refuses containment cycles); CROSS
            # JOIN keeps SQLite driving from the chain (else it scans the env's edges, ~60 ms at 6k)
            ph = _placeholders(len(chunk))
            for rid, d in self._query(
                f"WITH RECURSIVE up(id, depth) AS (SELECT id, 0 FROM world_nodes WHERE tenant_id = ? AND env_name = ? "
                f"AND id IN ({ph}) UNION SELECT e.src_id, up.depth + 1 FROM world_edges e JOIN up ON e.dst_id = up.id "
                f"WHERE e.tenant_id = ? AND e.env_name = ? AND json_extract(e.data, '$.relation') = 'containment' "
                f"AND json_extract(e.data, '$.valid_to') IS NULL AND up.depth < 64) "
                f"SELECT e.id, e.data FROM up CROSS JOIN world_edges e ON e.dst_id = up.id WHERE e.tenant_id = ? "
                f"AND e.env_name = ? AND json_extract(e.data, '$.relation') = 'containment' "
                f"AND json_extract(e.data, '$.valid_to') IS NULL",
                [tenant_id, env_name, *chunk, tenant_id, env_name, tenant_id, env_name],
            ):
                if rid not in view.edges:
                    view.edges[rid] = _loads(d)
        for (d,) in self._query(
            "SELECT data FROM world_rules WHERE tenant_id = ? AND env_name = ?", (tenant_id, env_name)
        ):
            rec = _loads(d)
            view.rules[rec["id"]] = rec
        view.meta = self._meta(tenant_id, env_name)
        return view

    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        # BEGIN IMMEDIATE takes the database's write lock first: the view is read, planned and
        # written while no other process or thread can write, so no update is lost.
        with self._tx() as cur:
            check_fence(cur, tenant_id, fence)
            view = self.load_view(tenant_id, env_name, node_ids, names)
            plan = planner(view)
            return view.meta if plan is None else self._apply_plan(cur, plan, view.meta)

    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT data FROM scene_reports WHERE tenant_id = ? AND scene_id = ?", (tenant_id, scene_id))
        return _loads(rows[0][0]) if rows else None

    def _meta(self, tenant_id: str, env_name: str) -> MetaRecord | None:
        rows = self._query("SELECT data FROM env_meta WHERE tenant_id = ? AND env_name = ?", (tenant_id, env_name))
        return _loads(rows[0][0]) if rows else None

    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        with self._tx() as cur:
            return self._apply_plan(cur, plan, self._meta(plan.tenant_id, plan.env_name))  # type: ignore[return-value]

    def _apply_plan(self, cur: sqlite3.Cursor, plan: MergePlan, old_meta: MetaRecord | None) -> MetaRecord | None:
        t, env = plan.tenant_id, plan.env_name
        if plan.scene is not None and plan.report is not None:
            cur.execute("INSERT INTO scene_reports(tenant_id, env_name, scene_id, data) VALUES (?,?,?,?) "
                        "ON CONFLICT(tenant_id, scene_id) DO UPDATE SET data = excluded.data",
                        (t, env, plan.scene["id"], _dumps(plan.report)))
        if plan.meta is None and plan.size() == 0:  # nothing merged: only the scene's status moves
            if plan.scene is not None:
                self._upsert_scene(cur, plan.scene)
            return old_meta
        cur.executemany(
            "INSERT INTO world_nodes(tenant_id, env_name, id, data) VALUES (?,?,?,?) "
            "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data",
            [(t, env, n["id"], _dumps(n)) for n in plan.nodes],
        )
        cur.executemany(
            "INSERT INTO world_edges(tenant_id, env_name, id, src_id, dst_id, data) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data",
            [(t, env, e["id"], e["src_id"], e["dst_id"], _dumps(e)) for e in plan.edges],
        )
        cur.executemany(
            "INSERT INTO world_rules(tenant_id, env_name, id, data) VALUES (?,?,?,?) "
            "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data",
            [(t, env, r["id"], _dumps(r)) for r in plan.rules],
        )
        links = [(t, env, s, kind, rec["id"])
                 for kind, recs in (("node", plan.nodes), ("rule", plan.rules))
                 for rec in recs for s in rec.get("source_scenes", [])]
        cur.executemany("INSERT OR IGNORE INTO scene_links VALUES (?,?,?,?,?)", links)
        if plan.scene is not None:
            self._upsert_scene(cur, plan.scene)
        meta: MetaRecord = dict(plan.meta or {})  # type: ignore[assignment]
        meta.update({"tenant_id": t, "env_name": env})
        meta["counts"] = self._counts(cur, t, env)
        cur.execute(
            "INSERT INTO env_meta(tenant_id, env_name, data) VALUES (?,?,?) "
            "ON CONFLICT(tenant_id, env_name) DO UPDATE SET data = excluded.data",
            (t, env, _dumps(meta)),
        )
        return meta

    @staticmethod
    def _counts(cur: sqlite3.Cursor, tenant_id: str, env_name: str) -> dict[str, int]:
        counts = {}
        for key, table in (("nodes", "world_nodes"), ("edges", "world_edges"), ("rules", "world_rules"), ("scenes", "scenes")):
            counts[key] = cur.execute(
                f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND env_name = ?", (tenant_id, env_name)
            ).fetchone()[0]
        return counts

    @staticmethod
    def _upsert_scene(cur: sqlite3.Cursor, scene: SceneRecord) -> None:
        cur.execute(
            "INSERT INTO scenes(tenant_id, env_name, id, status, created_at, episode_id, data) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT(tenant_id, id) DO UPDATE SET status = excluded.status, data = excluded.data, "
            "episode_id = excluded.episode_id",
            (scene["tenant_id"], scene["env_name"], scene["id"], scene["status"], scene["created_at"],
             scene.get("episode_id"), _dumps(scene)),
        )

    def upsert_scene(self, scene: SceneRecord) -> None:
        with self._tx() as cur:
            self._upsert_scene(cur, scene)

    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        rows = self._query("SELECT data FROM scenes WHERE tenant_id = ? AND id = ?", (tenant_id, scene_id))
        return _loads(rows[0][0]) if rows else None

    def claim_scene(self, tenant_id: str, scene_id: str) -> bool:
        with self._tx() as cur:
            row = cur.execute(
                "SELECT data FROM scenes WHERE tenant_id = ? AND id = ? AND status IN ('pending', 'failed')",
                (tenant_id, scene_id),
            ).fetchone()
            if row is None:
                return False
            scene = _loads(row[0])
            scene["status"] = "running"
            cur.execute("UPDATE scenes SET status = 'running', data = ? WHERE tenant_id = ? AND id = ?",
                        (_dumps(scene), tenant_id, scene_id))
            return True

    def list_scenes(self, tenant_id: str | None = None, env_name: str | None = None,
                    statuses: list[str] | None = None) -> list[SceneRecord]:
        sql, params = "SELECT data FROM scenes WHERE 1=1", []
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params.append(tenant_id)
        if env_name is not None:
            sql += " AND env_name = ?"
            params.append(env_name)
        if statuses:
            sql += f" AND status IN ({_placeholders(len(statuses))})"
            params.extend(statuses)
        return [_loads(d) for (d,) in self._query(sql + " ORDER BY created_at, id", params)]

    def environments(self, tenant_id: str) -> list[str]:
        rows = self._query(
            "SELECT env_name FROM env_meta WHERE tenant_id = ? UNION SELECT env_name FROM scenes WHERE tenant_id = ? "
            "ORDER BY 1", (tenant_id, tenant_id))
        return [r[0] for r in rows]

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        def load(table: str) -> list[Record]:
            rows = self._query(
                f"SELECT data FROM {table} WHERE tenant_id = ? AND env_name = ? ORDER BY id", (tenant_id, env_name)
            )
            with gc_paused():  # the records are acyclic; see gc_paused
                return [_loads(d) for (d,) in rows]

        return {"nodes": load("world_nodes"), "edges": load("world_edges"), "rules": load("world_rules"),
                "scenes": load("scenes"), "meta": self._meta(tenant_id, env_name)}

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        t, env = tenant_id, env_name
        with self._tx() as cur:
            for table in ("world_nodes", "world_edges", "world_rules", "scene_links", "scenes", "scene_reports",
                          "env_meta"):
                cur.execute(f"DELETE FROM {table} WHERE tenant_id = ? AND env_name = ?", (t, env))
            cur.executemany("INSERT INTO world_nodes(tenant_id, env_name, id, data) VALUES (?,?,?,?)",
                            [(t, env, n["id"], _dumps(n)) for n in graph.get("nodes", [])])
            cur.executemany(
                "INSERT INTO world_edges(tenant_id, env_name, id, src_id, dst_id, data) VALUES (?,?,?,?,?,?)",
                [(t, env, e["id"], e["src_id"], e["dst_id"], _dumps(e)) for e in graph.get("edges", [])])
            cur.executemany("INSERT INTO world_rules(tenant_id, env_name, id, data) VALUES (?,?,?,?)",
                            [(t, env, r["id"], _dumps(r)) for r in graph.get("rules", [])])
            for scene in graph.get("scenes", []):
                self._upsert_scene(cur, scene)
            links = [(t, env, s, kind, rec["id"])
                     for kind, key in (("node", "nodes"), ("rule", "rules"))
                     for rec in graph.get(key, []) for s in rec.get("source_scenes", [])]
            cur.executemany("INSERT OR IGNORE INTO scene_links VALUES (?,?,?,?,?)", links)
            if graph.get("meta") is not None:
                cur.execute("INSERT INTO env_meta(tenant_id, env_name, data) VALUES (?,?,?)",
                            (t, env, _dumps(graph["meta"])))

    # ---------------------------------------------------------------- exploration
    def neighborhood(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        out: dict[str, Record] = {}
        episodes = self.get_episodes(tenant_id, episode_ids)
        for eid in episode_ids:
            ep = episodes.get(eid)
            if ep is None:
                continue
            canvas = self.get_canvas(tenant_id, ep["canvas_id"]) if ep.get("canvas_id") else None
            scenes = [_loads(d) for (d,) in self._query(
                "SELECT data FROM scenes WHERE tenant_id = ? AND episode_id = ? ORDER BY created_at, id", (tenant_id, eid))]
            nodes: list[Record] = []
            rules: list[Record] = []
            for scene in scenes:
                for kind, rid in self._query(
                    "SELECT kind, record_id FROM scene_links WHERE tenant_id = ? AND scene_id = ? ORDER BY kind, record_id",
                    (tenant_id, scene["id"]),
                ):
                    table, bucket = ("world_nodes", nodes) if kind == "node" else ("world_rules", rules)
                    rows = self._query(f"SELECT data FROM {table} WHERE tenant_id = ? AND env_name = ? AND id = ?",
                                       (tenant_id, scene["env_name"], rid))
                    bucket.extend(_loads(d) for (d,) in rows)
            out[eid] = {"canvas": canvas, "canvas_actions": self.canvas_audits(tenant_id, eid),
                        "feedback": self.feedback_for(tenant_id, eid), "scenes": scenes,
                        "nodes": _unique_by_id(nodes), "rules": _unique_by_id(rules)}
        return out

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


def _link_session(cur: sqlite3.Cursor, tenant_id: str, session_id: str, episodes: list[Record]) -> None:
    """Link a batch of one session's new episodes into its time order (see kg.sessions)."""
    (last_seq,) = cur.execute("SELECT COALESCE(MAX(seq), -1) FROM session_links WHERE tenant_id = ? AND session_id = ?",
                              (tenant_id, session_id)).fetchone()
    new = new_links(episodes, int(last_seq))
    first = min(new)
    row = cur.execute("SELECT ts, seq, episode_id FROM session_links WHERE tenant_id = ? AND session_id = ? "
                      "AND (ts, seq) < (?, ?) ORDER BY ts DESC, seq DESC LIMIT 1",
                      (tenant_id, session_id, first.ts, first.seq)).fetchone()
    after = [Link(*r) for r in cur.execute(
        "SELECT ts, seq, episode_id FROM session_links WHERE tenant_id = ? AND session_id = ? AND (ts, seq) > (?, ?) "
        "ORDER BY ts, seq", (tenant_id, session_id, first.ts, first.seq))]
    cur.executemany("INSERT INTO session_links(tenant_id, episode_id, session_id, ts, seq) VALUES (?,?,?,?,?)",
                    [(tenant_id, link.id, session_id, link.ts, link.seq) for link in new])
    cur.executemany("UPDATE session_links SET next_id = ? WHERE tenant_id = ? AND episode_id = ?",
                    [(nxt, tenant_id, eid) for eid, nxt in relink(Link(*row) if row else None, after, new)])


def _episode(row: tuple[Any, ...]) -> Record:
    """An episode record with its live index status (kept in columns, see set_index_status)."""
    rec: Record = _loads(row[0])
    rec["index_status"], rec["index_error"] = row[1], row[2]
    return rec


def _unique_by_id(records: list[Record]) -> list[Record]:
    return sorted({r["id"]: r for r in records}.values(), key=lambda r: r["id"])
