"""The memory lifecycle of the embedded store: browsing (list episodes by a keyset cursor, agents,
environments) and forgetting (an episode, an environment, a tenant), each forget ONE transaction.

Forgetting deletes rows; the bytes go with ``purge_files``: the connection runs with
``PRAGMA secure_delete=ON`` (SQLite overwrites deleted content with zeros in the database pages),
and ``purge_files`` checkpoints the WAL and truncates it, so no older copy of a page survives in
``worldgraph.db-wal``."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from worldgraph.errors import StorageError
from worldgraph.kg.codec import dumps as _dumps
from worldgraph.kg.codec import loads as _loads
from worldgraph.kg.embedded.sql import SqliteAccess
from worldgraph.kg.embedded.sql import chunks as _chunks
from worldgraph.kg.embedded.sql import placeholders as _placeholders
from worldgraph.kg.lifecycle import EpisodeFilter, iso_of, strip_scene
from worldgraph.kg.store import Record

__all__ = ["SqliteLifecycle", "LIFECYCLE_SCHEMA"]

# Added to the embedded schema: the listing order's index and the audit of forgets (who forgot
# which id and when, never the content; ``purged_at`` is set once purge() removed the bytes).
LIFECYCLE_SCHEMA = """
CREATE INDEX IF NOT EXISTS episodes_time ON episodes (tenant_id, ts, id);
CREATE TABLE IF NOT EXISTS forget_log (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, kind TEXT NOT NULL, target_id TEXT NOT NULL,
  forgotten_by TEXT, forgotten_at TEXT NOT NULL, purged_at TEXT, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS forget_log_unpurged ON forget_log (purged_at);
"""

_EPISODE_COLS = "e.data, e.index_status, e.index_error, e.ts, e.id"


class SqliteLifecycle(SqliteAccess):
    """Mixin of EmbeddedGraphStore: list / forget / purge (see the module docstring)."""

    _conn: sqlite3.Connection

    # ---------------------------------------------------------------- browse
    def list_episodes(self, tenant_id: str, flt: EpisodeFilter, limit: int,
                      after: tuple[float, str] | None) -> list[Record]:
        """Newest first in (ts, id) order, strictly after ``after`` in that order (a keyset seek)."""
        if flt.session_id is not None:
            sql = (f"SELECT {_EPISODE_COLS} FROM session_links s CROSS JOIN episodes e ON e.tenant_id = s.tenant_id "
                   "AND e.id = s.episode_id WHERE s.tenant_id = ? AND s.session_id = ?")
            params: list[Any] = [tenant_id, flt.session_id]
            ts_col, id_col = "s.ts", "s.episode_id"
        else:
            # one agent's: its own index (tenant, agent, ts), not a walk of the tenant's time order
            # skipping every other agent's episodes (the planner, without statistics, picks that)
            hint = " INDEXED BY episodes_agent" if flt.agent_id is not None else ""
            sql = f"SELECT {_EPISODE_COLS} FROM episodes e{hint} WHERE e.tenant_id = ?"
            params = [tenant_id]
            ts_col, id_col = "e.ts", "e.id"
        if flt.agent_id is not None:
            sql += " AND e.agent_id = ?"
            params.append(flt.agent_id)
        if flt.since is not None:
            sql += f" AND {ts_col} >= ?"
            params.append(flt.since)
        if flt.until is not None:
            sql += f" AND {ts_col} < ?"
            params.append(flt.until)
        if after is not None:
            # a range on ts that the index seeks (an OR of the two cases scans from the top), then
            # the tie on the cursor's own timestamp by id
            sql += f" AND {ts_col} <= ? AND ({ts_col} < ? OR {id_col} < ?)"
            params.extend([after[0], after[0], after[1]])
        sql += f" ORDER BY {ts_col} DESC, {id_col} DESC LIMIT ?"
        params.append(int(limit))
        out = []
        for row in self._query(sql, params):
            rec: Record = _loads(row[0])
            rec["index_status"], rec["index_error"] = row[1], row[2]
            out.append(rec)
        return out

    def list_agents(self, tenant_id: str) -> list[Record]:
        rows = self._query(
            "SELECT a.id, a.data, COUNT(e.id), MAX(e.ts) FROM agents a JOIN episodes e "
            "ON e.tenant_id = a.tenant_id AND e.agent_id = a.id WHERE a.tenant_id = ? GROUP BY a.id ORDER BY a.id",
            (tenant_id,))
        return [{"agent_id": aid, "agent_role": _loads(d).get("agent_role", ""), "episodes": int(n),
                 "last_seen": iso_of(ts)} for aid, d, n, ts in rows]

    def environment_metas(self, tenant_id: str) -> dict[str, Record | None]:
        """env name -> its meta record (None for an environment with scenes but no merge yet)."""
        out: dict[str, Record | None] = {r[0]: None for r in self._query(
            "SELECT DISTINCT env_name FROM scenes WHERE tenant_id = ?", (tenant_id,))}
        for env, d in self._query("SELECT env_name, data FROM env_meta WHERE tenant_id = ?", (tenant_id,)):
            out[env] = _loads(d)
        return dict(sorted(out.items()))

    # ---------------------------------------------------------------- forget
    def forget_episode(self, tenant_id: str, episode_id: str, audit: Record) -> Record | None:
        """Delete the episode, its feedback, canvas actions, session place (its neighbours are
        linked to each other) and scene packets, strip those scenes from the sources of the world
        records learned from them, and write ``audit``; one transaction. None if there is no such
        episode (nothing written)."""
        with self._tx() as cur:
            row = cur.execute("SELECT agent_id FROM episodes WHERE tenant_id = ? AND id = ?",
                              (tenant_id, episode_id)).fetchone()
            if row is None:
                return None
            counts = {"episodes": 1}
            cur.execute("DELETE FROM episodes WHERE tenant_id = ? AND id = ?", (tenant_id, episode_id))
            counts["feedback"] = cur.execute("DELETE FROM feedback WHERE tenant_id = ? AND episode_id = ?",
                                             (tenant_id, episode_id)).rowcount
            counts["canvas_audits"] = cur.execute("DELETE FROM canvas_audits WHERE tenant_id = ? AND episode_id = ?",
                                                  (tenant_id, episode_id)).rowcount
            link = cur.execute("SELECT next_id FROM session_links WHERE tenant_id = ? AND episode_id = ?",
                               (tenant_id, episode_id)).fetchone()
            if link is not None:
                cur.execute("UPDATE session_links SET next_id = ? WHERE tenant_id = ? AND next_id = ?",
                            (link[0], tenant_id, episode_id))
                cur.execute("DELETE FROM session_links WHERE tenant_id = ? AND episode_id = ?", (tenant_id, episode_id))
            if cur.execute("SELECT 1 FROM episodes WHERE tenant_id = ? AND agent_id = ? LIMIT 1",
                           (tenant_id, row[0])).fetchone() is None:
                cur.execute("DELETE FROM agents WHERE tenant_id = ? AND id = ?", (tenant_id, row[0]))
            scenes = cur.execute("SELECT id, env_name FROM scenes WHERE tenant_id = ? AND episode_id = ?",
                                 (tenant_id, episode_id)).fetchall()
            counts["scenes"] = len(scenes)
            counts["world_records_updated"] = sum(self._drop_scene(cur, tenant_id, env, sid) for sid, env in scenes)
            for env in {env for _, env in scenes}:
                self._recount(cur, tenant_id, env)
            self._audit(cur, audit)
            return counts

    def _drop_scene(self, cur: sqlite3.Cursor, tenant_id: str, env: str, scene_id: str) -> int:
        """Delete one scene (packet, report, links, the episodic edges that join it) and take it out
        of the source_scenes of every node, rule and edge that names it; returns how many records
        were rewritten."""
        cur.execute("DELETE FROM scenes WHERE tenant_id = ? AND id = ?", (tenant_id, scene_id))
        cur.execute("DELETE FROM scene_reports WHERE tenant_id = ? AND scene_id = ?", (tenant_id, scene_id))
        cur.execute("DELETE FROM world_edges WHERE tenant_id = ? AND env_name = ? AND (src_id = ? OR dst_id = ?)",
                    (tenant_id, env, scene_id, scene_id))
        links = cur.execute("SELECT kind, record_id FROM scene_links WHERE tenant_id = ? AND scene_id = ?",
                            (tenant_id, scene_id)).fetchall()
        cur.execute("DELETE FROM scene_links WHERE tenant_id = ? AND scene_id = ?", (tenant_id, scene_id))
        changed = 0
        for kind, rid in links:
            table = "world_nodes" if kind == "node" else "world_rules"
            got = cur.execute(f"SELECT data FROM {table} WHERE tenant_id = ? AND env_name = ? AND id = ?",
                              (tenant_id, env, rid)).fetchone()
            if got is not None:
                rec = strip_scene(_loads(got[0]), scene_id)
                cur.execute(f"UPDATE {table} SET data = ? WHERE tenant_id = ? AND env_name = ? AND id = ?",
                            (_dumps(rec), tenant_id, env, rid))
                changed += 1
        # edges keep their sources only in the record (no link table): the env's edges naming it
        for eid, d in cur.execute("SELECT id, data FROM world_edges WHERE tenant_id = ? AND env_name = ? "
                                  "AND instr(data, ?) > 0", (tenant_id, env, scene_id)).fetchall():
            rec = _loads(d)
            if scene_id in (rec.get("source_scenes") or []):
                cur.execute("UPDATE world_edges SET data = ? WHERE tenant_id = ? AND env_name = ? AND id = ?",
                            (_dumps(strip_scene(rec, scene_id)), tenant_id, env, eid))
                changed += 1
        return changed

    @staticmethod
    def _recount(cur: sqlite3.Cursor, tenant_id: str, env: str) -> None:
        row = cur.execute("SELECT data FROM env_meta WHERE tenant_id = ? AND env_name = ?", (tenant_id, env)).fetchone()
        if row is None:
            return
        meta = _loads(row[0])
        counts = {}
        for key, table in (("nodes", "world_nodes"), ("edges", "world_edges"), ("rules", "world_rules"),
                           ("scenes", "scenes")):
            counts[key] = cur.execute(f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND env_name = ?",
                                      (tenant_id, env)).fetchone()[0]
        meta["counts"] = counts
        cur.execute("UPDATE env_meta SET data = ? WHERE tenant_id = ? AND env_name = ?", (_dumps(meta), tenant_id, env))

    def forget_environment(self, tenant_id: str, env_name: str, audit: Record) -> Record | None:
        """Delete one environment's world graph, scenes (packets), reports and meta; one
        transaction. The episodes of its rounds stay (forget them one by one). None if the tenant
        has no such environment."""
        with self._tx() as cur:
            known = cur.execute("SELECT 1 FROM env_meta WHERE tenant_id = ? AND env_name = ? UNION ALL "
                                "SELECT 1 FROM scenes WHERE tenant_id = ? AND env_name = ? LIMIT 1",
                                (tenant_id, env_name, tenant_id, env_name)).fetchone()
            if known is None:
                return None
            counts = {}
            for key, table in (("nodes", "world_nodes"), ("edges", "world_edges"), ("rules", "world_rules"),
                               ("scenes", "scenes"), ("scene_reports", "scene_reports"),
                               ("scene_links", "scene_links"), ("meta", "env_meta")):
                counts[key] = cur.execute(f"DELETE FROM {table} WHERE tenant_id = ? AND env_name = ?",
                                          (tenant_id, env_name)).rowcount
            counts.pop("scene_links")
            counts.pop("meta")
            self._audit(cur, audit)
            return counts

    def forget_tenant(self, tenant_id: str, audit: Record) -> Record:
        """Delete every record of the tenant, its API keys included; one transaction."""
        with self._tx() as cur:
            counts = {}
            for table in ("episodes", "agents", "feedback", "canvases", "canvas_audits", "world_nodes", "world_edges",
                          "world_rules", "scene_links", "scenes", "scene_reports", "session_links", "env_meta",
                          "api_keys"):
                counts[table] = cur.execute(f"DELETE FROM {table} WHERE tenant_id = ?", (tenant_id,)).rowcount
            self._audit(cur, audit)
            return {"episodes": counts["episodes"], "feedback": counts["feedback"], "scenes": counts["scenes"],
                    "nodes": counts["world_nodes"], "edges": counts["world_edges"], "rules": counts["world_rules"],
                    "agents": counts["agents"], "canvases": counts["canvases"], "api_keys": counts["api_keys"]}

    @staticmethod
    def _audit(cur: sqlite3.Cursor, audit: Record) -> None:
        cur.execute("INSERT INTO forget_log(id, tenant_id, kind, target_id, forgotten_by, forgotten_at, data) "
                    "VALUES (?,?,?,?,?,?,?)", (audit["id"], audit["tenant_id"], audit["kind"], audit["target_id"],
                                               audit.get("forgotten_by"), audit["forgotten_at"], _dumps(audit)))

    def forget_log(self, tenant_id: str | None = None, unpurged: bool = False) -> list[Record]:
        """Audit rows of forgets (one tenant's, or all), oldest first; ``unpurged``: only those whose
        bytes ``purge()`` has not removed yet."""
        sql, params = "SELECT data, purged_at FROM forget_log WHERE 1=1", []
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params.append(tenant_id)
        if unpurged:
            sql += " AND purged_at IS NULL"
        out = []
        for d, purged in self._query(sql + " ORDER BY forgotten_at, id", params):
            rec = _loads(d)
            rec["purged_at"] = purged
            out.append(rec)
        return out

    def mark_purged(self, audit_ids: list[str], at: str) -> None:
        with self._tx() as cur:
            for chunk in _chunks(list(audit_ids)):
                cur.execute(f"UPDATE forget_log SET purged_at = ? WHERE id IN ({_placeholders(len(chunk))})",
                            [at, *chunk])

    def purge_files(self, timeout: float = 30.0) -> Record:
        """Remove the bytes of deleted rows from the files: deleted content is already zeroed in the
        database pages (secure_delete); a TRUNCATE checkpoint copies the WAL into the database and
        empties the WAL file, which still holds the pages as they were before the delete. Retried
        while another connection's read holds an old snapshot; StorageError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:  # type: ignore[attr-defined]
                busy, _log, _done = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return {"sqlite_checkpoint": "truncated"}
            if time.monotonic() > deadline:
                raise StorageError(f"purge could not empty the WAL of the graph store in {timeout:.0f} s: another "
                                   "process keeps a read open; run `worldgraph purge` again once it is idle")
            time.sleep(0.05)
