"""Every Cypher statement of the Neo4j store, and its schema.

The graph model (Neo4j 5.26, Community edition):

    (:Episode)-[:PERFORMED_BY]->(:Agent)      (:Episode)-[:ON_CANVAS]->(:Canvas)
    (:CanvasAudit)-[:DURING]->(:Episode)      (:Feedback)-[:RATES]->(:Episode)
    (:Scene)-[:FROM_EPISODE]->(:Episode)      (:Scene)-[:IN_ENV]->(:Environment)
    (:WorldNode:Entity | :WorldNode:State)-[:TRANSITION | :CONTAINS]->(:WorldNode)
    (:WorldNode)-[:EPISODIC]->(:Scene)        (:Rule)-[:CONCERNS]->(:WorldNode)
    (:Scene)-[:PRODUCED]->(:WorldNode | :Rule)   (the scenes a node or rule was learned from)
    (:Episode)-[:NEXT]->(:Episode)            (the next episode of the same session, in time order)
    (:Session {tenant_id, id, last_seq})      (a session's counter; its write lock orders linking)
    (:WorldgraphSchema {name: "worldgraph", version: N})

No relationship joins two tenants: every statement below that links two nodes finds both ends
by ``$tenant_id`` or by a ``key`` that starts with the tenant's prefix (tests/test_cypher_tenants.py
checks it on stored data). ``cypher()`` relies on it (``worldgraph.kg.cypher_guard``): an
expansion from a node of the caller's tenant stays inside the tenant.

Every node (and world-graph relationship) carries ``tenant_id``; world records also carry
``env_name``. Keys are (tenant_id, id) or (tenant_id, env_name, id), exactly like the embedded
store's primary keys, so a snapshot imported into a second tenant keeps its ids. World nodes,
rules and edges (written ~10k at a time by apply_plan) are keyed on ONE string property, ``key``
(``world_key``: the three parts joined by U+001F, escaped so the encoding is injective), under a
single-property uniqueness constraint: every MERGE / MATCH is one seek on a one-string index
(a composite three-string key cost ~2x the server CPU), and env-wide reads seek the key prefix
(``key STARTS WITH $prefix``). tenant_id, env_name and id stay ordinary properties.
The full record is kept as a JSON string in ``record`` (Neo4j drops null properties and cannot
store maps), next to the few properties queries filter and sort on; reads decode ``record``.
An episode's indexing state (index_status, index_error) is the exception: it changes after the
episode is written, so it is kept only as properties and put back into the record on read.

World edges are relationships with an ``id`` property (several records may link the same pair:
a closed edge and its reopening). Their type comes from ``EDGE_TYPES``, never from user text.
Reads that must match the embedded store's semantics (audits, feedback and scenes of an
episode) use indexed properties (``episode_id``); the relationships exist for exploration.
"""

from __future__ import annotations

SCHEMA_VERSION = 4  # 2: world nodes, rules and edges keyed on `key`; 3: episode index_error property;
#                     4: a tenant_id index per label (TENANT_LABELS), what cypher() seeks from

KEY_SEP, KEY_ESC = "\u001f", "\u001e"


def _esc(part: str) -> str:
    return part.replace(KEY_ESC, KEY_ESC + KEY_ESC).replace(KEY_SEP, KEY_ESC + KEY_SEP)


def world_key(tenant_id: str, env_name: str, id: str) -> str:
    """The ``key`` of a world node, rule or edge: an injective encoding of (tenant, env, id)."""
    return f"{_esc(tenant_id)}{KEY_SEP}{_esc(env_name)}{KEY_SEP}{_esc(id)}"


def env_prefix(tenant_id: str, env_name: str) -> str:
    """What exactly the keys of one environment start with."""
    return f"{_esc(tenant_id)}{KEY_SEP}{_esc(env_name)}{KEY_SEP}"


def tenant_prefix(tenant_id: str) -> str:
    """What exactly the keys of one tenant start with."""
    return f"{_esc(tenant_id)}{KEY_SEP}"

