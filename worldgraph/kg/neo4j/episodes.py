"""The episode part of the Neo4j store (``EpisodeStore``'s methods): episodes, sessions, feedback,
canvases, neighbourhoods, on the shared connection."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from neo4j import ManagedTransaction

from worldgraph.errors import NotFoundError
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection
from worldgraph.kg.neo4j.rows import BATCH, by_id, chunks, dedupe, episode_of_row, run_batched, unwind_row
from worldgraph.kg.sessions import Link, by_session, new_links, relink
from worldgraph.kg.store import EpisodeStore, Record

__all__ = ["Neo4jEpisodes", "tenant_ids"]


class Neo4jEpisodes(EpisodeStore):
    """The episode methods of Neo4jGraphStore, on ``db`` (see the store's module for the
    transaction rules)."""

    def __init__(self, db: Neo4jConnection) -> None:
        self.db = db
        self._sessions_ready = False  # q.SESSION_SCHEMA ensured (on the first session write)

    # ---------------------------------------------------------------- episodes
    def add_episodes(self, tenant_id: str, episodes: list[Record], canvases: list[Record],
                     audits: list[Record]) -> None:
        if not self._sessions_ready and any(e.get("session_id") for e in episodes):
            self._ensure_session_schema()
        agents = {e["agent_id"]: {"id": e["agent_id"], "tenant_id": tenant_id, "agent_role": e.get("agent_role", "")}
                  for e in episodes}
        agent_rows = [{"id": a["id"], "agent_role": a["agent_role"], "record": dumps(a)} for a in agents.values()]
        canvas_rows = [{"id": c["id"], "name": c.get("name"), "record": dumps(c)} for c in dedupe(canvases)]
        episode_rows = [{**unwind_row({k: v for k, v in e.items() if k not in q.EPISODE_STATE}, q.EPISODE_PROPS,
                                index_status=e.get("index_status", "pending"), index_error=e.get("index_error")),
                         "agent": e.get("agent_id"), "canvas": e.get("canvas_id")} for e in dedupe(episodes)]
        audit_rows = [{**unwind_row(a, q.AUDIT_PROPS), "episode": a.get("episode_id")} for a in dedupe(audits)]

        def work(tx: ManagedTransaction) -> None:
            run_batched(tx, q.UPSERT_AGENTS, agent_rows, tenant_id=tenant_id)
            run_batched(tx, q.UPSERT_CANVASES, canvas_rows, tenant_id=tenant_id)
            run_batched(tx, q.UPSERT_EPISODES, episode_rows, tenant_id=tenant_id)
            run_batched(tx, q.UPSERT_AUDITS, audit_rows, tenant_id=tenant_id)
            for session_id, eps in by_session(dedupe(episodes)).items():
                _link_session(tx, tenant_id, session_id, eps)
        self.db.write(work)

    def _ensure_session_schema(self) -> None:
        """The Session key and the episodes' session index (q.SESSION_SCHEMA), once per store
        object; schema commands cannot share the write's transaction, so they run before it."""
        self.db.create_schema(q.SESSION_SCHEMA, q.AWAIT_INDEXES)
        self._sessions_ready = True

    def session_neighbors(self, tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        if not episode_ids:  # recall asks on every neighbourhood; no round trip for nothing
            return {}
        rows = self.db.rows(q.SESSION_NEIGHBORS, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids)))
        return {r["id"]: (r["prev"], r["next"]) for r in rows}

    def session_episode_before(self, tenant_id: str, session_id: str, ts: float) -> Record | None:
        recs = self.db.episodes(q.SESSION_EPISODE_BEFORE, tenant_id=tenant_id, session_id=session_id, ts=float(ts))
        return recs[0] if recs else None

    def get_episodes(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        if not episode_ids:
            return {}
        rows = self.db.rows(q.GET_EPISODES, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids)))
        recs = [_listed_episode(x) for x in rows[0]["episodes"]]
        return {r["id"]: r for r in recs}

    def episode_ids_with_prefix(self, tenant_id: str, prefix: str, limit: int = 10) -> list[str]:
        return [r["id"] for r in self.db.rows(q.EPISODE_IDS_WITH_PREFIX, tenant_id=tenant_id, prefix=prefix,
                                              limit=int(limit))]

    def agent_ids(self, tenant_id: str, limit: int = 20) -> list[str]:
        return [r["id"] for r in self.db.rows(q.AGENT_IDS, tenant_id=tenant_id, limit=int(limit))]

    def agent_episodes(self, tenant_id: str, agent_id: str, limit: int) -> list[Record]:
        return self.db.episodes(q.AGENT_EPISODES, tenant_id=tenant_id, agent_id=agent_id, limit=int(limit))

    def iter_episodes(self, tenant_id: str | None = None, batch_size: int = 1000) -> Iterator[list[Record]]:
        """Pages of episodes in (tenant_id, id) order, one tenant at a time: each page is one seek on
        the (tenant_id, id) index, which also gives the order, so a page costs its size whatever
        the number of episodes (a cross-tenant cursor scanned every episode for every page)."""
        for tenant in [tenant_id] if tenant_id is not None else tenant_ids(self.db):
            after_id = ""
            while True:
                rows = self.db.read(lambda tx, t=tenant, a=after_id: list(
                    tx.run(q.ITER_EPISODES, tenant_id=t, after_id=a, limit=int(batch_size))))
                if rows:
                    yield [episode_of_row(r) for r in rows]
                if len(rows) < batch_size:
                    break
                after_id = rows[-1]["id"]

    def set_index_status(self, tenant_id: str, episode_ids: list[str], status: str, error: str | None = None) -> None:
        # Only the two properties change (see q.EPISODE_STATE): no record is read or rewritten.
        ids = list(dict.fromkeys(episode_ids))

        def work(tx: ManagedTransaction) -> None:
            for chunk in chunks(ids, BATCH):
                tx.run(q.SET_INDEX_STATUS, tenant_id=tenant_id, ids=chunk, status=status, error=error).consume()
        self.db.write(work)

    def unindexed_episodes(self, limit: int = 1000) -> list[Record]:
        return self.db.episodes(q.UNINDEXED_EPISODES, limit=int(limit))

    # ---------------------------------------------------------------- feedback
    def add_feedback(self, tenant_id: str, feedback: Record) -> None:
        props = {"episode_id": feedback["episode_id"], "category": feedback.get("feedback_category"),
                 "score": feedback["feedback_score"], "created_at": feedback["created_at"]}

        def work(tx: ManagedTransaction) -> int:
            row = tx.run(q.ADD_FEEDBACK, tenant_id=tenant_id, episode_id=feedback["episode_id"],
                         id=feedback["id"], props=props, record=dumps(feedback)).single()
            return int(row["written"]) if row else 0
        if not self.db.write(work):
            raise NotFoundError("episode", feedback["episode_id"], f"tenant {tenant_id!r} holds no such episode")

    def feedback_for(self, tenant_id: str, episode_id: str) -> list[Record]:
        return self.db.records(q.FEEDBACK_FOR, tenant_id=tenant_id, episode_id=episode_id)

    def feedback_stats(self, tenant_id: str, episode_ids: list[str],
                       category: str | None = None) -> dict[str, tuple[float, int]]:
        if not episode_ids:
            return {}
        rows = self.db.rows(q.FEEDBACK_STATS, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids)),
                            category=category)
        return {r["episode_id"]: (float(r["mean"]), int(r["n"])) for r in rows}

    def feedback_means(self, tenant_id: str, category: str | None = None) -> dict[str, float]:
        # no cache here (the embedded store keys its cache on SQLite triggers; a server's writes
        # have no such stamp): one aggregate per recall that filters by feedback
        rows = self.db.rows(q.FEEDBACK_MEANS, tenant_id=tenant_id, category=category)
        return {r["episode_id"]: float(r["mean"]) for r in rows}

    def session_episode_ids(self, tenant_id: str, session_id: str) -> list[str]:
        return [r["id"] for r in self.db.rows(q.SESSION_EPISODE_IDS, tenant_id=tenant_id, session_id=session_id)]

    def episodes_with_feedback(self, tenant_id: str, episode_ids: list[str],
                               category: str | None = None) -> tuple[dict[str, Record], dict[str, tuple[float, int]]]:
        episodes: dict[str, Record] = {}
        stats: dict[str, tuple[float, int]] = {}
        if not episode_ids:
            return episodes, stats
        rows = self.db.rows(q.EPISODES_WITH_FEEDBACK, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids)),
                            category=category)
        for x in rows[0]["episodes"]:
            rec = _listed_episode(x)
            episodes[rec["id"]] = rec
            if x[4]:
                stats[rec["id"]] = (float(x[3]), int(x[4]))
        return episodes, stats

    # ---------------------------------------------------------------- canvases
    def get_canvas(self, tenant_id: str, canvas_id: str) -> Record | None:
        recs = self.db.records(q.GET_CANVAS, tenant_id=tenant_id, id=canvas_id)
        return recs[0] if recs else None

    def canvas_audits(self, tenant_id: str, episode_id: str) -> list[Record]:
        return self.db.records(q.CANVAS_AUDITS, tenant_id=tenant_id, episode_id=episode_id)

    # ---------------------------------------------------------------- exploration
    def neighborhood(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        if not episode_ids:
            return {}
        found: dict[str, Record] = {}
        for r in self.db.rows(q.NEIGHBORHOOD, tenant_id=tenant_id, ids=list(dict.fromkeys(episode_ids))):
            found[r["id"]] = {
                "canvas": loads(r["canvas"]) if r["canvas"] is not None else None,
                "canvas_actions": [loads(x) for x in r["canvas_actions"]],
                "feedback": [loads(x) for x in r["feedback"]],
                "scenes": [loads(x) for x in r["scenes"]],
                "nodes": by_id([loads(x) for x in r["nodes"]]),
                "rules": by_id([loads(x) for x in r["rules"]]),
            }
        return {eid: found[eid] for eid in episode_ids if eid in found}


def tenant_ids(db: Neo4jConnection) -> list[str]:
    """Tenants that have at least one episode, scene or environment, sorted."""
    rows = db.read(lambda tx: [r["tenant_id"] for r in tx.run(q.TENANTS)])
    return sorted(t for t in rows if t is not None)


def _listed_episode(x: list[Any]) -> Record:
    """An episode record from [record JSON, index_status, index_error, ...] (q.GET_EPISODES)."""
    rec: Record = loads(x[0])
    rec["index_status"], rec["index_error"] = x[1], x[2]
    return rec


def _link_session(tx: ManagedTransaction, tenant_id: str, session_id: str, episodes: list[Record]) -> None:
    """Link a batch of one session's new episodes (already written in ``tx``) into its time order."""
    row = tx.run(q.SESSION_CLAIM, tenant_id=tenant_id, session_id=session_id, n=len(episodes)).single()
    assert row is not None
    new = new_links(episodes, int(row["last_seq"]))
    first = min(new)
    params = {"tenant_id": tenant_id, "session_id": session_id, "ts": first.ts, "seq": first.seq}
    before = tx.run(q.SESSION_BEFORE, params).single()
    after = [Link(float(r["ts"]), int(r["seq"]), r["id"]) for r in tx.run(q.SESSION_AFTER, params)]
    seqs = {link.id: link.seq for link in new}
    rows = [{"id": eid, "seq": seqs.get(eid), "next": nxt}
            for eid, nxt in relink(Link(float(before["ts"]), int(before["seq"]), before["id"]) if before else None,
                                   after, new)]
    run_batched(tx, q.SESSION_LINK, rows, tenant_id=tenant_id)
