"""Every SQL statement of the embedded store, grouped by table, as the Neo4j store keeps its Cypher
in ``kg/neo4j/*queries.py``.

A statement is a constant when its text is fixed, or a small function when its text depends on the
call: the number of ``?`` of an ``IN (...)`` list (``placeholders``; ``chunks`` cuts a list to what
SQLite takes as parameters), the table of a statement shared by several tables (the table names
are the module's own, never input), or the optional filters of a listing. Parameters are always
bound with ``?``: no value is ever formatted into a statement.

Conventions the store relies on:
- ``data`` holds the record as JSON (``kg.codec``); the other columns are copies of the fields
  queries filter on.
- The world upserts write ``INSERT INTO <table>(tenant_id, env_name, id ...`` with no space before
  the parenthesis: ``kg/embedded/connection.py`` reads the written world rows off that text to
  refresh a Cypher projection row by row.

The Cypher projection's loads of SQLite rows are here too (the last section); the LadybugDB
statements that build and refresh the projection are that engine's Cypher, in
``kg/embedded/cypher/projection.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from worldgraph.kg.lifecycle import EpisodeFilter

__all__ = ["placeholders", "chunks"]  # and the statements below, by name


def placeholders(n: int) -> str:
    return ",".join("?" * n)


def chunks(items: list[str], size: int = 500) -> Iterator[list[str]]:
    """``items`` in slices SQLite takes as IN (...) parameters."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


# ==================================================================== schema and connection
SCHEMA = """
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
-- How many commits wrote the tables of a Cypher projection's episode part and its world part
-- (embedded.connection bumps them in the writing transaction): a projection saved on disk names the
-- generations it holds, so any process can tell whether it is still current.
-- ``stamp`` is random per commit: a file restored from a backup, or made anew at the same path,
-- reaches the same counts again with other rows, never the same stamps.
CREATE TABLE IF NOT EXISTS projection_gens (part TEXT PRIMARY KEY, gen INTEGER NOT NULL, stamp TEXT NOT NULL);
"""

# Added for the lifecycle: the listing order's index and the audit of forgets (who forgot which id
# and when, never the content; ``purged_at`` is set once purge() removed the bytes).
LIFECYCLE_SCHEMA = """
CREATE INDEX IF NOT EXISTS episodes_time ON episodes (tenant_id, ts, id);
CREATE TABLE IF NOT EXISTS forget_log (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, kind TEXT NOT NULL, target_id TEXT NOT NULL,
  forgotten_by TEXT, forgotten_at TEXT NOT NULL, purged_at TEXT, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS forget_log_unpurged ON forget_log (purged_at);
"""


def pragmas(cache_mb: int, wal_autocheckpoint_pages: int) -> list[str]:
    """The settings of a writable connection, in order."""
    return [
        "PRAGMA journal_mode=WAL",
        # FULL: a transaction that returned is on disk, even if the machine loses power next.
        "PRAGMA synchronous=FULL",
        "PRAGMA busy_timeout=30000",
        "PRAGMA foreign_keys=OFF",
        # deleted content is overwritten with zeros in the pages (forgetting, see embedded.lifecycle)
        "PRAGMA secure_delete=ON",
        f"PRAGMA cache_size=-{int(cache_mb) * 1024}",
        f"PRAGMA wal_autocheckpoint={int(wal_autocheckpoint_pages)}",
    ]


# a read-only connection (sqlite_open): no statement may write, and a first read shows that the
# files can be read (it needs the -shm)
QUERY_ONLY = "PRAGMA query_only=ON"
READ_PROBE = "SELECT count(*) FROM sqlite_master"
# changes with every commit of another connection to the file
DATA_VERSION = "PRAGMA data_version"
# a projection part's generation: bumped inside each transaction that wrote the part's tables
BUMP_PROJECTION_GEN = ("INSERT INTO projection_gens(part, gen, stamp) VALUES (?, 1, ?) "
                       "ON CONFLICT(part) DO UPDATE SET gen = gen + 1, stamp = excluded.stamp RETURNING gen")
PROJECTION_GENS = "SELECT part, gen, stamp FROM projection_gens"
# copies the WAL into the database and empties the WAL file: (busy, log pages, checkpointed pages)
CHECKPOINT_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"

