"""The statements of the episode part: episodes, agents, session_links, feedback, canvases and
canvas_audits."""

from __future__ import annotations

from typing import Any

from worldgraph.kg.embedded.sql.params import placeholders
from worldgraph.kg.lifecycle import EpisodeFilter

# ==================================================================== episodes
INSERT_EPISODE = "INSERT INTO episodes(tenant_id, id, agent_id, ts, index_status, data) VALUES (?,?,?,?,?,?)"
EPISODE_EXISTS = "SELECT 1 FROM episodes WHERE tenant_id = ? AND id = ?"
EPISODE_AGENT = "SELECT agent_id FROM episodes WHERE tenant_id = ? AND id = ?"
DELETE_EPISODE = "DELETE FROM episodes WHERE tenant_id = ? AND id = ?"
EPISODE_DATA = "SELECT data FROM episodes WHERE tenant_id = ? AND id = ?"
# a record whose derived text was derived again (kg.derived): its index row is written again
REWRITE_EPISODE = ("UPDATE episodes SET data = ?, index_status = 'pending', index_error = NULL "
                   "WHERE tenant_id = ? AND id = ?")
# the episodes one forget takes: an agent's, a session's (id, record), oldest first
AGENT_EPISODE_ROWS = "SELECT id, data FROM episodes WHERE tenant_id = ? AND agent_id = ? ORDER BY ts, id"
SESSION_EPISODE_ROWS = ("SELECT e.id, e.data FROM session_links s CROSS JOIN episodes e ON e.tenant_id = s.tenant_id "
                        "AND e.id = s.episode_id WHERE s.tenant_id = ? AND s.session_id = ? ORDER BY s.ts, s.seq")


def session_quoting(n: int) -> str:
    """The turns of a session whose context may quote one of n episodes: they name it, or (recorded
    before context_from) hold its quote; kg.derived.quotes decides. One pass over the session.
    Parameters: tenant, session, the n ids, the n quotes."""
    marks = placeholders(n)
    return ("SELECT e.data FROM session_links s CROSS JOIN episodes e ON e.tenant_id = s.tenant_id "
            "AND e.id = s.episode_id WHERE s.tenant_id = ? AND s.session_id = ? "
            f"AND (json_extract(e.data, '$.context_from') IN ({marks}) "
            f"OR json_extract(e.data, '$.input_summary') IN ({marks}))")


# the live episodes on a canvas, newest first (the partial index episodes_canvas)
CANVAS_EPISODES = ("SELECT data FROM episodes WHERE tenant_id = ? AND json_extract(data, '$.canvas_id') = ? "
                   "ORDER BY ts DESC, id DESC")
AGENT_HAS_EPISODE = "SELECT 1 FROM episodes WHERE tenant_id = ? AND agent_id = ? LIMIT 1"
# a range on the (tenant_id, id) primary key; ids are ASCII, so prefix + U+FFFF bounds them
EPISODE_IDS_WITH_PREFIX = "SELECT id FROM episodes WHERE tenant_id = ? AND id >= ? AND id < ? ORDER BY id LIMIT ?"
# An episode row as the store returns it: the record, then its live index status and error
# (kept in columns: marking a batch indexed rewrites no JSON).
AGENT_EPISODES = ("SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ? AND agent_id = ? "
                  "ORDER BY ts DESC, id DESC LIMIT ?")
# keyset pages in (tenant_id, id) order; the last two columns are the next page's cursor
ITER_EPISODES = ("SELECT data, index_status, index_error, tenant_id, id FROM episodes "
                 "WHERE (tenant_id, id) > (?, ?) ORDER BY tenant_id, id LIMIT ?")
ITER_TENANT_EPISODES = ("SELECT data, index_status, index_error, tenant_id, id FROM episodes "
                        "WHERE tenant_id = ? AND id > ? ORDER BY id LIMIT ?")
# A tenant's episodes, and those the store marks as held by the index (stats: `indexed` without
# opening the index), in one statement (one snapshot). The indexed are the rest once the few still
# to index are counted on their partial index, episodes_unindexed: counting `index_status =
# 'indexed'` itself reads every row of the table (minutes at 10M). ``+tenant_id`` keeps the planner
# off episodes_time, whose tenant prefix it would otherwise prefer, with a table lookup per entry.
COUNT_EPISODES_INDEXED = ("SELECT (SELECT COUNT(*) FROM episodes WHERE tenant_id = ?1), "
                          "(SELECT COUNT(*) FROM episodes WHERE index_status != 'indexed' AND +tenant_id = ?1)")