# relation (record value) -> relationship type; the only relationship types edges may have.
EDGE_TYPES: dict[str, str] = {"transition": "TRANSITION", "containment": "CONTAINS", "episodic": "EPISODIC"}
# node kind -> the second label of a world node.
NODE_LABELS: dict[str, str] = {"entity": "Entity", "state": "State"}
# Queryable copies of record fields (the full record is the `record` JSON property). Each copy is
# a property write per element, so fields the graph already says are not copied: an edge's
# relation is its type and src_id / dst_id its ends, a record's source_scenes are its
# (:Scene)-[:PRODUCED]-> links, and norm_name is derived from name.
NODE_PROPS: tuple[str, ...] = ("kind", "type", "name", "norm_name", "entity_id", "confidence", "evidence_count",
                               "valid_from", "valid_to")
# Edges (half of every plan) copy only what exploration reads: a transition's action and the
# validity interval (the README's Cypher examples); confidence and evidence stay in `record`.
EDGE_PROPS: tuple[str, ...] = ("action", "valid_from", "valid_to")
RULE_PROPS: tuple[str, ...] = ("condition", "outcome", "confidence", "evidence_count", "valid_from", "valid_to")
EPISODE_PROPS: tuple[str, ...] = ("agent_id", "agent_role", "ts", "timestamp", "index_status", "index_error",
                                  "canvas_id", "task_type", "task_description", "outcome", "session_id")
# An episode's indexing state changes after it is written (pending -> indexed | failed). It lives
# only in the index_status / index_error properties, not in the `record` JSON, so marking a batch
# indexed is one SET per episode instead of a read and a rewrite of every record; reads put the
# two fields back (EPISODE_COLUMNS). Like the embedded store's columns.
EPISODE_STATE: tuple[str, ...] = ("index_status", "index_error")
EPISODE_COLUMNS = "e.record AS record, e.index_status AS index_status, e.index_error AS index_error"
AUDIT_PROPS: tuple[str, ...] = ("episode_id", "canvas_id", "timestamp", "action_type", "agent_id")
SCENE_PROPS: tuple[str, ...] = ("env_name", "status", "created_at", "episode_id", "current_round", "trigger_reason")


def _set(var: str, keys: tuple[str, ...]) -> str:
    """``n.k = row.props.k, ...``: explicit SETs, unlike ``n += row.props``, let the planner
    stream the rows (no Eager) because it can see they do not touch the MERGE keys. The rows
    also carry the keys a query looks other nodes up by under names no SET uses (``row.agent``,
    ``row.src``): reading ``row.props.agent_id`` while setting ``e.agent_id`` would be a
    read/set conflict to the planner, which then buffers every row before writing."""
    return ", ".join(f"{var}.{k} = row.props.{k}" for k in keys)

# ---------------------------------------------------------------------------------- schema
API_KEY_CONSTRAINT = "CREATE CONSTRAINT wg_api_key_id IF NOT EXISTS FOR (k:ApiKey) REQUIRE k.id IS UNIQUE"
# Uniqueness constraints first (MERGE then seeks their backing index), then plain indexes.
# Community edition has uniqueness constraints (composite ones too, also on relationships),
# but no node-key or property-existence constraints.
CONSTRAINTS: tuple[str, ...] = (
    "CREATE CONSTRAINT wg_episode_key IF NOT EXISTS FOR (n:Episode) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE CONSTRAINT wg_agent_key IF NOT EXISTS FOR (n:Agent) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE CONSTRAINT wg_canvas_key IF NOT EXISTS FOR (n:Canvas) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE CONSTRAINT wg_audit_key IF NOT EXISTS FOR (n:CanvasAudit) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE CONSTRAINT wg_feedback_key IF NOT EXISTS FOR (n:Feedback) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE CONSTRAINT wg_scene_key IF NOT EXISTS FOR (n:Scene) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE CONSTRAINT wg_node_ukey IF NOT EXISTS FOR (n:WorldNode) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT wg_rule_ukey IF NOT EXISTS FOR (n:Rule) REQUIRE n.key IS UNIQUE",
    "CREATE CONSTRAINT wg_env_key IF NOT EXISTS FOR (n:Environment) REQUIRE (n.tenant_id, n.env_name) IS UNIQUE",
    "CREATE CONSTRAINT wg_schema_key IF NOT EXISTS FOR (n:WorldgraphSchema) REQUIRE n.name IS UNIQUE",
    "CREATE CONSTRAINT wg_transition_ukey IF NOT EXISTS FOR ()-[r:TRANSITION]-() REQUIRE r.key IS UNIQUE",
    "CREATE CONSTRAINT wg_contains_ukey IF NOT EXISTS FOR ()-[r:CONTAINS]-() REQUIRE r.key IS UNIQUE",
    "CREATE CONSTRAINT wg_episodic_ukey IF NOT EXISTS FOR ()-[r:EPISODIC]-() REQUIRE r.key IS UNIQUE",
    API_KEY_CONSTRAINT,
)

