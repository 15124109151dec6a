"""The graph model a projection holds: the Neo4j store's labels, relationship types and properties
(``worldgraph.kg.neo4j.schema``), as LadybugDB node and relationship tables, and the column helpers
that fill them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from worldgraph.kg.neo4j import schema as q

ENGINE = "LadybugDB"

WORLD = ("Entity", "State")
# (label, primary key, properties besides tenant_id and record); types are inferred from the data
NODE_TABLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "Episode": ("id", ("id", *q.EPISODE_PROPS, "session_seq")),
    "Agent": ("id", ("id", "agent_role")),
    "Canvas": ("id", ("id", "name")),
    "CanvasAudit": ("id", ("id", *q.AUDIT_PROPS)),
    "Feedback": ("id", ("id", "episode_id", "category", "score", "created_at")),
    "Scene": ("id", ("id", *q.SCENE_PROPS, "report")),
    "Environment": ("env_name", ("env_name", "graph_version", "updated_at")),
    "Entity": ("key", ("key", "env_name", "id", *q.NODE_PROPS)),
    "State": ("key", ("key", "env_name", "id", *q.NODE_PROPS)),
    "Rule": ("key", ("key", "env_name", "id", *q.RULE_PROPS)),
    "Session": ("id", ("id", "last_seq")),
}
NO_RECORD = frozenset({"Session"})
_ENDS = (*WORLD, "Scene")
REL_TABLES: dict[str, list[tuple[str, str]]] = {
    "PERFORMED_BY": [("Episode", "Agent")], "ON_CANVAS": [("Episode", "Canvas")],
    "DURING": [("CanvasAudit", "Episode")], "RATES": [("Feedback", "Episode")],
    "FROM_EPISODE": [("Scene", "Episode")], "IN_ENV": [("Scene", "Environment")], "NEXT": [("Episode", "Episode")],
    "TRANSITION": [(a, b) for a in WORLD for b in WORLD], "CONTAINS": [(a, b) for a in WORLD for b in WORLD],
    # facts of any kind: one type whatever the predicate (a property), as on Neo4j
    q.FACT_TYPE: [(a, b) for a in WORLD for b in WORLD],
    "EPISODIC": [(a, b) for a in _ENDS for b in _ENDS],
    "CONCERNS": [("Rule", w) for w in WORLD], "PRODUCED": [("Scene", t) for t in (*WORLD, "Rule")],
}
EDGE_REL_PROPS = ("key", "tenant_id", "env_name", "id", *q.EDGE_PROPS, "record")
# the relationship types of world edges (relation -> type: q.WORLD_EDGE_TYPES) and the properties
# each holds: those of every edge, and a fact's predicate and single_valued (q.FACT_PROPS)
EDGE_REL_TYPES = frozenset(q.WORLD_EDGE_TYPES.values())
FACT_REL_PROPS = (*EDGE_REL_PROPS[:-1], *(p for p in q.FACT_PROPS if p not in q.EDGE_PROPS), "record")
# Column types are read from the data (``projection._array``); a column whose values are all null
# when its table is made takes the type declared here (else STRING), so a tenant's first fact
# fits a table made before it had one (single_valued is a boolean) and is inserted row by row.
REL_KINDS: dict[str, dict[str, str]] = {q.FACT_TYPE: {"predicate": "STRING", "single_valued": "BOOLEAN"}}
# the labels a query may name; WorldNode is the union of Entity and State (every world node has both)
LABELS = frozenset(NODE_TABLES) | {"WorldNode"}


def props_of(rec: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """What the Neo4j store copies from a record into properties (``neo4j.rows.unwind_row``)."""
    out = {}
    for k in keys:
        v = rec.get(k)
        if v is None or isinstance(v, (str, int, float, bool)) or (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            out[k] = v
    return out


EPISODE_KEYS = ("id", *(k for k in q.EPISODE_PROPS if k not in q.EPISODE_STATE))


SqlQuery = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
# The store's generations a projection holds: (episode part, world part), each (count, stamp of the
# last commit) (embedded.connection's version()).
Gens = tuple[tuple[int, str], tuple[int, str]]
Columns = dict[str, list[Any]]  # property -> one value per row (every list as long as the others; a new
# projection's Episode columns may be Arrow arrays instead: load.arrow_episodes)
Nodes = dict[str, Columns]  # label -> its rows, column by column
Rels = dict[str, dict[tuple[str, str], Columns]]  # type -> (from label, to label) -> "from", "to" (pks) + properties
# The two parts of a projection, each rebuilt on its own: a world delta rebuilds only the world part.
WORLD_NODE_TABLES = ("Scene", "Environment", "Entity", "State", "Rule")
WORLD_REL_TABLES = ("FROM_EPISODE", "IN_ENV", "TRANSITION", "CONTAINS", "EPISODIC", q.FACT_TYPE, "CONCERNS",
                    "PRODUCED")
# the SQLite tables each part is read from (embedded.py: a write to one marks that part stale)
EPISODE_SOURCES = ("episodes", "agents", "canvases", "canvas_audits", "feedback", "session_links")
WORLD_SOURCES = ("world_nodes", "world_edges", "world_rules", "scene_links", "scenes", "scene_reports", "env_meta")
# Episodes are decoded this many at a time: their Python dicts live only until their columns are taken.
EPISODE_CHUNK = 5_000
# A world change of at most this many rows is applied row by row; a larger one reloads the world part.
INCREMENTAL_MAX = 2_000
_SIMPLE = frozenset({str, int, float, bool, type(None)})


def node_names(label: str) -> list[str]:
    pk, props = NODE_TABLES[label]
    return list(dict.fromkeys([pk, "tenant_id", *props, *([] if label in NO_RECORD else ["record"])]))


def rel_names(rtype: str) -> list[str]:
    if rtype == q.FACT_TYPE:
        return ["from", "to", *FACT_REL_PROPS]
    return ["from", "to", *(EDGE_REL_PROPS if rtype in EDGE_REL_TYPES else ())]


def empty_nodes(labels: Iterable[str]) -> Nodes:
    return {label: {n: [] for n in node_names(label)} for label in labels}


def empty_rels(types: Iterable[str]) -> Rels:
    return {rtype: {pair: {n: [] for n in rel_names(rtype)} for pair in REL_TABLES[rtype]} for rtype in types}


def add_row(cols: Columns, row: Mapping[str, Any]) -> None:
    for name, values in cols.items():
        values.append(row.get(name))


def link(rels: Rels, rtype: str, a: str, a_pk: str, b: str, b_pk: str, props: Mapping[str, Any] | None = None) -> None:
    add_row(rels[rtype][(a, b)], {"from": a_pk, "to": b_pk, **(props or {})})


def prop_column(values: list[Any]) -> list[Any]:
    """One property over many records as ``props_of`` copies it: values other than strings, numbers,
    booleans and lists of strings are left out (null)."""
    if set(map(type, values)) <= _SIMPLE:
        return values
    return [v if type(v) in _SIMPLE or (isinstance(v, list) and all(isinstance(x, str) for x in v)) else None
            for v in values]