UNINDEXED_EPISODES = ("SELECT data, index_status, index_error FROM episodes WHERE index_status != 'indexed' "
                      "ORDER BY ts, id LIMIT ?")
# the append journal (schema.py, index_appends): the last rowid before and after a batch, its entry, the
# entries and their episodes, an entry's episodes marked pending (those still "indexed"), deletes
MAX_EPISODE_ROWID = "SELECT max(rowid) FROM episodes"
INSERT_APPEND = "INSERT INTO index_appends(tenant_id, first_rowid, last_rowid) VALUES (?, ?, ?) RETURNING id"
APPENDS = "SELECT id, tenant_id, first_rowid, last_rowid FROM index_appends ORDER BY id"
ANY_APPEND = "SELECT 1 FROM index_appends LIMIT 1"
APPEND_EPISODE_IDS = "SELECT id FROM episodes WHERE tenant_id = ? AND rowid BETWEEN ? AND ?"
DELETE_APPEND = "DELETE FROM index_appends WHERE id = ?"
MARK_ALL_PENDING = "UPDATE episodes SET index_status = 'pending', index_error = NULL WHERE index_status != 'pending'"
MARK_TENANT_PENDING = ("UPDATE episodes SET index_status = 'pending', index_error = NULL "
                       "WHERE tenant_id = ? AND index_status != 'pending'")


def episodes_by_id(n: int) -> str:
    return (f"SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ? "
            f"AND id IN ({placeholders(n)})")


def reopen_appended(n: int) -> str:
    return (f"UPDATE episodes SET index_status = 'pending', index_error = NULL WHERE tenant_id = ? "
            f"AND index_status = 'indexed' AND id IN ({placeholders(n)})")


def set_index_status(n: int) -> str:
    return (f"UPDATE episodes SET index_status = ?, index_error = ? WHERE tenant_id = ? "
            f"AND id IN ({placeholders(n)})")


_EPISODE_COLS = "e.data, e.index_status, e.index_error, e.ts, e.id"


def list_episodes(tenant_id: str, flt: EpisodeFilter, limit: int,
                  after: tuple[float, str] | None) -> tuple[str, list[Any]]:
    """The statement and parameters of one page of ``list_episodes``: newest first in (ts, id)
    order, strictly after ``after`` in that order (a keyset seek)."""
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
    return sql, params


# ==================================================================== agents
UPSERT_AGENT = ("INSERT INTO agents(tenant_id, id, data) VALUES (?,?,?) "
                "ON CONFLICT(tenant_id, id) DO UPDATE SET data = excluded.data")
AGENT_IDS = "SELECT id FROM agents WHERE tenant_id = ? ORDER BY id LIMIT ?"
DELETE_AGENT = "DELETE FROM agents WHERE tenant_id = ? AND id = ?"
AGENT_DATA = "SELECT data FROM agents WHERE tenant_id = ? AND id = ?"
AGENT_NEWEST_EPISODE = ("SELECT data FROM episodes INDEXED BY episodes_agent WHERE tenant_id = ? AND agent_id = ? "
                        "ORDER BY ts DESC LIMIT 1")
LIST_AGENTS = ("SELECT a.id, a.data, COUNT(e.id), MAX(e.ts) FROM agents a JOIN episodes e "
               "ON e.tenant_id = a.tenant_id AND e.agent_id = a.id WHERE a.tenant_id = ? GROUP BY a.id ORDER BY a.id")

# ==================================================================== session_links
SESSION_LAST_SEQ = "SELECT COALESCE(MAX(seq), -1) FROM session_links WHERE tenant_id = ? AND session_id = ?"
SESSION_LINK_BEFORE = ("SELECT ts, seq, episode_id FROM session_links WHERE tenant_id = ? AND session_id = ? "
                       "AND (ts, seq) < (?, ?) ORDER BY ts DESC, seq DESC LIMIT 1")
