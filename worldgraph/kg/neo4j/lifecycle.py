"""The memory lifecycle of the Neo4j store: browsing (episodes by a keyset cursor, agents,
environments) and forgetting (an episode, an environment, a tenant), each forget ONE managed
write transaction, with a ``(:ForgetAudit)`` node as its audit row.

Neo4j has no secure delete: a deleted record's bytes stay in the store files until Neo4j reuses
the space (README, "Forgetting"); ``purge_files`` says so and does nothing else."""

from __future__ import annotations

from typing import Any

from neo4j import ManagedTransaction

from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.lifecycle import EpisodeFilter, iso_of, strip_scene
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection
from worldgraph.kg.neo4j.rows import episode_of_row
from worldgraph.kg.store import Record

__all__ = ["Neo4jLifecycle"]

# Created on first use by a store object (idempotent), like the session schema: no schema version
# moves under other processes sharing the server.
LIFECYCLE_SCHEMA: tuple[str, ...] = (
    # the listing order: a seek on the tenant, then the time range in index order
    "CREATE INDEX wg_episode_tenant_ts IF NOT EXISTS FOR (n:Episode) ON (n.tenant_id, n.ts)",
    "CREATE CONSTRAINT wg_forget_audit_id IF NOT EXISTS FOR (n:ForgetAudit) REQUIRE n.id IS UNIQUE",
    "CREATE INDEX wg_forget_audit_purged IF NOT EXISTS FOR (n:ForgetAudit) ON (n.purged_at)",
)

EPISODE_EXISTS = "MATCH (e:Episode {tenant_id: $tenant_id, id: $id}) RETURN e.agent_id AS agent"

# The neighbours of the forgotten episode are linked to each other (NEXT) before it goes.
RELINK = """
MATCH (e:Episode {tenant_id: $tenant_id, id: $id})
OPTIONAL MATCH (p:Episode)-[:NEXT]->(e)
OPTIONAL MATCH (e)-[:NEXT]->(n:Episode)
FOREACH (_ IN CASE WHEN p IS NOT NULL AND n IS NOT NULL THEN [1] ELSE [] END | MERGE (p)-[:NEXT]->(n))
"""

EPISODE_SCENES = "MATCH (s:Scene {tenant_id: $tenant_id, episode_id: $id}) RETURN s.id AS id, s.env_name AS env"

# The world records that name a scene among their sources: nodes and rules by PRODUCED, edges by
# their record (an edge keeps its sources only there), each seek on the env's key prefix.
SCENE_SOURCED = """
MATCH (s:Scene {tenant_id: $tenant_id, id: $scene_id})-[:PRODUCED]->(n)
RETURN elementId(n) AS eid, n.record AS record, 'node' AS kind
UNION ALL
MATCH ()-[r:TRANSITION]->() WHERE r.key STARTS WITH $prefix AND r.record CONTAINS $scene_id
RETURN elementId(r) AS eid, r.record AS record, 'rel' AS kind
UNION ALL
MATCH ()-[r:CONTAINS]->() WHERE r.key STARTS WITH $prefix AND r.record CONTAINS $scene_id
RETURN elementId(r) AS eid, r.record AS record, 'rel' AS kind
UNION ALL
MATCH ()-[r:EPISODIC]->() WHERE r.key STARTS WITH $prefix AND r.record CONTAINS $scene_id
RETURN elementId(r) AS eid, r.record AS record, 'rel' AS kind
"""

SET_NODE_RECORDS = "UNWIND $rows AS row MATCH (n) WHERE elementId(n) = row.eid SET n.record = row.record"
SET_REL_RECORDS = "UNWIND $rows AS row MATCH ()-[r]->() WHERE elementId(r) = row.eid SET r.record = row.record"

# DETACH DELETE takes the scene's EPISODIC edges and PRODUCED links with it.
DELETE_SCENE = "MATCH (s:Scene {tenant_id: $tenant_id, id: $scene_id}) DETACH DELETE s"

