"""Cypher of the Neo4j store's memory lifecycle (``worldgraph.kg.neo4j.lifecycle``): its schema,
browsing (episodes by a keyset cursor, agents, environments), forgetting (an episode, an agent's
or a session's episodes with what they derive, an environment, a tenant) and the
``(:ForgetAudit)`` rows. ``worldgraph.kg.neo4j.queries``
re-exports every statement."""

from __future__ import annotations

from typing import Any

from worldgraph.kg.lifecycle import EpisodeFilter
from worldgraph.kg.neo4j.schema import EPISODE_COLUMNS
from worldgraph.kg.neo4j.world_queries import ENV_COUNT_COLUMNS

# Created on first use by a store object (idempotent), like the session schema: no schema version
# moves under other processes sharing the server.
LIFECYCLE_SCHEMA: tuple[str, ...] = (
    # the listing order: a seek on the tenant, then the time range in index order
    "CREATE INDEX wg_episode_tenant_ts IF NOT EXISTS FOR (n:Episode) ON (n.tenant_id, n.ts)",
    "CREATE CONSTRAINT wg_forget_audit_id IF NOT EXISTS FOR (n:ForgetAudit) REQUIRE n.id IS UNIQUE",
    "CREATE INDEX wg_forget_audit_purged IF NOT EXISTS FOR (n:ForgetAudit) ON (n.purged_at)",
    # purge generations, by tenant ('' the total): facade/generations.py
    "CREATE CONSTRAINT wg_purge_gen IF NOT EXISTS FOR (n:PurgeGeneration) REQUIRE n.tenant_id IS UNIQUE",
    # the episodes on a canvas (a forget derives the canvas record from the live ones: kg.derived)
    "CREATE INDEX wg_episode_canvas IF NOT EXISTS FOR (n:Episode) ON (n.tenant_id, n.canvas_id)",
)

# ---------------------------------------------------------------------------------- browse
# The optional filters of a listing: (EpisodeFilter field, its condition on e).
_EPISODE_FILTERS = (("agent_id", "e.agent_id = $agent_id"), ("session_id", "e.session_id = $session_id"),
                    ("since", "e.ts >= $since"), ("until", "e.ts < $until"))


def list_episodes(tenant_id: str, flt: EpisodeFilter, limit: int,
                  after: tuple[float, str] | None) -> tuple[str, dict[str, Any]]:
    """The statement and parameters of one page of ``list_episodes``: newest first in (ts, id)
    order, strictly after ``after`` in that order (a keyset seek)."""
    where = ["e.tenant_id = $tenant_id", "e.ts IS NOT NULL"]
    params: dict[str, Any] = {"tenant_id": tenant_id, "limit": int(limit)}
    for name, cond in _EPISODE_FILTERS:
        value = getattr(flt, name)
        if value is not None:
            where.append(cond)
            params[name] = value
    if after is not None:
        # a range on ts (what the index seeks), then the tie on the same timestamp by id
        where.append("e.ts <= $after_ts AND (e.ts < $after_ts OR e.id < $after_id)")
        params["after_ts"], params["after_id"] = after
    query = (f"MATCH (e:Episode) WHERE {' AND '.join(where)} RETURN {EPISODE_COLUMNS} "
             "ORDER BY e.ts DESC, e.id DESC LIMIT $limit")
    return query, params


# The agents with at least one episode: id, role, episode count and the newest episode's ts.
LIST_AGENTS = """
MATCH (a:Agent) WHERE a.tenant_id = $tenant_id AND a.id IS NOT NULL
CALL (a) {
  MATCH (e:Episode {tenant_id: $tenant_id, agent_id: a.id}) RETURN count(e) AS n, max(e.ts) AS last
}
WITH a, n, last WHERE n > 0
RETURN a.id AS id, a.agent_role AS role, n, last ORDER BY a.id"""