SESSION_LINKS_AFTER = ("SELECT ts, seq, episode_id FROM session_links WHERE tenant_id = ? AND session_id = ? "
                       "AND (ts, seq) > (?, ?) ORDER BY ts, seq")
INSERT_SESSION_LINK = "INSERT INTO session_links(tenant_id, episode_id, session_id, ts, seq) VALUES (?,?,?,?,?)"
SET_SESSION_NEXT = "UPDATE session_links SET next_id = ? WHERE tenant_id = ? AND episode_id = ?"
SESSION_EPISODE_BEFORE = ("SELECT episode_id FROM session_links WHERE tenant_id = ? AND session_id = ? AND ts <= ? "
                          "ORDER BY ts DESC, seq DESC LIMIT 1")
SESSION_EPISODE_IDS = "SELECT episode_id FROM session_links WHERE tenant_id = ? AND session_id = ?"
SESSION_NEXT_OF = "SELECT next_id FROM session_links WHERE tenant_id = ? AND episode_id = ?"
# the previous episode of a forgotten one points past it
SESSION_SKIP = "UPDATE session_links SET next_id = ? WHERE tenant_id = ? AND next_id = ?"
SESSION_PREVIOUS = "SELECT episode_id FROM session_links WHERE tenant_id = ? AND next_id = ?"
DELETE_SESSION_LINK = "DELETE FROM session_links WHERE tenant_id = ? AND episode_id = ?"


def session_next(n: int) -> str:
    """(episode, its next episode) of these episodes."""
    return (f"SELECT episode_id, next_id FROM session_links WHERE tenant_id = ? "
            f"AND episode_id IN ({placeholders(n)})")


def session_prev(n: int) -> str:
    """(previous episode, episode) of these episodes."""
    return (f"SELECT episode_id, next_id FROM session_links WHERE tenant_id = ? "
            f"AND next_id IN ({placeholders(n)})")


# ==================================================================== feedback
INSERT_FEEDBACK = ("INSERT INTO feedback(tenant_id, id, episode_id, category, score, created_at, data) "
                   "VALUES (?,?,?,?,?,?,?)")
FEEDBACK_FOR = "SELECT data FROM feedback WHERE tenant_id = ? AND episode_id = ? ORDER BY created_at, id"
DELETE_FEEDBACK_OF_EPISODE = "DELETE FROM feedback WHERE tenant_id = ? AND episode_id = ?"


FEEDBACK_MEANS = "SELECT episode_id, AVG(score) FROM feedback WHERE tenant_id = ? GROUP BY episode_id"
FEEDBACK_MEANS_OF = ("SELECT episode_id, AVG(score) FROM feedback WHERE tenant_id = ? AND category = ? "
                     "GROUP BY episode_id")


def feedback_stats(n: int, by_category: bool) -> str:
    """(episode, mean score, count) of these episodes (the last parameter: the category, if any)."""
    sql = (f"SELECT episode_id, AVG(score), COUNT(*) FROM feedback WHERE tenant_id = ? "
           f"AND episode_id IN ({placeholders(n)})")
    if by_category:
        sql += " AND category = ?"
    return sql + " GROUP BY episode_id"


# ==================================================================== canvases and canvas_audits
UPSERT_CANVAS = ("INSERT INTO canvases(tenant_id, id, data) VALUES (?,?,?) "
                 "ON CONFLICT(tenant_id, id) DO UPDATE SET data = excluded.data")
GET_CANVAS = "SELECT data FROM canvases WHERE tenant_id = ? AND id = ?"
DELETE_CANVAS = "DELETE FROM canvases WHERE tenant_id = ? AND id = ?"
CANVAS_IDS = "SELECT id FROM canvases WHERE tenant_id = ? ORDER BY id"
INSERT_CANVAS_AUDIT = ("INSERT INTO canvas_audits(tenant_id, id, episode_id, canvas_id, timestamp, data) "
                       "VALUES (?,?,?,?,?,?)")
CANVAS_AUDITS = "SELECT data FROM canvas_audits WHERE tenant_id = ? AND episode_id = ? ORDER BY timestamp, id"
DELETE_AUDITS_OF_EPISODE = "DELETE FROM canvas_audits WHERE tenant_id = ? AND episode_id = ?"
