"""Cypher of the episode side of the Neo4j store: episodes, sessions, feedback, canvases,
exploration (an episode's neighbourhood) and API keys. The graph model, keys and schema are in
``worldgraph.kg.neo4j.schema``; ``worldgraph.kg.neo4j.queries`` re-exports every statement."""

from __future__ import annotations

from worldgraph.kg.neo4j.schema import AUDIT_PROPS, EPISODE_COLUMNS, EPISODE_PROPS, set_props

# ---------------------------------------------------------------------------------- episodes
UPSERT_AGENTS = """
UNWIND $rows AS row
MERGE (a:Agent {tenant_id: $tenant_id, id: row.id})
SET a.agent_role = row.agent_role, a.record = row.record
"""

UPSERT_CANVASES = """
UNWIND $rows AS row
MERGE (c:Canvas {tenant_id: $tenant_id, id: row.id})
SET c.name = row.name, c.record = row.record
"""

UPSERT_EPISODES = f"""
UNWIND $rows AS row
MERGE (e:Episode {{tenant_id: $tenant_id, id: row.id}})
SET {set_props("e", EPISODE_PROPS)}, e.record = row.record
WITH e, row
CALL (e, row) {{
  MATCH (a:Agent {{tenant_id: $tenant_id, id: row.agent}})
  MERGE (e)-[:PERFORMED_BY]->(a)
}}
CALL (e, row) {{
  MATCH (c:Canvas {{tenant_id: $tenant_id, id: row.canvas}})
  MERGE (e)-[:ON_CANVAS]->(c)
}}
"""

UPSERT_AUDITS = f"""
UNWIND $rows AS row
MERGE (a:CanvasAudit {{tenant_id: $tenant_id, id: row.id}})
SET {set_props("a", AUDIT_PROPS)}, a.record = row.record
WITH a, row
CALL (a, row) {{
  MATCH (e:Episode {{tenant_id: $tenant_id, id: row.episode}})
  MERGE (a)-[:DURING]->(e)
}}
"""

# Reads of many episodes by id return ONE row holding a list: the driver builds a Python record
# object per row (~30 us each here), which for recall's 100-150 candidates cost more than the
# server's seeks; a list of [record, index_status, index_error, ...] decodes at once.
GET_EPISODES = """
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id IN $ids
RETURN collect([e.record, e.index_status, e.index_error]) AS episodes
"""

# The short ids the CLI prints: a prefix seek on the (tenant_id, id) index.
EPISODE_IDS_WITH_PREFIX = """
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id STARTS WITH $prefix
RETURN e.id AS id ORDER BY e.id LIMIT $limit
"""

AGENT_IDS = """
MATCH (a:Agent) WHERE a.tenant_id = $tenant_id AND a.id IS NOT NULL
RETURN a.id AS id ORDER BY id LIMIT $limit
"""

AGENT_EPISODES = f"""
MATCH (e:Episode {{tenant_id: $tenant_id, agent_id: $agent_id}})
RETURN {EPISODE_COLUMNS} ORDER BY e.ts DESC, e.id DESC LIMIT $limit
"""

# ORDER BY both index keys: the (tenant_id, id) index returns the page in order, no sort.
ITER_EPISODES = f"""
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id > $after_id
RETURN e.id AS id, {EPISODE_COLUMNS} ORDER BY e.tenant_id, e.id LIMIT $limit
"""

SET_INDEX_STATUS = """
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id IN $ids
SET e.index_status = $status, e.index_error = $error
"""

# Schema 3: databases written before kept index_error only in the record JSON; the store copies
# it to the property for the (few) episodes that have one.
EPISODES_WITHOUT_ERROR_PROPERTY = """
MATCH (e:Episode) WHERE e.index_status IN ['pending', 'failed'] AND e.index_error IS NULL
RETURN e.tenant_id AS tenant_id, e.id AS id, e.record AS record
"""

SET_INDEX_ERRORS = """
UNWIND $rows AS row
MATCH (e:Episode {tenant_id: row.tenant_id, id: row.id})
SET e.index_error = row.error
"""

UNINDEXED_EPISODES = f"""
MATCH (e:Episode) WHERE e.index_status IN ['pending', 'failed']
RETURN {EPISODE_COLUMNS} ORDER BY e.ts, e.id LIMIT $limit
"""

