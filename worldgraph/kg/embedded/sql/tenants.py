"""What spans a tenant's tables: the tenants, counting and deleting a tenant's rows (forget_tenant),
its API keys, and the audit of forgets (forget_log)."""

from __future__ import annotations

from worldgraph.kg.embedded.sql.params import placeholders

# ==================================================================== every table of a tenant
TENANTS = ("SELECT tenant_id FROM episodes UNION SELECT tenant_id FROM scenes UNION SELECT tenant_id FROM env_meta "
           "ORDER BY 1")
# every table that holds a tenant's records (forget_tenant deletes from each)
TENANT_TABLES = ("episodes", "agents", "feedback", "canvases", "canvas_audits", "world_nodes", "world_edges",
                 "world_rules", "scene_links", "scenes", "scene_reports", "session_links", "env_meta", "api_keys",
                 "idempotency", "index_appends")


def count_of_tenant(table: str) -> str:
    return f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ?"


def delete_of_tenant(table: str) -> str:
    return f"DELETE FROM {table} WHERE tenant_id = ?"

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

# ==================================================================== purge_gens
# the total first (one row, tenant ''): unchanged, nothing was purged since it was last read
PURGE_GEN_TOTAL = "SELECT gen FROM purge_gens WHERE tenant_id = ''"
PURGE_GENS = "SELECT tenant_id, gen FROM purge_gens WHERE tenant_id != ''"
BUMP_PURGE_GEN = ("INSERT INTO purge_gens(tenant_id, gen) VALUES (?, 1) "
                  "ON CONFLICT(tenant_id) DO UPDATE SET gen = gen + 1")