DELETE_EPISODE = """
CALL () {
  MATCH (f:Feedback {tenant_id: $tenant_id, episode_id: $id}) DETACH DELETE f RETURN count(*) AS feedback
}
CALL () {
  MATCH (a:CanvasAudit {tenant_id: $tenant_id, episode_id: $id}) DETACH DELETE a RETURN count(*) AS audits
}
MATCH (e:Episode {tenant_id: $tenant_id, id: $id})
DETACH DELETE e
RETURN feedback, audits
"""

DELETE_IDLE_AGENT = """
MATCH (a:Agent {tenant_id: $tenant_id, id: $agent})
WHERE NOT EXISTS { MATCH (e:Episode {tenant_id: $tenant_id, agent_id: $agent}) }
DETACH DELETE a
"""

RECOUNT = """
MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) WHERE m.record IS NOT NULL
RETURN m.record AS record,
""" + q.ENV_COUNT_COLUMNS
SET_META_RECORD = "MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) SET m.record = $record"

ENV_KNOWN = "MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) RETURN count(m) AS n"

CREATE_AUDIT = """
CREATE (x:ForgetAudit {id: $id, tenant_id: $tenant_id, kind: $kind, target_id: $target_id,
                       forgotten_by: $forgotten_by, forgotten_at: $forgotten_at, record: $record})
"""

# Every label a tenant's records carry (world nodes, rules and edges by their key prefix).
_TENANT_DELETES: tuple[tuple[str, str], ...] = (
    ("episodes", "MATCH (n:Episode) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL"),
    ("agents", "MATCH (n:Agent) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL"),
    ("feedback", "MATCH (n:Feedback) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL"),
    ("canvases", "MATCH (n:Canvas) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL"),
    ("canvas_audits", "MATCH (n:CanvasAudit) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL"),
    ("scenes", "MATCH (n:Scene) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL"),
    ("nodes", "MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix"),
    ("rules", "MATCH (n:Rule) WHERE n.key STARTS WITH $prefix"),
    ("environments", "MATCH (n:Environment) WHERE n.tenant_id = $tenant_id"),
    ("sessions", "MATCH (n:Session) WHERE n.tenant_id = $tenant_id"),
    ("api_keys", "MATCH (n:ApiKey) WHERE n.tenant_id = $tenant_id"),
)