# Schema 1 -> 2: give the world records of an older database their `key`, then drop the
# composite constraints it replaced (each would still cost an index update per write).
_KEY_EXPR = ("replace(replace({v}.tenant_id, '\u001e', '\u001e\u001e'), '\u001f', '\u001e\u001f') + '\u001f' + "
             "replace(replace({v}.env_name, '\u001e', '\u001e\u001e'), '\u001f', '\u001e\u001f') + '\u001f' + "
             "replace(replace({v}.id, '\u001e', '\u001e\u001e'), '\u001f', '\u001e\u001f')")
MIGRATIONS: tuple[str, ...] = (
    *(f"MATCH (n:{label}) WHERE n.key IS NULL AND n.id IS NOT NULL AND n.env_name IS NOT NULL "
      f"CALL (n) {{ SET n.key = {_KEY_EXPR.format(v='n')} }} IN TRANSACTIONS OF 10000 ROWS"
      for label in ("WorldNode", "Rule")),
    *(f"MATCH ()-[r:{rtype}]->() WHERE r.key IS NULL AND r.id IS NOT NULL AND r.env_name IS NOT NULL "
      f"CALL (r) {{ SET r.key = {_KEY_EXPR.format(v='r')} }} IN TRANSACTIONS OF 10000 ROWS"
      for rtype in ("TRANSITION", "CONTAINS", "EPISODIC")),
    *(f"DROP CONSTRAINT {name} IF EXISTS"
      for name in ("wg_node_key", "wg_rule_key", "wg_transition_key", "wg_contains_key", "wg_episodic_key")),
)

# The labels a tenant explores with cypher(), each with a plain (tenant_id) index: the planner seeks
# it for any ``(n:Label {tenant_id: $tenant_id})``, which is the only way cypher() lets a query
# start (see cypher_guard). Entity and State need their own: the planner uses an index only
# for the label written in the pattern. tenant_id is set once when a node is created, so each
# index costs one entry per node created, nothing on updates.
TENANT_LABELS: tuple[str, ...] = ("Episode", "Agent", "Canvas", "CanvasAudit", "Feedback", "Scene", "Environment",
                                  "WorldNode", "Entity", "State", "Rule", "Session")