# ==================================================================== schema_info
SCHEMA_VERSION_READ = "SELECT value FROM schema_info WHERE key = 'schema_version'"
SCHEMA_VERSION_WRITE = "INSERT OR REPLACE INTO schema_info(key, value) VALUES ('schema_version', ?)"

# ==================================================================== every table of a tenant
TENANTS = ("SELECT tenant_id FROM episodes UNION SELECT tenant_id FROM scenes UNION SELECT tenant_id FROM env_meta "
           "ORDER BY 1")
# every table that holds a tenant's records (forget_tenant deletes from each)
TENANT_TABLES = ("episodes", "agents", "feedback", "canvases", "canvas_audits", "world_nodes", "world_edges",
                 "world_rules", "scene_links", "scenes", "scene_reports", "session_links", "env_meta", "api_keys")


def count_of_tenant(table: str) -> str:
    return f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ?"


def delete_of_tenant(table: str) -> str:
    return f"DELETE FROM {table} WHERE tenant_id = ?"


# ==================================================================== episodes
INSERT_EPISODE = "INSERT INTO episodes(tenant_id, id, agent_id, ts, index_status, data) VALUES (?,?,?,?,?,?)"
EPISODE_EXISTS = "SELECT 1 FROM episodes WHERE tenant_id = ? AND id = ?"
EPISODE_AGENT = "SELECT agent_id FROM episodes WHERE tenant_id = ? AND id = ?"
DELETE_EPISODE = "DELETE FROM episodes WHERE tenant_id = ? AND id = ?"
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
UNINDEXED_EPISODES = ("SELECT data, index_status, index_error FROM episodes WHERE index_status != 'indexed' "
                      "ORDER BY ts, id LIMIT ?")
MARK_ALL_PENDING = "UPDATE episodes SET index_status = 'pending', index_error = NULL WHERE index_status != 'pending'"
MARK_TENANT_PENDING = ("UPDATE episodes SET index_status = 'pending', index_error = NULL "
                       "WHERE tenant_id = ? AND index_status != 'pending'")


def episodes_by_id(n: int) -> str:
    return (f"SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ? "
            f"AND id IN ({placeholders(n)})")


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
SESSION_NEXT_OF = "SELECT next_id FROM session_links WHERE tenant_id = ? AND episode_id = ?"
# the previous episode of a forgotten one points past it
SESSION_SKIP = "UPDATE session_links SET next_id = ? WHERE tenant_id = ? AND next_id = ?"
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
INSERT_CANVAS_AUDIT = ("INSERT INTO canvas_audits(tenant_id, id, episode_id, canvas_id, timestamp, data) "
                       "VALUES (?,?,?,?,?,?)")
CANVAS_AUDITS = "SELECT data FROM canvas_audits WHERE tenant_id = ? AND episode_id = ? ORDER BY timestamp, id"
DELETE_AUDITS_OF_EPISODE = "DELETE FROM canvas_audits WHERE tenant_id = ? AND episode_id = ?"

# ==================================================================== world_nodes, world_edges, world_rules
# the tables of an environment's world graph and scenes, and the count key of each in a meta record
ENV_COUNTED = (("nodes", "world_nodes"), ("edges", "world_edges"), ("rules", "world_rules"), ("scenes", "scenes"))
UPSERT_NODE = ("INSERT INTO world_nodes(tenant_id, env_name, id, data) VALUES (?,?,?,?) "
               "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data")
UPSERT_EDGE = ("INSERT INTO world_edges(tenant_id, env_name, id, src_id, dst_id, data) VALUES (?,?,?,?,?,?) "
               "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data")
UPSERT_RULE = ("INSERT INTO world_rules(tenant_id, env_name, id, data) VALUES (?,?,?,?) "
               "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data")
