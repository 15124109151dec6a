"""Cypher of the world-graph side of the Neo4j store: world nodes, rules, edges, scenes and
environments. The graph model, keys and schema are in ``worldgraph.kg.neo4j.schema``;
``worldgraph.kg.neo4j.queries`` re-exports every statement."""

from __future__ import annotations

from worldgraph.kg.neo4j.schema import (
    NODE_LABELS,
    NODE_PROPS,
    RULE_PROPS,
    SCENE_PROPS,
    WORLD_EDGE_TYPES,
    edge_props,
    set_props,
)

# ---------------------------------------------------------------------------------- world graph
# The scenes a batch of nodes names in source_scenes ($scene_ids), each sought once: ``scenes``,
# a list of {id, node}. The ids come from the parameter, not from ``s.id``: reading a property
# the statement also SETs on nodes (``n.id``) would make the planner buffer every row (Eager).
_BATCH_SCENES = """CALL () {
  UNWIND $scene_ids AS scene_id
  MATCH (s:Scene {tenant_id: $tenant_id, id: scene_id})
  RETURN collect({id: scene_id, node: s}) AS scenes
}"""


def upsert_nodes(kind: str) -> str:
    """MERGE world nodes of one kind, and their (:Scene)-[:PRODUCED]-> links (the batch's scenes
    looked up once, as in ``create_nodes``); the second label comes from ``NODE_LABELS`` only."""
    label = NODE_LABELS[kind]
    return f"""
{_BATCH_SCENES}
UNWIND $rows AS row
MERGE (n:WorldNode {{key: row.key}})
ON CREATE SET n.tenant_id = $tenant_id, n.env_name = $env_name, n.id = row.id
SET n:{label}, {set_props("n", NODE_PROPS)}, n.record = row.record
FOREACH (s IN [x IN scenes WHERE x.id IN row.scenes | x.node] | MERGE (s)-[:PRODUCED]->(n))
"""


def create_nodes(kind: str) -> str:
    """CREATE world nodes of one kind that are known to be new (the environment has no world node
    yet: ``ENV_HAS_NODES``), with their (:Scene)-[:PRODUCED]-> links. Half the work of MERGE: no
    locking seek per row, and the links made by CREATE."""
    label = NODE_LABELS[kind]
    return f"""
{_BATCH_SCENES}
UNWIND $rows AS row
CREATE (n:WorldNode:{label} {{key: row.key}})
SET n.tenant_id = $tenant_id, n.env_name = $env_name, n.id = row.id, {set_props("n", NODE_PROPS)}, n.record = row.record
FOREACH (s IN [x IN scenes WHERE x.id IN row.scenes | x.node] | CREATE (s)-[:PRODUCED]->(n))
"""


def create_edges(relation: str) -> str:
    """CREATE node-to-node edges known to be new (see ``create_nodes``) between their two ends;
    returns how many were written, like ``upsert_edges``."""
    rtype = WORLD_EDGE_TYPES[relation]
    return f"""
UNWIND $rows AS row
MATCH (src:WorldNode {{key: row.src}})
MATCH (dst:WorldNode {{key: row.dst}})
CREATE (src)-[r:{rtype} {{key: row.key}}]->(dst)
SET r.tenant_id = $tenant_id, r.env_name = $env_name, r.id = row.id, {set_props("r", edge_props(relation))}, r.record = row.record
RETURN count(*) AS written
"""


# Whether the environment holds any world node: if not, it holds no edge either (every edge has a
# world node at one end at least), and a plan's nodes and edges are all new (``create_nodes``).
ENV_HAS_NODES = "RETURN EXISTS { MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix } AS has_nodes"


# The rule's CONCERNS links are rebuilt from linked_node_ids on every upsert.
UPSERT_RULES = f"""
UNWIND $rows AS row
MERGE (r:Rule {{key: row.key}})
ON CREATE SET r.tenant_id = $tenant_id, r.env_name = $env_name, r.id = row.id
SET {set_props("r", RULE_PROPS)}, r.record = row.record
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

    Transition, containment and fact edges join world nodes; an episodic edge joins a world node
    and a scene (either end may be either). Returns how many rows were written: fewer than were sent
    means an end is missing, and ``edges_missing_ends`` names those edges. The ends are looked up
    by their keys ``row.src`` / ``row.dst`` (a scene end by ``row.src_id`` / ``row.dst_id``), not
    ``row.props.src_id``: a read of a property key the query also SETs (``r.src_id``) makes the
    planner buffer every row (Eager) before writing."""
    return f"""
UNWIND $rows AS row
{_edge_ends(relation)}
MERGE (src)-[r:{WORLD_EDGE_TYPES[relation]} {{key: row.key}}]->(dst)
ON CREATE SET r.tenant_id = $tenant_id, r.env_name = $env_name, r.id = row.id
SET {set_props("r", edge_props(relation))}, r.record = row.record
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
    scene (its records' keys in row.keys), so each scene is looked up once. (World nodes get
    theirs in ``upsert_nodes`` / ``create_nodes``, without seeking every node a second time.)"""
    return f"""
UNWIND $rows AS row
MATCH (s:Scene {{tenant_id: $tenant_id, id: row.scene_id}})
UNWIND row.keys AS key
MATCH (n:{label} {{key: key}})
MERGE (s)-[:PRODUCED]->(n)
"""