class Neo4jLifecycle:
    """The list / forget / purge methods of Neo4jGraphStore (see the module docstring), on ``db``."""

    def __init__(self, db: Neo4jConnection) -> None:
        self.db = db
        self._lifecycle_ready = False  # LIFECYCLE_SCHEMA ensured (on first use)

    def _ensure_lifecycle_schema(self) -> None:
        if self._lifecycle_ready or self.db.read_only:
            return
        self.db.create_schema(LIFECYCLE_SCHEMA, q.AWAIT_INDEXES)
        self._lifecycle_ready = True

    # ---------------------------------------------------------------- browse
    def list_episodes(self, tenant_id: str, flt: EpisodeFilter, limit: int,
                      after: tuple[float, str] | None) -> list[Record]:
        self._ensure_lifecycle_schema()
        where = ["e.tenant_id = $tenant_id", "e.ts IS NOT NULL"]
        params: dict[str, Any] = {"tenant_id": tenant_id, "limit": int(limit)}
        for name, cond in (("agent_id", "e.agent_id = $agent_id"), ("session_id", "e.session_id = $session_id"),
                           ("since", "e.ts >= $since"), ("until", "e.ts < $until")):
            value = getattr(flt, name)
            if value is not None:
                where.append(cond)
                params[name] = value
        if after is not None:
            # a range on ts (what the index seeks), then the tie on the same timestamp by id
            where.append("e.ts <= $after_ts AND (e.ts < $after_ts OR e.id < $after_id)")
            params["after_ts"], params["after_id"] = after
        query = (f"MATCH (e:Episode) WHERE {' AND '.join(where)} RETURN {q.EPISODE_COLUMNS} "
                 "ORDER BY e.ts DESC, e.id DESC LIMIT $limit")
        return [episode_of_row(r) for r in self.db.rows(query, **params)]

    def list_agents(self, tenant_id: str) -> list[Record]:
        rows = self.db.rows("""
MATCH (a:Agent) WHERE a.tenant_id = $tenant_id AND a.id IS NOT NULL
CALL (a) {
  MATCH (e:Episode {tenant_id: $tenant_id, agent_id: a.id}) RETURN count(e) AS n, max(e.ts) AS last
}
WITH a, n, last WHERE n > 0
RETURN a.id AS id, a.agent_role AS role, n, last ORDER BY a.id""", tenant_id=tenant_id)
        return [{"agent_id": r["id"], "agent_role": r["role"] or "", "episodes": int(r["n"]),
                 "last_seen": iso_of(r["last"])} for r in rows]

    def environment_metas(self, tenant_id: str) -> dict[str, Record | None]:
        rows = self.db.rows("MATCH (m:Environment) WHERE m.tenant_id = $tenant_id AND m.env_name IS NOT NULL "
                            "RETURN m.env_name AS env, m.record AS record ORDER BY env", tenant_id=tenant_id)
        return {r["env"]: loads(r["record"]) if r["record"] is not None else None for r in rows}

    # ---------------------------------------------------------------- forget
    def forget_episode(self, tenant_id: str, episode_id: str, audit: Record) -> Record | None:
        self._ensure_lifecycle_schema()

        def work(tx: ManagedTransaction) -> Record | None:
            row = tx.run(EPISODE_EXISTS, tenant_id=tenant_id, id=episode_id).single()
            if row is None:
                return None
            tx.run(RELINK, tenant_id=tenant_id, id=episode_id).consume()
            scenes = [(r["id"], r["env"]) for r in tx.run(EPISODE_SCENES, tenant_id=tenant_id, id=episode_id)]
            changed = sum(_drop_scene(tx, tenant_id, env, sid) for sid, env in scenes)
            deleted = tx.run(DELETE_EPISODE, tenant_id=tenant_id, id=episode_id).single()
            tx.run(DELETE_IDLE_AGENT, tenant_id=tenant_id, agent=row["agent"]).consume()
            for env in {env for _, env in scenes}:
                _recount(tx, tenant_id, env)
            _create_audit(tx, audit)
            return {"episodes": 1, "feedback": int(deleted["feedback"]) if deleted else 0,
                    "canvas_audits": int(deleted["audits"]) if deleted else 0, "scenes": len(scenes),
                    "world_records_updated": changed}
        return self.db.write(work)

    def forget_environment(self, tenant_id: str, env_name: str, audit: Record) -> Record | None:
        self._ensure_lifecycle_schema()
        prefix = q.env_prefix(tenant_id, env_name)

        def work(tx: ManagedTransaction) -> Record | None:
            known = tx.run(ENV_KNOWN, tenant_id=tenant_id, env_name=env_name).single()
            if known is None or not known["n"]:
                return None
            tx.run(q.LOCK_ENV, tenant_id=tenant_id, env_name=env_name).consume()
            counts = tx.run(q.ENV_COUNTS, tenant_id=tenant_id, env_name=env_name, prefix=prefix).single()
            tx.run(q.DELETE_ENV, tenant_id=tenant_id, env_name=env_name, prefix=prefix).consume()
            _create_audit(tx, audit)
            return {k: int(counts[k]) if counts else 0 for k in ("nodes", "edges", "rules", "scenes")}
        return self.db.write(work)

    def forget_tenant(self, tenant_id: str, audit: Record) -> Record:
        self._ensure_lifecycle_schema()
        prefix = q.tenant_prefix(tenant_id)

        def work(tx: ManagedTransaction) -> Record:
            counts: Record = {}
            edges = tx.run(q.STATS, tenant_id=tenant_id, prefix=prefix).single()
            counts["edges"] = int(edges["edges"]) if edges else 0
            for key, match in _TENANT_DELETES:
                row = tx.run(match + " DETACH DELETE n RETURN count(*) AS n", tenant_id=tenant_id,
                             prefix=prefix).single()
                counts[key] = int(row["n"]) if row else 0
            _create_audit(tx, audit)
            return {k: counts[k] for k in ("episodes", "feedback", "scenes", "nodes", "edges", "rules", "agents",
                                           "canvases", "api_keys")}
        return self.db.write(work)

    def forget_log(self, tenant_id: str | None = None, unpurged: bool = False) -> list[Record]:
        if not self._lifecycle_ready and not self.db.read_only:
            self._ensure_lifecycle_schema()
        where = ["($tenant_id IS NULL OR x.tenant_id = $tenant_id)"]
        if unpurged:
            where.append("x.purged_at IS NULL")
        rows = self.db.rows(f"MATCH (x:ForgetAudit) WHERE {' AND '.join(where)} "
                            "RETURN x.record AS record, x.purged_at AS purged ORDER BY x.forgotten_at, x.id",
                            tenant_id=tenant_id)
        out = []
        for r in rows:
            rec = loads(r["record"])
            rec["purged_at"] = r["purged"]
            out.append(rec)
        return out

    def mark_purged(self, audit_ids: list[str], at: str) -> None:
        self.db.write(lambda tx: tx.run("UNWIND $ids AS id MATCH (x:ForgetAudit {id: id}) SET x.purged_at = $at",
                                        ids=list(audit_ids), at=at).consume())

    def purge_files(self) -> Record:
        return {"neo4j": "deleted records stay in the Neo4j store files until their space is reused "
                         "(README, 'Forgetting')"}