# ---------------------------------------------------------------------------------- sessions
# Linking a batch of a session's new episodes (see kg.sessions): take the session's lock and
# counter (so two writers of one session link one after the other), read the stored episodes
# around the first new one, then give the new ones their seq and rewrite NEXT over that stretch.
# The new episodes are already written in the same transaction, without a seq yet.
SESSION_CLAIM = """
MERGE (s:Session {tenant_id: $tenant_id, id: $session_id})
ON CREATE SET s.last_seq = -1
SET s._lock = true
WITH s, s.last_seq AS last_seq
SET s.last_seq = last_seq + $n
REMOVE s._lock
RETURN last_seq
"""

SESSION_BEFORE = """
MATCH (e:Episode {tenant_id: $tenant_id, session_id: $session_id})
WHERE e.session_seq IS NOT NULL AND (e.ts < $ts OR (e.ts = $ts AND e.session_seq < $seq))
RETURN e.ts AS ts, e.session_seq AS seq, e.id AS id ORDER BY e.ts DESC, e.session_seq DESC LIMIT 1
"""

SESSION_AFTER = """
MATCH (e:Episode {tenant_id: $tenant_id, session_id: $session_id})
WHERE e.session_seq IS NOT NULL AND (e.ts > $ts OR (e.ts = $ts AND e.session_seq > $seq))
RETURN e.ts AS ts, e.session_seq AS seq, e.id AS id ORDER BY e.ts, e.session_seq
"""

# rows: {id, seq (null for a stored episode), next (null at the end)}
SESSION_LINK = """
UNWIND $rows AS row
MATCH (a:Episode {tenant_id: $tenant_id, id: row.id})
SET a.session_seq = coalesce(row.seq, a.session_seq)
WITH a, row
CALL (a) {
  MATCH (a)-[old:NEXT]->()
  DELETE old
}
CALL (a, row) {
  MATCH (b:Episode {tenant_id: $tenant_id, id: row.next})
  MERGE (a)-[:NEXT]->(b)
}
"""

SESSION_NEIGHBORS = """
UNWIND $ids AS episode_id
MATCH (e:Episode {tenant_id: $tenant_id, id: episode_id}) WHERE e.session_seq IS NOT NULL
OPTIONAL MATCH (p:Episode)-[:NEXT]->(e)
OPTIONAL MATCH (e)-[:NEXT]->(n:Episode)
RETURN e.id AS id, p.id AS prev, n.id AS next
"""

SESSION_EPISODE_BEFORE = f"""
MATCH (e:Episode {{tenant_id: $tenant_id, session_id: $session_id}})
WHERE e.session_seq IS NOT NULL AND e.ts <= $ts
RETURN {EPISODE_COLUMNS} ORDER BY e.ts DESC, e.session_seq DESC LIMIT 1
"""

TENANTS = """
CALL () {
  MATCH (e:Episode) RETURN DISTINCT e.tenant_id AS tenant_id
  UNION
  MATCH (s:Scene) RETURN DISTINCT s.tenant_id AS tenant_id
  UNION
  MATCH (m:Environment) WHERE m.record IS NOT NULL RETURN DISTINCT m.tenant_id AS tenant_id
}
RETURN tenant_id
"""

STATS = """
RETURN
  COUNT { MATCH (n:Episode) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL } AS episodes,
  COUNT { MATCH (n:Agent) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL } AS agents,
  COUNT { MATCH (n:Feedback) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL } AS feedback,
  COUNT { MATCH (n:Canvas) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL } AS canvases,
  COUNT { MATCH (n:CanvasAudit) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL } AS canvas_audits,
  COUNT { MATCH (n:Scene) WHERE n.tenant_id = $tenant_id AND n.id IS NOT NULL } AS scenes,
  COUNT { MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix } AS nodes,
  COUNT { MATCH ()-[r:TRANSITION]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:CONTAINS]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:EPISODIC]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:FACT]->() WHERE r.key STARTS WITH $prefix } AS edges,
  COUNT { MATCH (n:Rule) WHERE n.key STARTS WITH $prefix } AS rules,
  COUNT { MATCH (n:Episode) WHERE n.tenant_id = $tenant_id AND n.index_status = 'indexed' } AS indexed
"""

# ---------------------------------------------------------------------------------- feedback
# Written only when the episode is this tenant's: no episode, no row, nothing written.
ADD_FEEDBACK = """
MATCH (e:Episode {tenant_id: $tenant_id, id: $episode_id})
MERGE (f:Feedback {tenant_id: $tenant_id, id: $id})
SET f += $props, f.record = $record
MERGE (f)-[:RATES]->(e)
RETURN count(f) AS written
"""

FEEDBACK_FOR = """
MATCH (f:Feedback {tenant_id: $tenant_id, episode_id: $episode_id})
RETURN f.record AS record ORDER BY f.created_at, f.id
"""

