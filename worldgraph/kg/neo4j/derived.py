"""The Neo4j store's side of ``kg.derived``: inside a forget's transaction, find the live records
that show something of the episodes being forgotten and derive that text again (the turns that
quote them, the canvases they carried, the scenes whose history quotes a round), as the embedded
store does (``kg.embedded.derived``). The statements are in ``lifecycle_queries`` (through ``q``)."""

from __future__ import annotations

from neo4j import ManagedTransaction

from worldgraph.kg import derived
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.rows import chunks
from worldgraph.kg.sessions import by_session
from worldgraph.kg.store import Record

__all__ = ["quoting_turns", "rederive_agent", "rederive_canvases", "rederive_turns", "scenes_without_round"]


def quoting_turns(tx: ManagedTransaction, tenant_id: str, forgotten: dict[str, Record]) -> dict[str, Record]:
    """The live turns whose context quotes one of ``forgotten`` (id -> record), by id; call it
    before the forgotten episodes are deleted. One read per session (and per chunk of ids)."""
    out: dict[str, Record] = {}
    for session, sources in by_session(forgotten.values()).items():
        for chunk in chunks(sources, 400):
            rows = tx.run(q.SESSION_QUOTING, tenant_id=tenant_id, session_id=session, ids=[s["id"] for s in chunk])
            for r in rows:
                turn = loads(r["record"])
                if turn["id"] not in forgotten and any(derived.quotes(turn, s) for s in chunk):
                    out[turn["id"]] = turn
    return out


def rederive_turns(tx: ManagedTransaction, tenant_id: str, turns: dict[str, Record]) -> list[str]:
    """Give each of ``turns`` the context of the episode now before it in its session (call it
    after the forgotten episodes left the NEXT chain); returns their ids, now pending indexing."""
    for turn in turns.values():
        row = tx.run(q.SESSION_PREVIOUS, tenant_id=tenant_id, id=turn["id"]).single()
        record = derived.rederive_turn(turn, loads(row["record"]) if row is not None else None)
        for key in ("index_status", "index_error"):  # kept as properties, not in the record
            record.pop(key, None)
        tx.run(q.REWRITE_EPISODE, tenant_id=tenant_id, id=turn["id"], record=dumps(record)).consume()
    return list(turns)


def rederive_agent(tx: ManagedTransaction, tenant_id: str, forgotten: Record) -> bool:
    """After an episode of an agent is deleted: the agent record's role derived again
    (``kg.derived.agent_of``) when the agent has other episodes; True if it was rewritten."""
    row = tx.run(q.AGENT_AND_NEWEST, tenant_id=tenant_id, agent=forgotten["agent_id"]).single()
    if row is None or row["newest"] is None:
        return False
    current = loads(row["record"]) if row["record"] else {"agent_role": row["role"]}
    record = derived.agent_of(tenant_id, current, forgotten, loads(row["newest"]))
    if record is None:
        return False
    tx.run(q.SET_AGENT, tenant_id=tenant_id, agent=forgotten["agent_id"], role=record["agent_role"],
           record=dumps(record)).consume()
    return True


def rederive_canvases(tx: ManagedTransaction, tenant_id: str, canvas_ids: set[str]) -> tuple[int, int]:
    """Derive each canvas record again from the live episodes on it (``kg.derived.canvas_of``),
    after the forgotten ones are deleted; returns (records rewritten, records deleted)."""
    rewritten = deleted = 0
    for cid in sorted(canvas_ids):
        got = tx.run(q.GET_CANVAS, tenant_id=tenant_id, id=cid).single()
        current = loads(got["record"]) if got is not None and got["record"] is not None else None
        live = [loads(r["record"]) for r in tx.run(q.CANVAS_EPISODES, tenant_id=tenant_id, canvas_id=cid)]
        record = derived.canvas_of(tenant_id, cid, current, live)
        if record is None:
            if got is not None:
                tx.run(q.DELETE_CANVAS, tenant_id=tenant_id, id=cid).consume()
                deleted += 1
        elif record is not current:
            tx.run(q.SET_CANVAS, tenant_id=tenant_id, id=cid, name=record["name"], record=dumps(record)).consume()
            rewritten += 1
    return rewritten, deleted


def scenes_without_round(tx: ManagedTransaction, tenant_id: str, episode_id: str) -> int:
    """Take a forgotten round's line out of the history excerpt of every scene that quotes it;
    returns how many scenes were rewritten."""
    changed = 0
    for r in list(tx.run(q.SCENES_NAMING, tenant_id=tenant_id, id=episode_id)):
        scene = derived.scene_without_round(loads(r["record"]), episode_id)
        if scene is not None:
            tx.run(q.SET_SCENE_RECORD, tenant_id=tenant_id, id=scene["id"], record=dumps(scene)).consume()
            changed += 1
    return changed