INSERT_NODE = "INSERT INTO world_nodes(tenant_id, env_name, id, data) VALUES (?,?,?,?)"
INSERT_EDGE = "INSERT INTO world_edges(tenant_id, env_name, id, src_id, dst_id, data) VALUES (?,?,?,?,?,?)"
INSERT_RULE = "INSERT INTO world_rules(tenant_id, env_name, id, data) VALUES (?,?,?,?)"
ENV_RULES = "SELECT data FROM world_rules WHERE tenant_id = ? AND env_name = ?"
DELETE_EDGES_OF_SCENE = "DELETE FROM world_edges WHERE tenant_id = ? AND env_name = ? AND (src_id = ? OR dst_id = ?)"
# the edges whose record may name a scene (edges keep their sources only in the record)
EDGES_NAMING = "SELECT id, data FROM world_edges WHERE tenant_id = ? AND env_name = ? AND instr(data, ?) > 0"


def node_ids_by_name(n: int) -> str:
    return (f"SELECT id FROM world_nodes WHERE tenant_id = ? AND env_name = ? "
            f"AND json_extract(data, '$.norm_name') IN ({placeholders(n)})")


def rows_where_either(table: str, col_a: str, col_b: str, n: int) -> str:
    """(id, data) of ``table``'s rows whose ``col_a`` or ``col_b`` is among n values: one SELECT per
    indexed column, joined by UNION ALL (the caller keeps a row found twice once). With
    ``a IN (...) OR b IN (...)`` SQLite used only the (tenant_id, env_name) prefix and checked every
    row of the environment; this way each arm is an index lookup (see EXPLAIN QUERY PLAN).
    Parameters: tenant, env, the values, tenant, env, the values."""
    ph = placeholders(n)
    return (f"SELECT id, data FROM {table} WHERE tenant_id = ? AND env_name = ? AND {col_a} IN ({ph}) "
            f"UNION ALL SELECT id, data FROM {table} WHERE tenant_id = ? AND env_name = ? AND {col_b} IN ({ph})")


def containment_above(n: int) -> str:
    """The current containment edges on the chain above n nodes (their ancestors); CROSS JOIN keeps
    SQLite driving from the chain (else it scans the env's edges, ~60 ms at 6k). Parameters:
    tenant, env, the ids, tenant, env, tenant, env."""
    return (f"WITH RECURSIVE up(id, depth) AS (SELECT id, 0 FROM world_nodes WHERE tenant_id = ? AND env_name = ? "
            f"AND id IN ({placeholders(n)}) UNION SELECT e.src_id, up.depth + 1 FROM world_edges e JOIN up "
            f"ON e.dst_id = up.id "
            f"WHERE e.tenant_id = ? AND e.env_name = ? AND json_extract(e.data, '$.relation') = 'containment' "
            f"AND json_extract(e.data, '$.valid_to') IS NULL AND up.depth < 64) "
            f"SELECT e.id, e.data FROM up CROSS JOIN world_edges e ON e.dst_id = up.id WHERE e.tenant_id = ? "
            f"AND e.env_name = ? AND json_extract(e.data, '$.relation') = 'containment' "
            f"AND json_extract(e.data, '$.valid_to') IS NULL")


def containment_into(n: int) -> str:
    """Every containment edge (closed ones too) into n nodes."""
    return (f"SELECT id, data FROM world_edges WHERE tenant_id = ? AND env_name = ? AND dst_id IN "
            f"({placeholders(n)}) AND json_extract(data, '$.relation') = 'containment'")


def edges_touching(n: int) -> str:
    """(id, data) of the edges from or to n nodes. Parameters: tenant, env, the ids twice."""
    marks = placeholders(n)
    return (f"SELECT id, data FROM world_edges WHERE tenant_id = ? AND env_name = ? AND "
            f"(src_id IN ({marks}) OR dst_id IN ({marks}))")


def record_in_env(table: str) -> str:
    """The record of one node, edge or rule (``table``) by id."""
    return f"SELECT data FROM {table} WHERE tenant_id = ? AND env_name = ? AND id = ?"


def update_record_in_env(table: str) -> str:
    return f"UPDATE {table} SET data = ? WHERE tenant_id = ? AND env_name = ? AND id = ?"


def records_of_env(table: str) -> str:
    """Every record of one environment's ``table``, by id."""
    return f"SELECT data FROM {table} WHERE tenant_id = ? AND env_name = ? ORDER BY id"