def _drop_scene(tx: ManagedTransaction, tenant_id: str, env: str, scene_id: str) -> int:
    """Take ``scene_id`` out of the sources of the records learned from it, then delete the scene."""
    nodes: list[Record] = []
    rels: list[Record] = []
    for r in tx.run(SCENE_SOURCED, tenant_id=tenant_id, scene_id=scene_id, prefix=q.env_prefix(tenant_id, env)):
        rec = loads(r["record"])
        if scene_id not in (rec.get("source_scenes") or []):
            continue  # the id text occurs elsewhere in the record
        row = {"eid": r["eid"], "record": dumps(strip_scene(rec, scene_id))}
        (nodes if r["kind"] == "node" else rels).append(row)
    if nodes:
        tx.run(SET_NODE_RECORDS, rows=nodes).consume()
    if rels:
        tx.run(SET_REL_RECORDS, rows=rels).consume()
    tx.run(DELETE_SCENE, tenant_id=tenant_id, scene_id=scene_id).consume()
    return len(nodes) + len(rels)


def _recount(tx: ManagedTransaction, tenant_id: str, env: str) -> None:
    row = tx.run(RECOUNT, tenant_id=tenant_id, env_name=env, prefix=q.env_prefix(tenant_id, env)).single()
    if row is None:
        return
    meta = loads(row["record"])
    meta["counts"] = {k: int(row[k]) for k in ("nodes", "edges", "rules", "scenes")}
    tx.run(SET_META_RECORD, tenant_id=tenant_id, env_name=env, record=dumps(meta)).consume()


def _create_audit(tx: ManagedTransaction, audit: Record) -> None:
    tx.run(CREATE_AUDIT, id=audit["id"], tenant_id=audit["tenant_id"], kind=audit["kind"],
           target_id=audit["target_id"], forgotten_by=audit.get("forgotten_by"),
           forgotten_at=audit["forgotten_at"], record=dumps(audit)).consume()
