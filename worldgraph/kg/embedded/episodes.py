"""The episode half of the embedded store (``EpisodeStore``): episodes, session links, feedback,
canvases, audits and the per-episode neighbourhood, on the tables ``kg/embedded/store.py`` creates."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

from worldgraph.errors import NotFoundError
from worldgraph.kg.codec import dumps as _dumps
from worldgraph.kg.codec import loads as _loads
from worldgraph.kg.embedded.sql import SqliteAccess
from worldgraph.kg.embedded.sql import chunks as _chunks
from worldgraph.kg.embedded.sql import placeholders as _placeholders
from worldgraph.kg.sessions import Link, by_session, new_links, relink
from worldgraph.kg.store import EpisodeStore, Record

__all__ = ["SqliteEpisodes"]


class SqliteEpisodes(SqliteAccess, EpisodeStore):
    """Mixin of EmbeddedGraphStore: every EpisodeStore method."""

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

    def episode_ids_with_prefix(self, tenant_id: str, prefix: str, limit: int = 10) -> list[str]:
        # a range on the (tenant_id, id) primary key; ids are ASCII, so prefix + U+FFFF bounds them
        rows = self._query("SELECT id FROM episodes WHERE tenant_id = ? AND id >= ? AND id < ? ORDER BY id LIMIT ?",
                           (tenant_id, prefix, prefix + "\uffff", int(limit)))
        return [r[0] for r in rows]

    def agent_ids(self, tenant_id: str, limit: int = 20) -> list[str]:
        rows = self._query("SELECT id FROM agents WHERE tenant_id = ? ORDER BY id LIMIT ?", (tenant_id, int(limit)))
        return [r[0] for r in rows]

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