# The composite uniqueness constraints' indexes also serve lookups on a prefix of their keys
# (tenant_id) when the remaining keys are asked to be non-null, so the queries below say
# "AND n.id IS NOT NULL" instead of keeping a second index to update on every write; world
# records are found by env or tenant through their `key` prefix.
INDEXES: tuple[str, ...] = (
    *(f"CREATE INDEX wg_{label.lower()}_tenant IF NOT EXISTS FOR (n:{label}) ON (n.tenant_id)"
      for label in TENANT_LABELS),
    "CREATE INDEX wg_episode_agent IF NOT EXISTS FOR (n:Episode) ON (n.tenant_id, n.agent_id)",
    "CREATE INDEX wg_episode_ts IF NOT EXISTS FOR (n:Episode) ON (n.ts)",
    "CREATE INDEX wg_episode_status IF NOT EXISTS FOR (n:Episode) ON (n.index_status)",
    "CREATE INDEX wg_audit_episode IF NOT EXISTS FOR (n:CanvasAudit) ON (n.tenant_id, n.episode_id)",
    "CREATE INDEX wg_feedback_episode IF NOT EXISTS FOR (n:Feedback) ON (n.tenant_id, n.episode_id)",
    "CREATE INDEX wg_scene_env IF NOT EXISTS FOR (n:Scene) ON (n.tenant_id, n.env_name)",
    "CREATE INDEX wg_scene_episode IF NOT EXISTS FOR (n:Scene) ON (n.tenant_id, n.episode_id)",
    "CREATE INDEX wg_scene_status IF NOT EXISTS FOR (n:Scene) ON (n.status)",
    "CREATE INDEX wg_node_entity IF NOT EXISTS FOR (n:WorldNode) ON (n.tenant_id, n.env_name, n.entity_id)",
    # refs by name alone (merge); nodes written before it have no norm_name until merged again
    "CREATE INDEX wg_node_norm_name IF NOT EXISTS FOR (n:WorldNode) ON (n.tenant_id, n.env_name, n.norm_name)",
    # cypher() looks world nodes up by name (the README's queries): this seek is so selective that
    # the planner starts there, not from a scan of a smaller label (Scene, Episode) the guard refuses.
    "CREATE INDEX wg_node_name IF NOT EXISTS FOR (n:WorldNode) ON (n.tenant_id, n.env_name, n.name)",
    "CREATE FULLTEXT INDEX wg_episode_text IF NOT EXISTS FOR (n:Episode) ON EACH [n.task_description]",
)

AWAIT_INDEXES = "CALL db.awaitIndexes($seconds)"

SCHEMA_VERSION_READ = "OPTIONAL MATCH (s:WorldgraphSchema {name: 'worldgraph'}) RETURN s.version AS version"
SCHEMA_VERSION_WRITE = """
MERGE (s:WorldgraphSchema {name: 'worldgraph'})
SET s.version = CASE WHEN s.version IS NULL OR s.version < $version THEN $version ELSE s.version END
"""

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
SET {_set("e", EPISODE_PROPS)}, e.record = row.record
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
SET {_set("a", AUDIT_PROPS)}, a.record = row.record
WITH a, row
CALL (a, row) {{
  MATCH (e:Episode {{tenant_id: $tenant_id, id: row.episode}})
  MERGE (a)-[:DURING]->(e)
}}
"""

GET_EPISODES = f"""
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id IN $ids
RETURN {EPISODE_COLUMNS}
"""

# The short ids the CLI prints: a prefix seek on the (tenant_id, id) index.
EPISODE_IDS_WITH_PREFIX = """
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id STARTS WITH $prefix
RETURN e.id AS id ORDER BY e.id LIMIT $limit
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
# Created by the first session write of a store object (idempotent), not by a schema version:
# databases at any version get them without a migration, and a shared server's version is not
# moved under other processes.
SESSION_SCHEMA: tuple[str, ...] = (
    "CREATE CONSTRAINT wg_session_key IF NOT EXISTS FOR (n:Session) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE INDEX wg_episode_session IF NOT EXISTS FOR (n:Episode) ON (n.tenant_id, n.session_id)",
    "CREATE INDEX wg_session_tenant IF NOT EXISTS FOR (n:Session) ON (n.tenant_id)",  # cypher() seeks it
)

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
    + COUNT { MATCH ()-[r:EPISODIC]->() WHERE r.key STARTS WITH $prefix } AS edges,
  COUNT { MATCH (n:Rule) WHERE n.key STARTS WITH $prefix } AS rules
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

