"""The Cypher projection's loads of SQLite rows (kg/embedded/cypher/load.py and episodes.py): a
whole tenant read into a projection, and the rows a write touched read again to refresh it."""

from __future__ import annotations

from worldgraph.kg.embedded.sql.params import placeholders
from worldgraph.kg.embedded.sql.world import ENV_METAS, GET_META, GET_SCENE, GET_SCENE_REPORT, record_in_env

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
