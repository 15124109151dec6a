"""The Neo4j store's graph model, keys and schema (constraints, indexes, migrations).

Its statements are in ``neo4j.episode_queries`` and ``neo4j.world_queries``; ``neo4j.queries``
re-exports all three modules, so ``from worldgraph.kg import neo4j_queries as q`` reaches every one.

The graph model (Neo4j 5.26, Community edition):

    (:Episode)-[:PERFORMED_BY]->(:Agent)      (:Episode)-[:ON_CANVAS]->(:Canvas)
    (:CanvasAudit)-[:DURING]->(:Episode)      (:Feedback)-[:RATES]->(:Episode)
    (:Scene)-[:FROM_EPISODE]->(:Episode)      (:Scene)-[:IN_ENV]->(:Environment)
    (:WorldNode:Entity | :WorldNode:State)-[:TRANSITION | :CONTAINS]->(:WorldNode)
    (:WorldNode:Entity)-[:FACT {predicate, single_valued}]->(:WorldNode:Entity)   (facts of any kind)
    (:WorldNode)-[:EPISODIC]->(:Scene)        (:Rule)-[:CONCERNS]->(:WorldNode)
    (:Scene)-[:PRODUCED]->(:WorldNode | :Rule)   (the scenes a node or rule was learned from)
    (:Episode)-[:NEXT]->(:Episode)            (the next episode of the same session, in time order)
    (:Session {tenant_id, id, last_seq})      (a session's counter; its write lock orders linking)
    (:WorldgraphSchema {name: "worldgraph", version: N})

No relationship joins two tenants: every statement below that links two nodes finds both ends
by ``$tenant_id`` or by a ``key`` that starts with the tenant's prefix (tests/unit/kg/test_cypher_tenants.py
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
a closed edge and its reopening). Their type comes from ``WORLD_EDGE_TYPES``, never from user
text: a fact of any kind is one type, ``FACT``, its predicate a property (so no relationship type
is made from a model's words, and ``cypher()``'s tenant guard sees one more fixed type).
Reads that must match the embedded store's semantics (audits, feedback and scenes of an
episode) use indexed properties (``episode_id``); the relationships exist for exploration.
"""


from __future__ import annotations

from worldgraph.schema import SCHEMA_VERSIONS

# worldgraph.schema keeps every store's version. Here: 2: world nodes, rules and edges keyed on
# `key`; 3: episode index_error property; 4: a tenant_id index per label (TENANT_LABELS), what
# cypher() seeks from
SCHEMA_VERSION = SCHEMA_VERSIONS["neo4j"]

KEY_SEP, KEY_ESC = "\u001f", "\u001e"


def escape_key(part: str) -> str:
    """One part of a key with KEY_ESC and KEY_SEP escaped, so that joined parts decode one way."""
    return part.replace(KEY_ESC, KEY_ESC + KEY_ESC).replace(KEY_SEP, KEY_ESC + KEY_SEP)


def world_key(tenant_id: str, env_name: str, id: str) -> str:
    """The ``key`` of a world node, rule or edge: an injective encoding of (tenant, env, id)."""
    return f"{escape_key(tenant_id)}{KEY_SEP}{escape_key(env_name)}{KEY_SEP}{escape_key(id)}"


def env_prefix(tenant_id: str, env_name: str) -> str:
    """What exactly the keys of one environment start with."""
    return f"{escape_key(tenant_id)}{KEY_SEP}{escape_key(env_name)}{KEY_SEP}"


def tenant_prefix(tenant_id: str) -> str:
    """What exactly the keys of one tenant start with."""
    return f"{escape_key(tenant_id)}{KEY_SEP}"

# relation (record value) -> relationship type, for the three seed relations; the embedded store's
# Cypher projection (kg/embedded/cypher/) holds these types.
EDGE_TYPES: dict[str, str] = {"transition": "TRANSITION", "containment": "CONTAINS", "episodic": "EPISODIC"}
FACT_TYPE = "FACT"
# Every relationship type a world edge may have: the seed relations' and FACT (relation "fact").
WORLD_EDGE_TYPES: dict[str, str] = {**EDGE_TYPES, "fact": FACT_TYPE}
# node kind -> the second label of a world node.
NODE_LABELS: dict[str, str] = {"entity": "Entity", "state": "State"}
# Queryable copies of record fields (the full record is the `record` JSON property). Each copy is
# a property write per element, so fields the graph already says are not copied: an edge's
# relation is its type and src_id / dst_id its ends, a record's source_scenes are its
# (:Scene)-[:PRODUCED]-> links, and norm_name is derived from name.
NODE_PROPS: tuple[str, ...] = ("kind", "type", "name", "norm_name", "entity_id", "confidence", "evidence_count",
                               "valid_from", "valid_to")
# Edges (half of every plan) copy only what exploration reads: a transition's action and the
# validity interval (the example queries of docs/cypher.md); confidence and evidence stay in `record`.
EDGE_PROPS: tuple[str, ...] = ("action", "valid_from", "valid_to")
# A fact edge also copies what it is: MATCH ()-[f:FACT {predicate: 'works_at'}]->() WHERE f.valid_to IS NULL.
FACT_PROPS: tuple[str, ...] = (*EDGE_PROPS, "predicate", "single_valued")
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


def edge_props(relation: str) -> tuple[str, ...]:
    """The properties a world edge of ``relation`` copies from its record."""
    return FACT_PROPS if relation == "fact" else EDGE_PROPS


def set_props(var: str, keys: tuple[str, ...]) -> str:
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
    # cypher() looks world nodes up by name (the example queries of docs/cypher.md): this seek is so selective that
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

# ---------------------------------------------------------------------------------- facts
# Created before the first world write of a store object (idempotent), like SESSION_SCHEMA below:
# databases at any version get it without a migration.
FACT_SCHEMA: tuple[str, ...] = (
    "CREATE CONSTRAINT wg_fact_ukey IF NOT EXISTS FOR ()-[r:FACT]-() REQUIRE r.key IS UNIQUE",
)

# ---------------------------------------------------------------------------------- sessions
# Created by the first session write of a store object (idempotent), not by a schema version:
# databases at any version get them without a migration, and a shared server's version is not
# moved under other processes.
SESSION_SCHEMA: tuple[str, ...] = (
    "CREATE CONSTRAINT wg_session_key IF NOT EXISTS FOR (n:Session) REQUIRE (n.tenant_id, n.id) IS UNIQUE",
    "CREATE INDEX wg_episode_session IF NOT EXISTS FOR (n:Episode) ON (n.tenant_id, n.session_id)",
    "CREATE INDEX wg_session_tenant IF NOT EXISTS FOR (n:Session) ON (n.tenant_id)",  # cypher() seeks it
)