def count_in_env(table: str) -> str:
    return f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND env_name = ?"


def delete_in_env(table: str) -> str:
    return f"DELETE FROM {table} WHERE tenant_id = ? AND env_name = ?"


# ==================================================================== scene_links
# which node ("node") or rule ("rule") records name a scene among their source_scenes
INSERT_SCENE_LINK = "INSERT OR IGNORE INTO scene_links VALUES (?,?,?,?,?)"
SCENE_LINKS = "SELECT kind, record_id FROM scene_links WHERE tenant_id = ? AND scene_id = ?"
SCENE_LINKS_SORTED = SCENE_LINKS + " ORDER BY kind, record_id"
DELETE_SCENE_LINKS = "DELETE FROM scene_links WHERE tenant_id = ? AND scene_id = ?"

# ==================================================================== scenes
UPSERT_SCENE = ("INSERT INTO scenes(tenant_id, env_name, id, status, created_at, episode_id, data) VALUES (?,?,?,?,?,?,?) "
                "ON CONFLICT(tenant_id, id) DO UPDATE SET status = excluded.status, data = excluded.data, "
                "episode_id = excluded.episode_id")
GET_SCENE = "SELECT data FROM scenes WHERE tenant_id = ? AND id = ?"
CLAIMABLE_SCENE = "SELECT data FROM scenes WHERE tenant_id = ? AND id = ? AND status IN ('pending', 'failed')"
SET_SCENE_RUNNING = "UPDATE scenes SET status = 'running', data = ? WHERE tenant_id = ? AND id = ?"
SCENES_OF_EPISODE = "SELECT data FROM scenes WHERE tenant_id = ? AND episode_id = ? ORDER BY created_at, id"
SCENE_IDS_OF_EPISODE = "SELECT id, env_name FROM scenes WHERE tenant_id = ? AND episode_id = ?"
DELETE_SCENE = "DELETE FROM scenes WHERE tenant_id = ? AND id = ?"
ENVS_WITH_SCENES = "SELECT DISTINCT env_name FROM scenes WHERE tenant_id = ?"


def list_scenes(tenant: bool, env: bool, statuses: int) -> str:
    """Scenes, oldest first; filtered by tenant, env and any of ``statuses`` statuses when given
    (their parameters in this order)."""
    sql = "SELECT data FROM scenes WHERE 1=1"
    if tenant:
        sql += " AND tenant_id = ?"
    if env:
        sql += " AND env_name = ?"
    if statuses:
        sql += f" AND status IN ({placeholders(statuses)})"
    return sql + " ORDER BY created_at, id"


# ==================================================================== scene_reports
UPSERT_SCENE_REPORT = ("INSERT INTO scene_reports(tenant_id, env_name, scene_id, data) VALUES (?,?,?,?) "
                       "ON CONFLICT(tenant_id, scene_id) DO UPDATE SET data = excluded.data")
GET_SCENE_REPORT = "SELECT data FROM scene_reports WHERE tenant_id = ? AND scene_id = ?"
DELETE_SCENE_REPORT = "DELETE FROM scene_reports WHERE tenant_id = ? AND scene_id = ?"

# ==================================================================== env_meta
GET_META = "SELECT data FROM env_meta WHERE tenant_id = ? AND env_name = ?"
UPSERT_META = ("INSERT INTO env_meta(tenant_id, env_name, data) VALUES (?,?,?) "
               "ON CONFLICT(tenant_id, env_name) DO UPDATE SET data = excluded.data")
INSERT_META = "INSERT INTO env_meta(tenant_id, env_name, data) VALUES (?,?,?)"
UPDATE_META = "UPDATE env_meta SET data = ? WHERE tenant_id = ? AND env_name = ?"
ENV_METAS = "SELECT env_name, data FROM env_meta WHERE tenant_id = ?"
ENVIRONMENTS = ("SELECT env_name FROM env_meta WHERE tenant_id = ? UNION SELECT env_name FROM scenes WHERE tenant_id = ? "
                "ORDER BY 1")