FEEDBACK_STATS = """
MATCH (f:Feedback) WHERE f.tenant_id = $tenant_id AND f.episode_id IN $ids
  AND ($category IS NULL OR f.category = $category)
RETURN f.episode_id AS episode_id, avg(toFloat(f.score)) AS mean, count(f) AS n
"""

# recall's feedback filter: every rated episode of the tenant and its mean score, one aggregate
# over the (tenant_id, episode_id) index of Feedback (the IS NOT NULL lets the index serve it)
FEEDBACK_MEANS = """
MATCH (f:Feedback) WHERE f.tenant_id = $tenant_id AND f.episode_id IS NOT NULL
  AND ($category IS NULL OR f.category = $category)
RETURN f.episode_id AS episode_id, avg(toFloat(f.score)) AS mean
"""

# recall's session filter: one seek of the (tenant_id, session_id) index (SESSION_SCHEMA)
SESSION_EPISODE_IDS = """
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.session_id = $session_id
RETURN e.id AS id
"""

# recall's per-query read: the candidates and their feedback aggregates in one round trip
EPISODES_WITH_FEEDBACK = """
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id IN $ids
OPTIONAL MATCH (f:Feedback)-[:RATES]->(e) WHERE $category IS NULL OR f.category = $category
WITH e, avg(toFloat(f.score)) AS mean, count(f) AS n
RETURN collect([e.record, e.index_status, e.index_error, mean, n]) AS episodes
"""

# ---------------------------------------------------------------------------------- canvases
GET_CANVAS = "MATCH (c:Canvas {tenant_id: $tenant_id, id: $id}) RETURN c.record AS record"

CANVAS_AUDITS = """
MATCH (a:CanvasAudit {tenant_id: $tenant_id, episode_id: $episode_id})
RETURN a.record AS record ORDER BY a.timestamp, a.id
"""

# ---------------------------------------------------------------------------------- exploration
# One round trip for every episode asked about. Every lookup is an index seek: the episode's
# scenes are found once (by the (tenant_id, episode_id) index) and their nodes and rules by
# expanding from them; matching the scene pattern inside each COLLECT would scan the index.
NEIGHBORHOOD = """
UNWIND $ids AS episode_id
MATCH (e:Episode {tenant_id: $tenant_id, id: episode_id})
OPTIONAL MATCH (c:Canvas {tenant_id: $tenant_id, id: e.canvas_id})
WITH e, c, COLLECT { MATCH (s:Scene {tenant_id: $tenant_id, episode_id: e.id})
                     RETURN s ORDER BY s.created_at, s.id } AS scenes
RETURN e.id AS id, c.record AS canvas,
  COLLECT { MATCH (a:CanvasAudit {tenant_id: $tenant_id, episode_id: e.id})
            RETURN a.record ORDER BY a.timestamp, a.id } AS canvas_actions,
  COLLECT { MATCH (f:Feedback {tenant_id: $tenant_id, episode_id: e.id})
            RETURN f.record ORDER BY f.created_at, f.id } AS feedback,
  [s IN scenes | s.record] AS scenes,
  COLLECT { UNWIND scenes AS s MATCH (s)-[:PRODUCED]->(n:WorldNode)
            WHERE n.env_name = s.env_name RETURN DISTINCT n.record } AS nodes,
  COLLECT { UNWIND scenes AS s MATCH (s)-[:PRODUCED]->(r:Rule)
            WHERE r.env_name = s.env_name RETURN DISTINCT r.record } AS rules
"""

# ---------------------------------------------------------------------------------- API keys
# (:ApiKey {id, tenant_id, name, key_hash, created_at, revoked_at}): the keys of `worldgraph
# serve`, shared by every server process on this database. Looked up by id (the key carries it);
# only the SHA-256 of the secret is kept. add_api_key also runs API_KEY_CONSTRAINT first, so a
# database whose schema predates keys gets the constraint without a schema-version bump.
CREATE_API_KEY = """
CREATE (k:ApiKey {id: $id, tenant_id: $tenant_id, name: $name, key_hash: $key_hash, scopes: $scopes,
                  created_at: $created_at, revoked_at: $revoked_at})
"""

GET_API_KEY = "MATCH (k:ApiKey {id: $id}) RETURN properties(k) AS key"

LIST_API_KEYS = """
MATCH (k:ApiKey) WHERE $tenant_id IS NULL OR k.tenant_id = $tenant_id
RETURN properties(k) AS key ORDER BY k.created_at, k.id
"""

REVOKE_API_KEY = """
MATCH (k:ApiKey {id: $id})
SET k.revoked_at = coalesce(k.revoked_at, $revoked_at)
RETURN properties(k) AS key
"""
