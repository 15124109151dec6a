"""The embedded store's side of ``kg.derived``: inside a forget's transaction, find the live records
that show something of the episodes being forgotten and derive that text again (the turns that
quote them, the canvases they carried, the scenes whose history quotes a round), so that when the
transaction commits no row holds the forgotten words because of a neighbour."""

from __future__ import annotations

import sqlite3

from worldgraph.kg import derived
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.episode_format import pack, unpack
from worldgraph.kg.embedded.sql import chunks
from worldgraph.kg.sessions import by_session
from worldgraph.kg.store import Record

__all__ = ["quoting_turns", "rederive_agent", "rederive_canvases", "rederive_turns", "scenes_without_round"]


def quoting_turns(cur: sqlite3.Cursor, tenant_id: str, forgotten: dict[str, Record]) -> dict[str, Record]:
    """The live turns whose context quotes one of ``forgotten`` (id -> record), by id; call it
    before the forgotten episodes are deleted. One pass per session (and per ``chunks`` of ids)."""
    out: dict[str, Record] = {}
    for session, sources in by_session(forgotten.values()).items():
        for chunk in chunks(sources, 400):
            ids = [s["id"] for s in chunk]
            quotes = [derived.turn_context(s)["input_summary"] for s in chunk]
            rows = cur.execute(sql.session_quoting(len(chunk)), (tenant_id, session, *ids, *quotes)).fetchall()
            for (data,) in rows:
                turn = unpack(data)
                if turn["id"] not in forgotten and any(derived.quotes(turn, s) for s in chunk):
                    out[turn["id"]] = turn
    return out


def rederive_turns(cur: sqlite3.Cursor, tenant_id: str, turns: dict[str, Record]) -> list[str]:
    """Give each of ``turns`` the context of the episode now before it in its session (call it
    after the forgotten episodes left the session links); returns their ids, now pending indexing."""
    for turn in turns.values():
        row = cur.execute(sql.SESSION_PREVIOUS, (tenant_id, turn["id"])).fetchone()
        previous = None
        if row is not None:
            got = cur.execute(sql.EPISODE_DATA, (tenant_id, row[0])).fetchone()
            previous = unpack(got[0]) if got is not None else None
        record = derived.rederive_turn(turn, previous)
        for key in ("index_status", "index_error"):  # kept in their columns, not in the JSON
            record.pop(key, None)
        cur.execute(sql.REWRITE_EPISODE, (pack(record), tenant_id, turn["id"]))
    return list(turns)


def rederive_agent(cur: sqlite3.Cursor, tenant_id: str, forgotten: Record) -> bool:
    """After an episode of an agent with others is deleted: the agent record's role derived again
    (``kg.derived.agent_of``); True if it was rewritten."""
    agent = forgotten["agent_id"]
    got = cur.execute(sql.AGENT_DATA, (tenant_id, agent)).fetchone()
    newest = cur.execute(sql.AGENT_NEWEST_EPISODE, (tenant_id, agent)).fetchone()
    if got is None or newest is None:
        return False
    record = derived.agent_of(tenant_id, loads(got[0]), forgotten, unpack(newest[0]))
    if record is None:
        return False
    cur.execute(sql.UPSERT_AGENT, (tenant_id, agent, dumps(record)))
    return True


def rederive_canvases(cur: sqlite3.Cursor, tenant_id: str, canvas_ids: set[str]) -> tuple[int, int]:
    """Derive each canvas record again from the live episodes on it (``kg.derived.canvas_of``),
    after the forgotten ones are deleted; returns (records rewritten, records deleted)."""
    rewritten = deleted = 0
    for cid in sorted(canvas_ids):
        got = cur.execute(sql.GET_CANVAS, (tenant_id, cid)).fetchone()
        current = loads(got[0]) if got is not None else None
        live = [unpack(d) for (d,) in cur.execute(sql.CANVAS_EPISODES, (tenant_id, cid)).fetchall()]
        record = derived.canvas_of(tenant_id, cid, current, live)
        if record is None:
            if current is not None:
                cur.execute(sql.DELETE_CANVAS, (tenant_id, cid))
                deleted += 1
        elif record is not current:
            cur.execute(sql.UPSERT_CANVAS, (tenant_id, cid, dumps(record)))
            rewritten += 1
    return rewritten, deleted


def scenes_without_round(cur: sqlite3.Cursor, tenant_id: str, episode_id: str) -> int:
    """Take a forgotten round's line out of the history excerpt of every scene that quotes it;
    returns how many scenes were rewritten."""
    changed = 0
    for _env, data in cur.execute(sql.SCENES_NAMING, (tenant_id, episode_id)).fetchall():
        scene = derived.scene_without_round(loads(data), episode_id)
        if scene is not None:
            cur.execute(sql.UPDATE_SCENE_DATA, (dumps(scene), tenant_id, scene["id"]))
            changed += 1
    return changed
