"""The episode part of the embedded store (``EpisodeStore``'s methods): episodes, session links,
feedback, canvases, audits and the per-episode neighbourhood, on the shared connection."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from typing import Any

from worldgraph.errors import NotFoundError
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.connection import SqliteConnection
from worldgraph.kg.embedded.episode_format import pack, unpack
from worldgraph.kg.embedded.sql import chunks
from worldgraph.kg.sessions import Link, by_session, new_links, relink
from worldgraph.kg.store import EpisodeStore, Record

__all__ = ["SqliteEpisodes", "episode_of_row"]

MEANS_HELD = 64  # (tenant, category) pairs whose feedback means are kept between recalls


class SqliteEpisodes(EpisodeStore):
    """Every EpisodeStore method of EmbeddedGraphStore, on ``db``."""

    def __init__(self, db: SqliteConnection) -> None:
        self.db = db
        # feedback_means by (tenant, category): (the feedback rows' generation it was read at, means)
        self._means: dict[tuple[str, str | None], tuple[Any, dict[str, float]]] = {}
        self._means_lock = threading.Lock()
        self._triggers = False  # the feedback generation's triggers seen in the file (sql/schema.py)
        self._appended: list[int] = []  # append journal entries whose rows are written (add_appending)
        self._appends_lock = threading.Lock()

    # ---------------------------------------------------------------- episodes
    def add_episodes(self, tenant_id: str, episodes: list[Record], canvases: list[Record], audits: list[Record]) -> None:
        with self.db.transaction() as cur:
            _insert(cur, tenant_id, episodes, canvases, audits, None)

    def add_appending(self, tenant_id: str, episodes: list[Record], canvases: list[Record],
                      audits: list[Record]) -> int:
        """``add_episodes`` of new episodes stored "indexed", with an entry of the append journal
        (``index_appends``: the batch's rowid range) in the same commit, and the entries of batches
        whose rows were appended since (``appended``) deleted in it: one commit a batch instead of
        a second one that marks it indexed (bench/README.md, "The recording process's batch").
        Returns the entry."""
        with self._appends_lock:
            done, self._appended = self._appended, []
        try:
            with self.db.transaction() as cur:
                if done:
                    cur.executemany(sql.DELETE_APPEND, [(d,) for d in done])
                (before,) = cur.execute(sql.MAX_EPISODE_ROWID).fetchone()
                _insert(cur, tenant_id, episodes, canvases, audits, "indexed")
                (last,) = cur.execute(sql.MAX_EPISODE_ROWID).fetchone()  # its rows: after `before`
                (entry,) = cur.execute(sql.INSERT_APPEND, (tenant_id, (before or 0) + 1, last)).fetchone()
        except BaseException:
            with self._appends_lock:  # not deleted: the next commit deletes them
                self._appended[:0] = done
            raise
        return int(entry)

    def appended(self, entry: int) -> None:
        """The index rows of ``entry``'s batch are written: its entry goes with this connection's
        next append commit (or ``flush_appended``), not in a commit of its own."""
        with self._appends_lock:
            self._appended.append(entry)

    def flush_appended(self) -> None:
        """Delete the entries ``appended`` holds (at close, and before the journal is read)."""
        with self._appends_lock:
            done, self._appended = self._appended, []
        if not done:
            return
        try:
            with self.db.transaction() as cur:
                cur.executemany(sql.DELETE_APPEND, [(d,) for d in done])
        except BaseException:
            with self._appends_lock:
                self._appended[:0] = done
            raise

    def append_entries(self) -> list[tuple[int, str, list[str]]]:
        """The append journal: (entry, tenant, ids of its episodes still stored) of every batch
        whose index rows may not be written (a writer killed between its commit and its append,
        or one appending now); this connection's ``appended`` entries are deleted first."""
        self.flush_appended()
        if not self.db.query(sql.ANY_APPEND):
            return []
        out = []
        for entry, tenant, first, last in self.db.query(sql.APPENDS):
            ids = [r[0] for r in self.db.query(sql.APPEND_EPISODE_IDS, (tenant, first, last))]
            out.append((int(entry), str(tenant), ids))
        return out

    def close_append(self, entry: int, tenant_id: str, pending_ids: list[str]) -> None:
        """Mark ``pending_ids`` (of ``entry``'s batch) "pending" where they are still "indexed",
        and delete the entry, in one commit."""
        with self.db.transaction() as cur:
            for chunk in chunks(list(pending_ids)):
                cur.execute(sql.reopen_appended(len(chunk)), [tenant_id, *chunk])
            cur.execute(sql.DELETE_APPEND, (entry,))

    def session_neighbors(self, tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        out: dict[str, tuple[str | None, str | None]] = {}
        for chunk in chunks(list(dict.fromkeys(episode_ids))):
            nxt = dict(self.db.query(sql.session_next(len(chunk)), [tenant_id, *chunk]))
            prev = {n: e for e, n in self.db.query(sql.session_prev(len(chunk)), [tenant_id, *chunk])}
            out.update((e, (prev.get(e), nxt[e])) for e in chunk if e in nxt)
        return out

    def session_episode_before(self, tenant_id: str, session_id: str, ts: float) -> Record | None:
        rows = self.db.query(sql.SESSION_EPISODE_BEFORE, (tenant_id, session_id, ts))
        return self.get_episodes(tenant_id, [rows[0][0]]).get(rows[0][0]) if rows else None

    def get_episodes(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        out: dict[str, Record] = {}
        for chunk in chunks(list(dict.fromkeys(episode_ids))):
            for row in self.db.query(sql.episodes_by_id(len(chunk)), [tenant_id, *chunk]):
                rec = episode_of_row(row)
                out[rec["id"]] = rec
        return out

    def episode_ids_with_prefix(self, tenant_id: str, prefix: str, limit: int = 10) -> list[str]:
        rows = self.db.query(sql.EPISODE_IDS_WITH_PREFIX, (tenant_id, prefix, prefix + "\uffff", int(limit)))
        return [r[0] for r in rows]

    def agent_ids(self, tenant_id: str, limit: int = 20) -> list[str]:
        return [r[0] for r in self.db.query(sql.AGENT_IDS, (tenant_id, int(limit)))]

    def agent_episodes(self, tenant_id: str, agent_id: str, limit: int) -> list[Record]:
        return [episode_of_row(r) for r in self.db.query(sql.AGENT_EPISODES, (tenant_id, agent_id, limit))]

    def iter_episodes(self, tenant_id: str | None = None, batch_size: int = 1000) -> Iterator[list[Record]]:
        last: tuple[str, str] = ("", "")
        while True:
            if tenant_id is None:
                rows = self.db.query(sql.ITER_EPISODES, (*last, batch_size))
            else:
                rows = self.db.query(sql.ITER_TENANT_EPISODES, (tenant_id, last[1], batch_size))
            if not rows:
                return
            last = (rows[-1][3], rows[-1][4])
            yield [episode_of_row(r) for r in rows]

    def set_index_status(self, tenant_id: str, episode_ids: list[str], status: str, error: str | None = None) -> None:
        # Only the columns change: rewriting each record's JSON would make indexing cost a second insert.
        with self.db.transaction() as cur:
            for chunk in chunks(list(episode_ids)):
                cur.execute(sql.set_index_status(len(chunk)), [status, error, tenant_id, *chunk])

    def mark_pending(self, tenant_id: str | None = None) -> int:
        with self.db.transaction() as cur:
            if tenant_id is None:
                cur.execute(sql.MARK_ALL_PENDING)
            else:
                cur.execute(sql.MARK_TENANT_PENDING, (tenant_id,))
            return int(cur.rowcount)

    def unindexed_episodes(self, limit: int = 1000) -> list[Record]:
        return [episode_of_row(r) for r in self.db.query(sql.UNINDEXED_EPISODES, (limit,))]

    # ---------------------------------------------------------------- feedback
    def add_feedback(self, tenant_id: str, feedback: Record) -> None:
        with self.db.transaction() as cur:
            if not cur.execute(sql.EPISODE_EXISTS, (tenant_id, feedback["episode_id"])).fetchone():
                raise NotFoundError("episode", feedback["episode_id"], f"tenant {tenant_id!r} holds no such episode")
            cur.execute(
                sql.INSERT_FEEDBACK,
                (tenant_id, feedback["id"], feedback["episode_id"], feedback.get("feedback_category"),
                 feedback["feedback_score"], feedback["created_at"], dumps(feedback)),
            )

    def feedback_for(self, tenant_id: str, episode_id: str) -> list[Record]:
        return [loads(d) for (d,) in self.db.query(sql.FEEDBACK_FOR, (tenant_id, episode_id))]

    def feedback_stats(self, tenant_id: str, episode_ids: list[str], category: str | None = None) -> dict[str, tuple[float, int]]:
        out: dict[str, tuple[float, int]] = {}
        for chunk in chunks(list(dict.fromkeys(episode_ids))):
            params: list[Any] = [tenant_id, *chunk]
            if category is not None:
                params.append(category)
            for eid, avg, cnt in self.db.query(sql.feedback_stats(len(chunk), category is not None), params):
                out[eid] = (float(avg), int(cnt))
        return out

    def feedback_means(self, tenant_id: str, category: str | None = None) -> dict[str, float]:
        """Read again only when a commit of any process wrote or deleted feedback rows since (their
        generation, kept by triggers: sql/schema.py), not at every recorded episode; the aggregate
        costs ~60 ms for 10k ratings. The dict returned is shared: callers must not change it."""
        gen = self._feedback_gen()  # read first: a commit landing during the read only makes it newer
        key = (tenant_id, category)
        with self._means_lock:
            held = self._means.get(key)
        if held is not None and held[0] == gen:
            return held[1]
        rows = self.db.query(sql.FEEDBACK_MEANS, (tenant_id,)) if category is None \
            else self.db.query(sql.FEEDBACK_MEANS_OF, (tenant_id, category))
        means = {eid: float(mean) for eid, mean in rows}
        with self._means_lock:
            if len(self._means) >= MEANS_HELD and key not in self._means:
                self._means.clear()
            self._means[key] = (gen, means)
        return means

    def _feedback_gen(self) -> Any:
        """The feedback rows' (generation, stamp), None when none was written since the triggers
        exist. A read-only open of a file without them (no process of this version opened it for
        writing) gives SQLite's data_version instead: it moves with every commit of another
        connection, and a read-only one makes none of its own."""
        if self.db.read_only and not self._triggers:
            if not self.db.query(sql.FEEDBACK_TRIGGERS)[0][0]:
                return ("data_version", self.db.query(sql.DATA_VERSION)[0][0])
            self._triggers = True
        rows = self.db.query(sql.FEEDBACK_GEN)
        return tuple(rows[0]) if rows else None

    def session_episode_ids(self, tenant_id: str, session_id: str) -> list[str]:
        return [r[0] for r in self.db.query(sql.SESSION_EPISODE_IDS, (tenant_id, session_id))]

    # ---------------------------------------------------------------- canvases
    def get_canvas(self, tenant_id: str, canvas_id: str) -> Record | None:
        rows = self.db.query(sql.GET_CANVAS, (tenant_id, canvas_id))
        return loads(rows[0][0]) if rows else None

    def canvas_audits(self, tenant_id: str, episode_id: str) -> list[Record]:
        return [loads(d) for (d,) in self.db.query(sql.CANVAS_AUDITS, (tenant_id, episode_id))]

    # ---------------------------------------------------------------- exploration
    def neighborhood(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        out: dict[str, Record] = {}
        episodes = self.get_episodes(tenant_id, episode_ids)
        for eid in episode_ids:
            ep = episodes.get(eid)
            if ep is None:
                continue
            canvas = self.get_canvas(tenant_id, ep["canvas_id"]) if ep.get("canvas_id") else None
            scenes = [loads(d) for (d,) in self.db.query(sql.SCENES_OF_EPISODE, (tenant_id, eid))]
            nodes: list[Record] = []
            rules: list[Record] = []
            for scene in scenes:
                for kind, rid in self.db.query(sql.SCENE_LINKS_SORTED, (tenant_id, scene["id"])):
                    table, bucket = ("world_nodes", nodes) if kind == "node" else ("world_rules", rules)
                    rows = self.db.query(sql.record_in_env(table), (tenant_id, scene["env_name"], rid))
                    bucket.extend(loads(d) for (d,) in rows)
            out[eid] = {"canvas": canvas, "canvas_actions": self.canvas_audits(tenant_id, eid),
                        "feedback": self.feedback_for(tenant_id, eid), "scenes": scenes,
                        "nodes": _unique_by_id(nodes), "rules": _unique_by_id(rules)}
        return out


def _insert(cur: sqlite3.Cursor, tenant_id: str, episodes: list[Record], canvases: list[Record], audits: list[Record],
            status: str | None) -> None:
    """The writes of ``add_episodes`` (``status``: the episodes' index status, None: as their records say)."""
    cur.executemany(
        sql.INSERT_EPISODE,
        [(tenant_id, e["id"], e["agent_id"], e["ts"], status or e.get("index_status", "pending"), pack(e))
         for e in episodes],
    )
    agents = {e["agent_id"]: {"id": e["agent_id"], "tenant_id": tenant_id, "agent_role": e.get("agent_role", "")}
              for e in episodes}
    cur.executemany(sql.UPSERT_AGENT, [(tenant_id, a["id"], dumps(a)) for a in agents.values()])
    cur.executemany(sql.UPSERT_CANVAS, [(tenant_id, c["id"], dumps(c)) for c in canvases])
    cur.executemany(
        sql.INSERT_CANVAS_AUDIT,
        [(tenant_id, a["id"], a["episode_id"], a["canvas_id"], a["timestamp"], dumps(a)) for a in audits],
    )
    for session_id, eps in by_session(episodes).items():
        _link_session(cur, tenant_id, session_id, eps)


def _link_session(cur: sqlite3.Cursor, tenant_id: str, session_id: str, episodes: list[Record]) -> None:
    """Link a batch of one session's new episodes into its time order (see kg.sessions)."""
    (last_seq,) = cur.execute(sql.SESSION_LAST_SEQ, (tenant_id, session_id)).fetchone()
    new = new_links(episodes, int(last_seq))
    first = min(new)
    row = cur.execute(sql.SESSION_LINK_BEFORE, (tenant_id, session_id, first.ts, first.seq)).fetchone()
    after = [Link(*r) for r in cur.execute(sql.SESSION_LINKS_AFTER, (tenant_id, session_id, first.ts, first.seq))]
    cur.executemany(sql.INSERT_SESSION_LINK, [(tenant_id, link.id, session_id, link.ts, link.seq) for link in new])
    cur.executemany(sql.SET_SESSION_NEXT,
                    [(nxt, tenant_id, eid) for eid, nxt in relink(Link(*row) if row else None, after, new)])


def episode_of_row(row: tuple[Any, ...]) -> Record:
    """An episode record from a row (data, index_status, index_error, ...): the live index status
    is kept in columns (see set_index_status), not in the JSON."""
    rec: Record = unpack(row[0])
    rec["index_status"], rec["index_error"] = row[1], row[2]
    return rec


def _unique_by_id(records: list[Record]) -> list[Record]:
    return sorted({r["id"]: r for r in records}.values(), key=lambda r: r["id"])