# recall's per-query read: the candidates and their feedback aggregates in one round trip
EPISODES_WITH_FEEDBACK = f"""
MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.id IN $ids
OPTIONAL MATCH (f:Feedback)-[:RATES]->(e) WHERE $category IS NULL OR f.category = $category
RETURN {EPISODE_COLUMNS}, avg(toFloat(f.score)) AS mean, count(f) AS n
"""

# ---------------------------------------------------------------------------------- canvases
GET_CANVAS = "MATCH (c:Canvas {tenant_id: $tenant_id, id: $id}) RETURN c.record AS record"

CANVAS_AUDITS = """
MATCH (a:CanvasAudit {tenant_id: $tenant_id, episode_id: $episode_id})
RETURN a.record AS record ORDER BY a.timestamp, a.id
"""

# ---------------------------------------------------------------------------------- world graph
def upsert_nodes(kind: str) -> str:
    """MERGE world nodes of one kind; the second label comes from ``NODE_LABELS`` only."""
    label = NODE_LABELS[kind]
    return f"""
UNWIND $rows AS row
MERGE (n:WorldNode {{key: row.key}})
ON CREATE SET n.tenant_id = $tenant_id, n.env_name = $env_name, n.id = row.id
SET n:{label}, {_set("n", NODE_PROPS)}, n.record = row.record
"""


# The rule's CONCERNS links are rebuilt from linked_node_ids on every upsert.
UPSERT_RULES = f"""
UNWIND $rows AS row
MERGE (r:Rule {{key: row.key}})
ON CREATE SET r.tenant_id = $tenant_id, r.env_name = $env_name, r.id = row.id
SET {_set("r", RULE_PROPS)}, r.record = row.record
WITH r, row
CALL (r) {{
  MATCH (r)-[c:CONCERNS]->()
  DELETE c
}}
CALL (r, row) {{
  UNWIND row.linked AS node_key
  MATCH (n:WorldNode {{key: node_key}})
  MERGE (r)-[:CONCERNS]->(n)
}}
"""


def upsert_edges(relation: str) -> str:
    """MERGE edges of one relation by (tenant, env, id) between their two ends.

    Transition and containment edges join world nodes; an episodic edge joins a world node and a
    scene (either end may be either). Returns how many rows were written: fewer than were sent
    means an end is missing, and ``edges_missing_ends`` names those edges. The ends are looked up
    by their keys ``row.src`` / ``row.dst`` (a scene end by ``row.src_id`` / ``row.dst_id``), not ``row.props.src_id``: a read of a property key the query also
    SETs (``r.src_id``) makes the planner buffer every row (Eager) before writing."""
    return f"""
UNWIND $rows AS row
{_edge_ends(relation)}
MERGE (src)-[r:{EDGE_TYPES[relation]} {{key: row.key}}]->(dst)
ON CREATE SET r.tenant_id = $tenant_id, r.env_name = $env_name, r.id = row.id
SET {_set("r", EDGE_PROPS)}, r.record = row.record
RETURN count(*) AS written
"""


def edges_missing_ends(relation: str) -> str:
    """The ids of the edge rows (as sent to ``upsert_edges``) whose src or dst does not exist."""
    return f"""
UNWIND $rows AS row
CALL (row) {{
  {_edge_ends(relation, optional=True)}
  RETURN src IS NOT NULL AND dst IS NOT NULL AS joined
}}
WITH row WHERE NOT joined
RETURN row.id AS id
"""


def _edge_ends(relation: str, optional: bool = False) -> str:
    """Bind ``src`` and ``dst`` for each row (null when missing if ``optional``, else drop the row)."""
    if relation == "episodic":
        ends = """
CALL (row) {
  OPTIONAL MATCH (n:WorldNode {key: row.src})
  OPTIONAL MATCH (s:Scene {tenant_id: $tenant_id, id: row.src_id})
  RETURN coalesce(n, s) AS src
}
CALL (row) {
  OPTIONAL MATCH (s:Scene {tenant_id: $tenant_id, id: row.dst_id})
  OPTIONAL MATCH (n:WorldNode {key: row.dst})
  RETURN coalesce(s, n) AS dst
}"""
        return ends if optional else ends + "\nWITH row, src, dst WHERE src IS NOT NULL AND dst IS NOT NULL"
    match = "OPTIONAL MATCH" if optional else "MATCH"
    return f"""
{match} (src:WorldNode {{key: row.src}})
{match} (dst:WorldNode {{key: row.dst}})"""