LINK_SCENE_RULES = _link_scene("Rule")

# An environment's counts (nodes, edges, rules, scenes), as RETURN columns: its world keys start with $prefix.
ENV_COUNT_COLUMNS = """
  COUNT { MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix } AS nodes,
  COUNT { MATCH ()-[r:TRANSITION]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:CONTAINS]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:EPISODIC]->() WHERE r.key STARTS WITH $prefix }
    + COUNT { MATCH ()-[r:FACT]->() WHERE r.key STARTS WITH $prefix } AS edges,
  COUNT { MATCH (n:Rule) WHERE n.key STARTS WITH $prefix } AS rules,
  COUNT { MATCH (n:Scene {tenant_id: $tenant_id, env_name: $env_name}) } AS scenes
"""
ENV_COUNTS = "\nRETURN\n" + ENV_COUNT_COLUMNS

# ENV_COUNTS' rules and scenes only (apply_plan into an environment without world nodes knows the rest).
ENV_RULE_SCENE_COUNTS = """
RETURN
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
MATCH (n)-[r:TRANSITION|CONTAINS|EPISODIC|FACT]-()
WHERE r.key STARTS WITH $prefix
RETURN DISTINCT r.record AS record
"""

# world_records: the records with these keys, by their unique keys (one lookup per relationship
# type: each has its own key constraint)
RECORD_NODES = "MATCH (n:WorldNode) WHERE n.key IN $keys RETURN n.record AS record"
RECORD_RULES = "MATCH (n:Rule) WHERE n.key IN $keys RETURN n.record AS record"
RECORD_EDGES = """
MATCH ()-[r:CONTAINS]->() WHERE r.key IN $keys RETURN r.record AS record
UNION ALL
MATCH ()-[r:TRANSITION]->() WHERE r.key IN $keys RETURN r.record AS record
UNION ALL
MATCH ()-[r:FACT]->() WHERE r.key IN $keys RETURN r.record AS record
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

# every containment edge (closed ones too) into the children $keys of the containment edges loaded
# (the merge recomputes a child's parents on the timeline from all of them)
VIEW_CONTAINMENT_INTO = """
MATCH (n:WorldNode) WHERE n.key IN $keys
MATCH ()-[r:CONTAINS]->(n)
RETURN DISTINCT r.record AS record
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
  UNION ALL
  MATCH ()-[r:FACT]->() WHERE r.key STARTS WITH $prefix
  RETURN r.record AS record
}
RETURN record
"""

ENV_SCENES = "MATCH (s:Scene {tenant_id: $tenant_id, env_name: $env_name}) RETURN s.record AS record"

# The environment's nodes, rules and scenes (its edges and links hang off them).
_ENV_PARTS = """
  MATCH (n:WorldNode) WHERE n.key STARTS WITH $prefix RETURN n
  UNION ALL
  MATCH (n:Rule) WHERE n.key STARTS WITH $prefix RETURN n
  UNION ALL
  MATCH (n:Scene {tenant_id: $tenant_id, env_name: $env_name}) RETURN n"""

# replace_world: DETACH DELETE also removes the env's edges, CONCERNS and PRODUCED links.
DELETE_ENV = "\nCALL () {" + _ENV_PARTS + """
  UNION ALL
  MATCH (n:Environment {tenant_id: $tenant_id, env_name: $env_name}) RETURN n
}
DETACH DELETE n
"""

# A snapshot import larger than one batch (worldgraph.kg.neo4j.snapshot_import) runs in several
# transactions: IMPORT_BEGIN marks the environment incomplete and drops its meta, DELETE_ENV_BATCH
# removes the old records a bounded batch at a time, the new ones are written in batches, and
# IMPORT_END (after SET_META) clears the mark.
IMPORT_BEGIN = """
MERGE (m:Environment {tenant_id: $tenant_id, env_name: $env_name})
SET m.import_incomplete = $import_id, m.record = null, m.graph_version = null, m.updated_at = null
"""

# _ENV_PARTS, $limit at most.
_ENV_RECORDS = "\nCALL () {" + _ENV_PARTS + """
}
WITH n LIMIT $limit"""

DELETE_ENV_BATCH = _ENV_RECORDS + """
DETACH DELETE n
RETURN count(*) AS deleted
"""

# How many nodes, rules and scenes replace_world would delete, counted up to $limit (bounded).
ENV_RECORDS_UP_TO = _ENV_RECORDS + """
RETURN count(*) AS records
"""

IMPORT_END = "MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name}) REMOVE m.import_incomplete"

IMPORT_STATE = """
MATCH (m:Environment {tenant_id: $tenant_id, env_name: $env_name})
RETURN m.import_incomplete AS import_id
"""

# ---------------------------------------------------------------------------------- scenes
UPSERT_SCENES = f"""
UNWIND $rows AS row
MERGE (s:Scene {{tenant_id: $tenant_id, id: row.id}})
SET {set_props("s", SCENE_PROPS)}, s.record = row.record
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