# a meta or a scene of the environment exists: (tenant, env, tenant, env)
ENV_KNOWN = ("SELECT 1 FROM env_meta WHERE tenant_id = ? AND env_name = ? UNION ALL "
             "SELECT 1 FROM scenes WHERE tenant_id = ? AND env_name = ? LIMIT 1")

# ==================================================================== api_keys
INSERT_API_KEY = "INSERT INTO api_keys(id, tenant_id, created_at, data) VALUES (?,?,?,?)"
GET_API_KEY = "SELECT data FROM api_keys WHERE id = ?"
LIST_API_KEYS = "SELECT data FROM api_keys WHERE ? IS NULL OR tenant_id = ? ORDER BY created_at, id"
UPDATE_API_KEY = "UPDATE api_keys SET data = ? WHERE id = ?"

# ==================================================================== forget_log
INSERT_FORGET_AUDIT = ("INSERT INTO forget_log(id, tenant_id, kind, target_id, forgotten_by, forgotten_at, data) "
                       "VALUES (?,?,?,?,?,?,?)")


def forget_log(tenant: bool, unpurged: bool) -> str:
    """Audit rows (data, purged_at), oldest first; of one tenant (its parameter) and only those
    not purged yet, when asked."""
    sql = "SELECT data, purged_at FROM forget_log WHERE 1=1"
    if tenant:
        sql += " AND tenant_id = ?"
    if unpurged:
        sql += " AND purged_at IS NULL"
    return sql + " ORDER BY forgotten_at, id"


def mark_purged(n: int) -> str:
    return f"UPDATE forget_log SET purged_at = ? WHERE id IN ({placeholders(n)})"


# ==================================================================== the Cypher projection's loads
# kg/embedded/cypher/load.py reads a whole tenant into a projection with these, and reads again
# the rows a write touched to refresh it.
PROJECTION_SESSION_LINKS = "SELECT episode_id, seq, next_id FROM session_links WHERE tenant_id = ?"
PROJECTION_EPISODES = "SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ?"
PROJECTION_EPISODE_IDS = "SELECT id FROM episodes WHERE tenant_id = ?"
PROJECTION_EPISODE_STATE = "SELECT id, index_status, index_error FROM episodes WHERE tenant_id = ?"
PROJECTION_EPISODE_DATA = "SELECT id, data FROM episodes WHERE tenant_id = ?"
PROJECTION_SCENE_EPISODES = "SELECT id, episode_id FROM scenes WHERE tenant_id = ? AND episode_id IS NOT NULL"


def projection_episodes_in(n: int) -> str:
    return f"SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ? AND id IN ({placeholders(n)})"


PROJECTION_SESSIONS = "SELECT session_id, MAX(seq) FROM session_links WHERE tenant_id = ? GROUP BY session_id"
PROJECTION_AGENTS = "SELECT data FROM agents WHERE tenant_id = ?"
PROJECTION_CANVASES = "SELECT data FROM canvases WHERE tenant_id = ?"
PROJECTION_CANVAS_AUDITS = "SELECT data FROM canvas_audits WHERE tenant_id = ?"
PROJECTION_FEEDBACK = "SELECT data FROM feedback WHERE tenant_id = ?"
# The world part's rows by table, (tenant): the key columns, then data. One key column (one comma
# in the statement) keys the row by that column, two by the pair (env_name, id).
PROJECTION_WORLD_ROWS = {
    "scene_reports": "SELECT scene_id, data FROM scene_reports WHERE tenant_id = ?",
    "scenes": "SELECT id, data FROM scenes WHERE tenant_id = ?",
    "env_meta": ENV_METAS,
    "world_nodes": "SELECT env_name, id, data FROM world_nodes WHERE tenant_id = ?",
    "world_rules": "SELECT env_name, id, data FROM world_rules WHERE tenant_id = ?",
    "world_edges": "SELECT env_name, id, data FROM world_edges WHERE tenant_id = ?",
}
# One row's data by table, (tenant, *its key as in PROJECTION_WORLD_ROWS).
PROJECTION_WORLD_ROW = {
    "scene_reports": GET_SCENE_REPORT,
    "scenes": GET_SCENE,
    "env_meta": GET_META,
    **{table: record_in_env(table) for table in ("world_nodes", "world_rules", "world_edges")},
}