def _link_scene(label: str) -> str:
    """(:Scene)-[:PRODUCED]->(:label) for every scene id in a record's source_scenes; one row per
    scene (its records' keys in row.keys), so each scene is looked up once."""
    return f"""
UNWIND $rows AS row
MATCH (s:Scene {{tenant_id: $tenant_id, id: row.scene_id}})
UNWIND row.keys AS key
MATCH (n:{label} {{key: key}})
MERGE (s)-[:PRODUCED]->(n)
"""


LINK_SCENE_NODES = _link_scene("WorldNode")
LINK_SCENE_RULES = _link_scene("Rule")

ENV_COUNTS = """
RETURN
  COUNT { MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix } AS nodes,
  COUNT { MATCH ()-[r:TRANSITION]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:CONTAINS]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:EPISODIC]->() WHERE r.key STARTS WITH $prefix } AS edges,
  COUNT { MATCH (n:Rule) WHERE n.key STARTS WITH $prefix } AS rules,
  COUNT { MATCH (n:Scene {tenant_id: $tenant_id, env_name: $env_name}) } AS scenes
"""

SET_META = """
MERGE (m:Environment {tenant_id: $tenant_id, env_name: $env_name})
SET m.record = $record, m.graph_version = $graph_version, m.updated_at = $updated_at
"""

GET_META = "MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) RETURN m.record AS record"

# load_view: the nodes, every edge touching them (by either end, closed ones too), all rules, meta.
VIEW_NODES = """
MATCH (n:WorldNode) WHERE n.key IN $keys
RETURN n.record AS record
UNION
MATCH (n:WorldNode) WHERE n.tenant_id = $tenant_id AND n.env_name = $env_name AND n.entity_id IN $ids
RETURN n.record AS record
"""

VIEW_EDGES = """
CALL () {
  MATCH (n:WorldNode) WHERE n.key IN $keys
  RETURN n
  UNION
  MATCH (n:Scene) WHERE n.tenant_id = $tenant_id AND n.env_name = $env_name AND n.id IN $ids
  RETURN n
}
MATCH (n)-[r:TRANSITION|CONTAINS|EPISODIC]-()
WHERE r.key STARTS WITH $prefix
RETURN DISTINCT r.record AS record
"""

# The merge transaction takes the environment's write lock first (the documented way to avoid
# lost updates in Neo4j: a write before the reads), so concurrent merges of one env serialise.
LOCK_ENV = """
MERGE (m:Environment {tenant_id: $tenant_id, env_name: $env_name})
SET m.merges = coalesce(m.merges, 0) + 1
"""

VIEW_IDS_BY_NAME = """
MATCH (n:WorldNode) WHERE n.tenant_id = $tenant_id AND n.env_name = $env_name AND n.norm_name IN $names
RETURN n.id AS id
"""

# the current containment chain above the view's nodes (the merge refuses containment cycles)
VIEW_ANCESTOR_EDGES = """
MATCH (n:WorldNode) WHERE n.key IN $keys
MATCH (:WorldNode) (()-[r:CONTAINS WHERE r.valid_to IS NULL]->()){1,64} (n)
UNWIND r AS edge
RETURN DISTINCT edge.record AS record
"""

SET_SCENE_REPORT = "MATCH (s:Scene {tenant_id: $tenant_id, id: $id}) SET s.report = $report"

GET_SCENE_REPORT = "MATCH (s:Scene {tenant_id: $tenant_id, id: $id}) RETURN s.report AS record"

ENV_RULES = """
MATCH (r:Rule) WHERE r.key STARTS WITH $prefix
RETURN r.record AS record
"""

