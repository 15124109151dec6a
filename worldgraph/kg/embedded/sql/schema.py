"""The schema (every table and index) and the statements of the connection itself: its pragmas,
the read-only probe, the data version, the projection generations, the WAL checkpoint, the
schema version."""

from __future__ import annotations

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
-- The append journal: the batches of new episodes stored "indexed" whose index rows may not be
-- appended yet (by rowid range: no content), committed with them and deleted once the rows are
-- in (kg/embedded/episodes.py, "add_appending"); what a killed writer leaves is re-indexed. An
-- entry's id is never reused (AUTOINCREMENT): a writer deletes its own entries by id later.
CREATE TABLE IF NOT EXISTS index_appends (
  id INTEGER PRIMARY KEY AUTOINCREMENT, tenant_id TEXT NOT NULL, first_rowid INTEGER NOT NULL,
  last_rowid INTEGER NOT NULL);
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

# The ``feedback`` row of projection_gens counts the rows written to, changed in or deleted from
# ``feedback`` (recall's feedback means are read again only when it moved, not at every recorded
# episode). Triggers, one per event, so that every process writing the file bumps it, one of an
# older worldgraph too, once a process of this one has opened the file.
FEEDBACK_TRIGGER_EVENTS = ("insert", "update", "delete")
SCHEMA += "".join(
    f"CREATE TRIGGER IF NOT EXISTS feedback_gen_{event} AFTER {event.upper()} ON feedback BEGIN\n"
    "  INSERT INTO projection_gens(part, gen, stamp) VALUES ('feedback', 1, hex(randomblob(16)))\n"
    "  ON CONFLICT(part) DO UPDATE SET gen = gen + 1, stamp = excluded.stamp; END;\n"
    for event in FEEDBACK_TRIGGER_EVENTS)

# Added for the lifecycle: the listing order's index and the audit of forgets (who forgot which id
# and when, never the content; ``purged_at`` is set once purge() removed the bytes).
LIFECYCLE_SCHEMA = """
CREATE INDEX IF NOT EXISTS episodes_time ON episodes (tenant_id, ts, id);
CREATE TABLE IF NOT EXISTS forget_log (
  id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, kind TEXT NOT NULL, target_id TEXT NOT NULL,
  forgotten_by TEXT, forgotten_at TEXT NOT NULL, purged_at TEXT, data TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS forget_log_unpurged ON forget_log (purged_at);
-- Purge generations: a purge bumps the purged tenants' counts (and the total, tenant '') so
-- that every process holding their projections, index handles or caches lets go of them
-- (facade/generations.py).
CREATE TABLE IF NOT EXISTS purge_gens (tenant_id TEXT PRIMARY KEY, gen INTEGER NOT NULL);
-- the episodes on a canvas (a forget derives the canvas record from the live ones: kg.derived);
-- partial: an episode without a canvas costs the index nothing
CREATE INDEX IF NOT EXISTS episodes_canvas ON episodes (tenant_id, json_extract(data, '$.canvas_id'))
  WHERE json_extract(data, '$.canvas_id') IS NOT NULL;
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
# the feedback rows' generation (the triggers above); no row: none written since they exist
FEEDBACK_GEN = "SELECT gen, stamp FROM projection_gens WHERE part = 'feedback'"
# 1 when the file holds every one of those triggers
FEEDBACK_TRIGGERS = (f"SELECT count(*) = {len(FEEDBACK_TRIGGER_EVENTS)} FROM sqlite_master WHERE type = 'trigger' "
                     f"AND name IN ({', '.join(repr(f'feedback_gen_{e}') for e in FEEDBACK_TRIGGER_EVENTS)})")
# copies the WAL into the database and empties the WAL file: (busy, log pages, checkpointed pages)
CHECKPOINT_TRUNCATE = "PRAGMA wal_checkpoint(TRUNCATE)"
# copies what of the WAL it can without waiting for a reader or blocking a writer (embedded.checkpointer)
CHECKPOINT_PASSIVE = "PRAGMA wal_checkpoint(PASSIVE)"

# ==================================================================== schema_info
SCHEMA_VERSION_READ = "SELECT value FROM schema_info WHERE key = 'schema_version'"
SCHEMA_VERSION_WRITE = "INSERT OR REPLACE INTO schema_info(key, value) VALUES ('schema_version', ?)"
# the upgrade that derived again the copies an older worldgraph left of forgotten records (facade/upgrade.py)
DERIVED_TEXT_READ = "SELECT value FROM schema_info WHERE key = 'derived_text'"
DERIVED_TEXT_WRITE = "INSERT OR REPLACE INTO schema_info(key, value) VALUES ('derived_text', '1')"