ENVIRONMENT_METAS = ("MATCH (m:Environment) WHERE m.tenant_id = $tenant_id AND m.env_name IS NOT NULL "
                     "RETURN m.env_name AS env, m.record AS record ORDER BY env")

# ---------------------------------------------------------------------------------- forget episodes
# The episodes one forget takes (id, record), oldest first: one by id, an agent's, a session's.
EPISODES_TO_FORGET: dict[str, str] = {
    "episode": "MATCH (e:Episode {tenant_id: $tenant_id, id: $target}) RETURN e.id AS id, e.record AS record",
    "agent": ("MATCH (e:Episode {tenant_id: $tenant_id, agent_id: $target}) "
              "RETURN e.id AS id, e.record AS record ORDER BY e.ts, e.id"),
    "session": ("MATCH (e:Episode {tenant_id: $tenant_id, session_id: $target}) "
                "RETURN e.id AS id, e.record AS record ORDER BY e.ts, e.id"),
}

# The turns of a session whose context may quote one of $ids: they name it, or they were recorded
# before context_from existed (kg.derived.quotes decides, by their text).
SESSION_QUOTING = """
MATCH (e:Episode {tenant_id: $tenant_id, session_id: $session_id})
WHERE any(id IN $ids WHERE e.record CONTAINS id)
   OR (e.task_type = 'conversation' AND NOT e.record CONTAINS '"context_from"')
RETURN e.record AS record
"""
# the episode now before one in its session (NEXT stays inside a tenant)
SESSION_PREVIOUS = "MATCH (p:Episode)-[:NEXT]->(e:Episode {tenant_id: $tenant_id, id: $id}) RETURN p.record AS record"
# a record whose derived text was derived again: its index row is written again
REWRITE_EPISODE = """
MATCH (e:Episode {tenant_id: $tenant_id, id: $id})
SET e.record = $record, e.index_status = 'pending', e.index_error = null
"""
# the live episodes on a canvas, newest first; the canvas derived from them, or deleted
CANVAS_EPISODES = ("MATCH (e:Episode {tenant_id: $tenant_id, canvas_id: $canvas_id}) "
                   "RETURN e.record AS record ORDER BY e.ts DESC, e.id DESC")
SET_CANVAS = "MATCH (c:Canvas {tenant_id: $tenant_id, id: $id}) SET c.name = $name, c.record = $record"
DELETE_CANVAS = "MATCH (c:Canvas {tenant_id: $tenant_id, id: $id}) DETACH DELETE c"
# the scenes whose record may name an episode (a round their history excerpt quotes)
SCENES_NAMING = "MATCH (s:Scene {tenant_id: $tenant_id}) WHERE s.record CONTAINS $id RETURN s.record AS record"
SET_SCENE_RECORD = "MATCH (s:Scene {tenant_id: $tenant_id, id: $id}) SET s.record = $record"

# The neighbours of the forgotten episode are linked to each other (NEXT) before it goes.
RELINK = """
MATCH (e:Episode {tenant_id: $tenant_id, id: $id})
OPTIONAL MATCH (p:Episode)-[:NEXT]->(e)
OPTIONAL MATCH (e)-[:NEXT]->(n:Episode)
FOREACH (_ IN CASE WHEN p IS NOT NULL AND n IS NOT NULL THEN [1] ELSE [] END | MERGE (p)-[:NEXT]->(n))
"""

EPISODE_SCENES = "MATCH (s:Scene {tenant_id: $tenant_id, episode_id: $id}) RETURN s.record AS record"

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
UNION ALL
MATCH ()-[r:FACT]->() WHERE r.key STARTS WITH $prefix AND r.record CONTAINS $scene_id
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