ENV_NODES = """
MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix
RETURN n.record AS record
"""

# One index seek per relationship type (its key constraint's index).
ENV_EDGES = """
CALL () {
  MATCH ()-[r:TRANSITION]->() WHERE r.key STARTS WITH $prefix
  RETURN r.record AS record
  UNION ALL
  MATCH ()-[r:CONTAINS]->() WHERE r.key STARTS WITH $prefix
  RETURN r.record AS record
  UNION ALL
  MATCH ()-[r:EPISODIC]->() WHERE r.key STARTS WITH $prefix
  RETURN r.record AS record
}
RETURN record
"""

ENV_SCENES = "MATCH (s:Scene {tenant_id: $tenant_id, env_name: $env_name}) RETURN s.record AS record"

# replace_world: DETACH DELETE also removes the env's edges, CONCERNS and PRODUCED links.
DELETE_ENV = """
CALL () {
  MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix RETURN n
  UNION ALL
  MATCH (n:Rule) WHERE n.key STARTS WITH $prefix RETURN n
  UNION ALL
  MATCH (n:Scene {tenant_id: $tenant_id, env_name: $env_name}) RETURN n
  UNION ALL
  MATCH (n:Environment {tenant_id: $tenant_id, env_name: $env_name}) RETURN n
}
DETACH DELETE n
"""

# ---------------------------------------------------------------------------------- scenes
UPSERT_SCENES = f"""
UNWIND $rows AS row
MERGE (s:Scene {{tenant_id: $tenant_id, id: row.id}})
SET {_set("s", SCENE_PROPS)}, s.record = row.record
MERGE (m:Environment {{tenant_id: $tenant_id, env_name: row.env}})
MERGE (s)-[:IN_ENV]->(m)
WITH s, row
CALL (s, row) {{
  MATCH (e:Episode {{tenant_id: $tenant_id, id: row.episode}})
  MERGE (s)-[:FROM_EPISODE]->(e)
}}
"""

GET_SCENE = "MATCH (s:Scene {tenant_id: $tenant_id, id: $id}) RETURN s.record AS record"

# claim_scene, step 1: take the scene's write lock first (the documented Neo4j way to avoid lost
# updates), then read its status under the lock. Step 2 writes the status and record.
LOCK_SCENE = """
MATCH (s:Scene {tenant_id: $tenant_id, id: $id})
SET s._lock = true
WITH s
RETURN s.status AS status, s.record AS record
"""

CLAIM_SCENE = """
MATCH (s:Scene {tenant_id: $tenant_id, id: $id})
SET s.status = 'running', s.record = $record
REMOVE s._lock
"""

UNLOCK_SCENE = "MATCH (s:Scene {tenant_id: $tenant_id, id: $id}) REMOVE s._lock"

# Leases (worldgraph.kg.lease), step 2 after LOCK_SCENE: the scene's new status and record.
WRITE_SCENE_STATE = """
MATCH (s:Scene {tenant_id: $tenant_id, id: $id})
SET s.status = $status, s.record = $record
REMOVE s._lock
"""

LIST_SCENES = """
MATCH (s:Scene)
WHERE ($tenant_id IS NULL OR s.tenant_id = $tenant_id)
  AND ($env_name IS NULL OR s.env_name = $env_name)
  AND ($statuses IS NULL OR s.status IN $statuses)
RETURN s.record AS record ORDER BY s.created_at, s.id
"""

ENVIRONMENTS = """
CALL () {
  MATCH (m:Environment) WHERE m.tenant_id = $tenant_id AND m.env_name IS NOT NULL
    AND m.record IS NOT NULL RETURN m.env_name AS env_name
  UNION
  MATCH (s:Scene) WHERE s.tenant_id = $tenant_id AND s.env_name IS NOT NULL RETURN s.env_name AS env_name
}
RETURN env_name
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
CREATE (k:ApiKey {id: $id, tenant_id: $tenant_id, name: $name, key_hash: $key_hash,
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
