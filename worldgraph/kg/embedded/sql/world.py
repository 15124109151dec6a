"""The statements of the world part: world_nodes, world_edges, world_rules, scene_links, scenes,
scene_reports and env_meta."""

from __future__ import annotations

from worldgraph.kg.embedded.sql.params import placeholders

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


def rows_by_id(table: str, n: int) -> str:
    """(id, data) of ``table``'s rows with one of n ids (its primary key). Parameters: tenant,
    env, the ids."""
    return f"SELECT id, data FROM {table} WHERE tenant_id = ? AND env_name = ? AND id IN ({placeholders(n)})"


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
# the scenes whose record may name an episode (a round their history excerpt quotes: kg.derived)
SCENES_NAMING = "SELECT env_name, data FROM scenes WHERE tenant_id = ? AND instr(data, ?) > 0"
UPDATE_SCENE_DATA = "UPDATE scenes SET data = ? WHERE tenant_id = ? AND id = ?"
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