# an agent with other episodes: its record, and its newest live episode (kg.derived.agent_of)
AGENT_AND_NEWEST = """
MATCH (a:Agent {tenant_id: $tenant_id, id: $agent})
CALL (a) {
  MATCH (e:Episode {tenant_id: $tenant_id, agent_id: $agent}) RETURN e.record AS newest ORDER BY e.ts DESC LIMIT 1
}
RETURN a.record AS record, a.agent_role AS role, newest
"""
SET_AGENT = "MATCH (a:Agent {tenant_id: $tenant_id, id: $agent}) SET a.agent_role = $role, a.record = $record"
# a session's node once its last episode is gone (it names the session)
DELETE_IDLE_SESSION = """
MATCH (s:Session {tenant_id: $tenant_id, id: $session_id})
WHERE NOT EXISTS { MATCH (e:Episode {tenant_id: $tenant_id, session_id: $session_id}) }
DETACH DELETE s
"""

DELETE_IDLE_AGENT = """
MATCH (a:Agent {tenant_id: $tenant_id, id: $agent})
WHERE NOT EXISTS { MATCH (e:Episode {tenant_id: $tenant_id, agent_id: $agent}) }
DETACH DELETE a
"""

# An environment's meta record and its counts, to write the counts back after a forget.
RECOUNT = """
MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) WHERE m.record IS NOT NULL
RETURN m.record AS record,
""" + ENV_COUNT_COLUMNS
SET_META_RECORD = "MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) SET m.record = $record"

# ---------------------------------------------------------------------------------- forget an env, a tenant
ENV_KNOWN = "MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) RETURN count(m) AS n"

# Every label a tenant's records carry (world nodes, rules and edges by their key prefix), as
# (count name, the statement that deletes them and returns how many).
TENANT_DELETES: tuple[tuple[str, str], ...] = tuple((key, match + " DETACH DELETE n RETURN count(*) AS n") for key, match in (
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
    ("idempotency", "MATCH (n:IdempotencyKey) WHERE n.tenant_id = $tenant_id"),
))

# ---------------------------------------------------------------------------------- the audit rows
CREATE_AUDIT = """
CREATE (x:ForgetAudit {id: $id, tenant_id: $tenant_id, kind: $kind, target_id: $target_id,
                       forgotten_by: $forgotten_by, forgotten_at: $forgotten_at, record: $record})
"""


def forget_log(unpurged: bool) -> str:
    """The audit rows, oldest first: of the tenant ``$tenant_id`` (every tenant's when it is
    null), only those not yet purged if ``unpurged``."""
    where = ["($tenant_id IS NULL OR x.tenant_id = $tenant_id)"]
    if unpurged:
        where.append("x.purged_at IS NULL")
    return (f"MATCH (x:ForgetAudit) WHERE {' AND '.join(where)} "
            "RETURN x.record AS record, x.purged_at AS purged ORDER BY x.forgotten_at, x.id")


MARK_PURGED = "UNWIND $ids AS id MATCH (x:ForgetAudit {id: id}) SET x.purged_at = $at"

# ---------------------------------------------------------------------------------- purge generations
PURGE_GEN_TOTAL = "MATCH (g:PurgeGeneration {tenant_id: ''}) RETURN g.gen AS gen"
PURGE_GENS = "MATCH (g:PurgeGeneration) WHERE g.tenant_id <> '' RETURN g.tenant_id AS tenant, g.gen AS gen"
BUMP_PURGE_GENS = """
UNWIND $tenants AS tenant
MERGE (g:PurgeGeneration {tenant_id: tenant})
SET g.gen = coalesce(g.gen, 0) + 1
"""

# ---------------------------------------------------------------------------------- the derived-text upgrade
DERIVED_TEXT_READ = "MATCH (s:WorldgraphSchema {name: 'worldgraph'}) RETURN s.derived_text AS done"
DERIVED_TEXT_WRITE = "MERGE (s:WorldgraphSchema {name: 'worldgraph'}) SET s.derived_text = true"
CANVAS_IDS = "MATCH (c:Canvas {tenant_id: $tenant_id}) WHERE c.id IS NOT NULL RETURN c.id AS id ORDER BY id"
