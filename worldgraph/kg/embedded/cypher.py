"""``cypher()`` on the embedded store: the Neo4j store's graph model, in LadybugDB, one tenant at a time.

Why LadybugDB (``ladybug`` on PyPI, the maintained fork of Kùzu; MIT): of the embedded Cypher
engines on PyPI it alone ran the README's queries and the contract suite's (parameters, OPTIONAL
MATCH, WITH, aggregation, var-length paths, UNION); ``grand-cypher`` parses only a small subset
(no aliases, parameters or OPTIONAL MATCH) and ``falkordblite`` needs Python >= 3.12 and starts a
Redis server. The measurements are in bench/README.md ("Cypher on the embedded store").

**Sealed by construction.** A query never runs on the SQLite file. It runs on a *projection*: an
in-memory LadybugDB database built from the rows ``WHERE tenant_id = ?`` of the caller's tenant
only, with the Neo4j store's labels, relationship types and property names
(``worldgraph.kg.neo4j.schema``). Whatever the query says, no other tenant's record is in the
database it runs on. ``$tenant_id`` is still bound (``cypher_guard.bind_params``), so a query
written for Neo4j (``{tenant_id: $tenant_id}`` on every node) runs unchanged.

**Read-only.** ``cypher_guard.check_text`` refuses writes, procedure calls and file clauses, and
``check_text`` below refuses LadybugDB's own statements that write, read files or Python objects,
or change settings (COPY, LOAD FROM, INSTALL, ATTACH, EXPORT, IMPORT, BEGIN / COMMIT, CHECKPOINT,
CALL). A write the checks missed would change only this process's projection, never the store;
the next episode write or another process's commit rebuilds the projection (a world delta
rewrites only the rows it wrote, so such a change to other world rows would stay until then).

**Fresh.** A projection is tagged with SQLite's ``PRAGMA data_version`` (commits by other
connections, other processes included) and the store's write generations (commits through this
store object, counted per part: the tables each part is read from, ``EPISODE_SOURCES`` and
``WORLD_SOURCES``). A query whose tag differs first brings the projection up to date: when only
this store's world writes moved (a delta), by rewriting the world rows they wrote and the
relationships touching them (``Projection.update_world``; the rows are known from the upserts'
parameters, or else found by comparing the tenant's world rows with those the projection was
built from), or by reloading the world part when that change is large or adds an environment;
otherwise it builds the projection anew. So it sees every committed write.

**Deadline.** ``cypher()`` returns or fails within ``cypher_timeout`` + ``GRACE`` (1 s), counted
from when the tenant's projection is ready, whatever the query. LadybugDB's own timeout (set too)
and ``Connection.interrupt()`` are checked only between steps of its pipeline: one expression that
builds a huge string or list (``lpad``/``repeat`` to hundreds of MB, a list doubled by
``l + l``), and its parser on deeply nested brackets (64 levels ~1 s, 300 levels ~56 s here), run
to their end, seconds to minutes. So ``run`` executes the query in a worker thread and waits until
the deadline; then it interrupts the engine every 50 ms for up to ``GRACE`` s; a query still
running then is *abandoned*: its projection is marked closed (nobody else queues on its busy
connection, the cache drops it, the next query of the tenant builds a fresh one) and the call
raises ``CypherQueryError`` naming ``cypher_timeout_seconds``. When the engine returns, the worker
drops what it made and closes that projection's database, freeing its memory. At most
``MAX_ABANDONED_PER_TENANT`` (2) abandoned runs per tenant and ``MAX_ABANDONED`` (4) per process
may be alive (each holds a core and its allocation); past either, a new query fails at once
instead of starting, so a flood of hostile queries cannot pile up threads or memory. A projection
is never waited for under the cache's lock: closing one a query still runs on is left to that
query's thread, and a world refresh that finds a query running builds a new projection instead.

**Same rows as Neo4j, or a clear error.** The few places where LadybugDB's Cypher differs from
Neo4j's are rewritten (multi-label patterns, ``labels()``, ``type()``, ``toString()`` ...,
relationship uniqueness within a MATCH, trail semantics of var-length paths, column names of
unaliased RETURN items), or refused with ``CypherQueryError`` naming the feature (list indexing,
which is 1-based in LadybugDB, named var-length relationships, ``shortestPath``); anything else
LadybugDB cannot run fails with its own message. Differences that remain: the ``merges`` counter
and ``import_incomplete`` flag of (:Environment) (Neo4j-store bookkeeping) are not projected, and
an unbounded ``*`` stops at 30 hops.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import orjson

from worldgraph.errors import CypherInputError, CypherQueryError, ReadOnlyQueryError
from worldgraph.kg import cypher_guard as guard
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.neo4j import schema as q
from worldgraph.kg.store import Record

log = logging.getLogger("worldgraph")
ENGINE = "LadybugDB"
# A query text longer than this is refused before the engine parses it. WorldModel.cypher has
# already applied the config's cypher_max_query_bytes (kg/cypher_limits.py); this bounds direct
# callers of the store too.
MAX_QUERY_CHARS = 100_000
PROJECTIONS_KEPT = 4  # tenants whose projection stays in memory (least recently queried dropped)
# The deadline (module docstring, "Deadline"): seconds spent interrupting a query past its deadline
# before it is abandoned; abandoned runs the engine may still be running, per process and per tenant
# (past either, new queries fail at once); seconds a world refresh waits for a running query.
GRACE = 1.0
MAX_ABANDONED = 4
MAX_ABANDONED_PER_TENANT = 2
REFRESH_WAIT = 0.25

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
    "EPISODIC": [(a, b) for a in _ENDS for b in _ENDS],
    "CONCERNS": [("Rule", w) for w in WORLD], "PRODUCED": [("Scene", t) for t in (*WORLD, "Rule")],
}
EDGE_REL_PROPS = ("key", "tenant_id", "env_name", "id", *q.EDGE_PROPS, "record")
# the labels a query may name; WorldNode is the union of Entity and State (every world node has both)
LABELS = frozenset(NODE_TABLES) | {"WorldNode"}


# ----------------------------------------------------------------------------- the projection
@dataclass
class _Table:
    name: str
    columns: dict[str, list[Any]]


def _props(rec: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    """What the Neo4j store copies from a record into properties (``neo4j.rows.unwind_row``)."""
    out = {}
    for k in keys:
        v = rec.get(k)
        if v is None or isinstance(v, (str, int, float, bool)) or (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            out[k] = v
    return out


_EPISODE_KEYS = ("id", *(k for k in q.EPISODE_PROPS if k not in q.EPISODE_STATE))


_Query = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
Columns = dict[str, list[Any]]  # property -> one value per row (every list as long as the others)
Nodes = dict[str, Columns]  # label -> its rows, column by column
Rels = dict[str, dict[tuple[str, str], Columns]]  # type -> (from label, to label) -> "from", "to" (pks) + properties
# The two parts of a projection, each rebuilt on its own: a world delta rebuilds only the world part.
WORLD_NODE_TABLES = ("Scene", "Environment", "Entity", "State", "Rule")
WORLD_REL_TABLES = ("FROM_EPISODE", "IN_ENV", "TRANSITION", "CONTAINS", "EPISODIC", "CONCERNS", "PRODUCED")
# the SQLite tables each part is read from (embedded.py: a write to one marks that part stale)
EPISODE_SOURCES = ("episodes", "agents", "canvases", "canvas_audits", "feedback", "session_links")
WORLD_SOURCES = ("world_nodes", "world_edges", "world_rules", "scene_links", "scenes", "scene_reports", "env_meta")
# Episodes are decoded this many at a time: their Python dicts live only until their columns are taken.
EPISODE_CHUNK = 5_000
# A world change of at most this many rows is applied row by row; a larger one reloads the world part.
INCREMENTAL_MAX = 2_000
_SIMPLE = frozenset({str, int, float, bool, type(None)})


def _node_names(label: str) -> list[str]:
    pk, props = NODE_TABLES[label]
    return list(dict.fromkeys([pk, "tenant_id", *props, *([] if label in NO_RECORD else ["record"])]))


def _rel_names(rtype: str) -> list[str]:
    return ["from", "to", *(EDGE_REL_PROPS if rtype in q.EDGE_TYPES.values() else ())]


def _empty_nodes(labels: Iterable[str]) -> Nodes:
    return {label: {n: [] for n in _node_names(label)} for label in labels}


def _empty_rels(types: Iterable[str]) -> Rels:
    return {rtype: {pair: {n: [] for n in _rel_names(rtype)} for pair in REL_TABLES[rtype]} for rtype in types}


def _add(cols: Columns, row: Mapping[str, Any]) -> None:
    for name, values in cols.items():
        values.append(row.get(name))


def _link(rels: Rels, rtype: str, a: str, a_pk: str, b: str, b_pk: str, props: Mapping[str, Any] | None = None) -> None:
    _add(rels[rtype][(a, b)], {"from": a_pk, "to": b_pk, **(props or {})})


def _prop_column(values: list[Any]) -> list[Any]:
    """One property over many records as ``_props`` copies it: values other than strings, numbers,
    booleans and lists of strings are left out (null)."""
    if set(map(type, values)) <= _SIMPLE:
        return values
    return [v if type(v) in _SIMPLE or (isinstance(v, list) and all(isinstance(x, str) for x in v)) else None
            for v in values]


def load_tenant(query: _Query, tenant_id: str) -> tuple[Nodes, Rels, set[str], WorldPart]:
    """The tenant's episode part (node and relationship columns, episode ids) and its world part,
    as the Neo4j store would hold them. Reads only rows of ``tenant_id``."""
    nodes, rels, episodes = load_episode_part(query, tenant_id)
    return nodes, rels, episodes, load_world_part(read_world_rows(query, tenant_id), tenant_id, episodes)


def load_episode_part(query: _Query, tenant_id: str) -> tuple[Nodes, Rels, set[str]]:
    """Column by column: a Python dict per episode lives only while its chunk is decoded."""
    t = (tenant_id,)
    nodes = _empty_nodes(label for label in NODE_TABLES if label not in WORLD_NODE_TABLES)
    rels = _empty_rels(rtype for rtype in REL_TABLES if rtype not in WORLD_REL_TABLES)
    seq = {eid: (s, nxt) for eid, s, nxt in
           query("SELECT episode_id, seq, next_id FROM session_links WHERE tenant_id = ?", t)}
    ep = nodes["Episode"]
    agent_ids: list[Any] = []
    canvas_ids: list[Any] = []
    rows = query("SELECT data, index_status, index_error FROM episodes WHERE tenant_id = ?", t)
    for start in range(0, len(rows), EPISODE_CHUNK):
        chunk = rows[start:start + EPISODE_CHUNK]
        recs = [loads(r[0]) for r in chunk]
        datas = [r[0] for r in chunk]
        for i, rec in enumerate(recs):
            if "index_status" in rec or "index_error" in rec:  # the Neo4j store keeps them out of the record
                recs[i] = rec = {k: v for k, v in rec.items() if k not in q.EPISODE_STATE}
                datas[i] = dumps(rec)
        for k in _EPISODE_KEYS:
            ep[k] += _prop_column([rec.get(k) for rec in recs])
        ep["index_status"] += [r[1] for r in chunk]
        ep["index_error"] += [r[2] for r in chunk]
        ep["record"] += datas
        agent_ids += [rec.get("agent_id") for rec in recs]
        canvas_ids += [rec.get("canvas_id") for rec in recs]
        del recs, datas
    del rows
    ids = ep["id"]
    n = len(ids)
    ep["tenant_id"] = [tenant_id] * n
    ep["session_seq"] = [seq[eid][0] if eid in seq else None for eid in ids]
    episodes: set[str] = set(ids)
    for sid, last in query("SELECT session_id, MAX(seq) FROM session_links WHERE tenant_id = ? GROUP BY session_id", t):
        _add(nodes["Session"], {"tenant_id": tenant_id, "id": sid, "last_seq": last})
    for (data,) in query("SELECT data FROM agents WHERE tenant_id = ?", t):
        a = loads(data)
        agent = {"id": a["id"], "tenant_id": tenant_id, "agent_role": a.get("agent_role", "")}
        _add(nodes["Agent"], {**agent, "record": dumps(agent)})
    canvases = set()
    for (data,) in query("SELECT data FROM canvases WHERE tenant_id = ?", t):
        c = loads(data)
        canvases.add(c["id"])
        _add(nodes["Canvas"], {"tenant_id": tenant_id, "id": c["id"], "name": c.get("name"), "record": data})
    agents = set(nodes["Agent"]["id"])
    performed = [(e, a) for e, a in zip(ids, agent_ids, strict=True) if a is not None and a in agents]
    on_canvas = [(e, c) for e, c in zip(ids, canvas_ids, strict=True) if c is not None and c in canvases]
    rels["PERFORMED_BY"][("Episode", "Agent")] = {"from": [e for e, _ in performed], "to": [a for _, a in performed]}
    rels["ON_CANVAS"][("Episode", "Canvas")] = {"from": [e for e, _ in on_canvas], "to": [c for _, c in on_canvas]}
    nxt = [(eid, s[1]) for eid, s in seq.items() if s[1] is not None and eid in episodes and s[1] in episodes]
    rels["NEXT"][("Episode", "Episode")] = {"from": [a for a, _ in nxt], "to": [b for _, b in nxt]}
    for (data,) in query("SELECT data FROM canvas_audits WHERE tenant_id = ?", t):
        a = loads(data)
        _add(nodes["CanvasAudit"], {"tenant_id": tenant_id, **_props(a, ("id", *q.AUDIT_PROPS)), "record": data})
        if a.get("episode_id") in episodes:
            _link(rels, "DURING", "CanvasAudit", a["id"], "Episode", a["episode_id"])
    for (data,) in query("SELECT data FROM feedback WHERE tenant_id = ?", t):
        f = loads(data)
        _add(nodes["Feedback"], {"tenant_id": tenant_id, "id": f["id"], "episode_id": f["episode_id"],
                                 "category": f.get("feedback_category"), "score": f["feedback_score"],
                                 "created_at": f["created_at"], "record": data})
        if f["episode_id"] in episodes:
            _link(rels, "RATES", "Feedback", f["id"], "Episode", f["episode_id"])
    return nodes, rels, episodes


# The world part's source rows as read (undecoded): table -> key -> data. A refresh reads them
# again and compares, so only the rows that changed are decoded and reloaded.
WorldRows = dict[str, dict[Any, str]]
_WORLD_READS = {
    "scene_reports": "SELECT scene_id, data FROM scene_reports WHERE tenant_id = ?",
    "scenes": "SELECT id, data FROM scenes WHERE tenant_id = ?",
    "env_meta": "SELECT env_name, data FROM env_meta WHERE tenant_id = ?",
    "world_nodes": "SELECT env_name, id, data FROM world_nodes WHERE tenant_id = ?",
    "world_rules": "SELECT env_name, id, data FROM world_rules WHERE tenant_id = ?",
    "world_edges": "SELECT env_name, id, data FROM world_edges WHERE tenant_id = ?",
}


def read_world_rows(query: _Query, tenant_id: str) -> WorldRows:
    out: WorldRows = {}
    for table, sql in _WORLD_READS.items():
        rows = query(sql, (tenant_id,))
        out[table] = {r[0]: r[1] for r in rows} if sql.count(",") == 1 else {(r[0], r[1]): r[2] for r in rows}
    return out


_WORLD_READ_ONE = {
    "scene_reports": "SELECT data FROM scene_reports WHERE tenant_id = ? AND scene_id = ?",
    "scenes": "SELECT data FROM scenes WHERE tenant_id = ? AND id = ?",
    "env_meta": "SELECT data FROM env_meta WHERE tenant_id = ? AND env_name = ?",
    "world_nodes": "SELECT data FROM world_nodes WHERE tenant_id = ? AND env_name = ? AND id = ?",
    "world_rules": "SELECT data FROM world_rules WHERE tenant_id = ? AND env_name = ? AND id = ?",
    "world_edges": "SELECT data FROM world_edges WHERE tenant_id = ? AND env_name = ? AND id = ?",
}


def read_world_keys(query: _Query, tenant_id: str, base: WorldRows, touched: Iterable[tuple[str, Any]]) -> WorldRows:
    """``base`` (the rows a projection was built from) with the rows ``touched`` ((table, key) as
    in WorldRows) read again: what read_world_rows would return when only those rows were written."""
    raw = {table: dict(rows) for table, rows in base.items()}
    for table, key in touched:
        rows = query(_WORLD_READ_ONE[table], (tenant_id, *(key if isinstance(key, tuple) else (key,))))
        if rows:
            raw[table][key] = rows[0][0]
        else:
            raw[table].pop(key, None)
    return raw


class _World:
    """Turns world rows into node and relationship rows, the Neo4j store's way; holds what links
    need to know: the world nodes present ((env, id) -> (label, key)) and the scene ids."""

    def __init__(self, tenant_id: str, scenes: set[str]) -> None:
        self.tenant_id = tenant_id
        self.scenes = scenes
        self.index: dict[tuple[str, str], tuple[str, str]] = {}
        self.envs: set[Any] = set()  # the (:Environment) nodes

    def scene(self, nodes: Nodes, rels: Rels, data: str, report: str | None, episodes: set[str]) -> Any:
        """Add a scene and its links; its environment's name."""
        s = loads(data)
        _add(nodes["Scene"], {"tenant_id": self.tenant_id, **_props(s, ("id", *q.SCENE_PROPS)), "report": report,
                              "record": data})
        env = s.get("env_name")
        _link(rels, "IN_ENV", "Scene", s["id"], "Environment", env)
        if s.get("episode_id") in episodes:
            _link(rels, "FROM_EPISODE", "Scene", s["id"], "Episode", s["episode_id"])
        return env

    def node(self, nodes: Nodes, rels: Rels, env: str, data: str) -> None:
        n = loads(data)
        label = q.NODE_LABELS.get(n.get("kind", "entity"), "Entity")
        key = q.world_key(self.tenant_id, env, n["id"])
        self.index[(env, n["id"])] = (label, key)
        _add(nodes[label], {"tenant_id": self.tenant_id, "env_name": env, "key": key,
                            **_props(n, ("id", *q.NODE_PROPS)), "record": data})
        for sid in dict.fromkeys(n.get("source_scenes") or []):
            if sid in self.scenes:
                _link(rels, "PRODUCED", "Scene", sid, label, key)

    def rule(self, nodes: Nodes, rels: Rels, env: str, data: str) -> None:
        r = loads(data)
        key = q.world_key(self.tenant_id, env, r["id"])
        _add(nodes["Rule"], {"tenant_id": self.tenant_id, "env_name": env, "key": key,
                             **_props(r, ("id", *q.RULE_PROPS)), "record": data})
        for nid in dict.fromkeys(r.get("linked_node_ids") or []):
            if (env, nid) in self.index:
                label, nkey = self.index[(env, nid)]
                _link(rels, "CONCERNS", "Rule", key, label, nkey)
        for sid in dict.fromkeys(r.get("source_scenes") or []):
            if sid in self.scenes:
                _link(rels, "PRODUCED", "Scene", sid, "Rule", key)

    def edge(self, rels: Rels, env: str, data: str) -> None:
        e = loads(data)
        rtype = q.EDGE_TYPES.get(e.get("relation", ""))
        if rtype is None:
            return

        def end(id: Any) -> tuple[str, str] | None:
            if (env, id) in self.index:
                return self.index[(env, id)]
            return ("Scene", id) if rtype == "EPISODIC" and id in self.scenes else None
        src, dst = end(e.get("src_id")), end(e.get("dst_id"))
        if src is None or dst is None:
            return
        props = {"key": q.world_key(self.tenant_id, env, e["id"]), "tenant_id": self.tenant_id, "env_name": env,
                 "id": e["id"], **_props(e, q.EDGE_PROPS), "record": data}
        _link(rels, rtype, src[0], src[1], dst[0], dst[1], props)


@dataclass
class WorldPart:
    nodes: Nodes
    rels: Rels
    raw: WorldRows  # the rows it was built from
    world: _World


def load_world_part(raw: WorldRows, tenant_id: str, episodes: set[str]) -> WorldPart:
    nodes = _empty_nodes(WORLD_NODE_TABLES)
    rels = _empty_rels(WORLD_REL_TABLES)
    reports = raw["scene_reports"]
    envs: dict[str, dict[str, Any]] = {}
    world = _World(tenant_id, set(raw["scenes"]))
    for sid, data in raw["scenes"].items():
        env = world.scene(nodes, rels, data, reports.get(sid), episodes)
        envs.setdefault(env, {"tenant_id": tenant_id, "env_name": env})
    for env, data in raw["env_meta"].items():
        envs[env] = _env_row(tenant_id, env, data)
    for row in envs.values():
        _add(nodes["Environment"], row)
    world.envs = set(envs)
    for (env, _id), data in raw["world_nodes"].items():
        world.node(nodes, rels, env, data)
    for (env, _id), data in raw["world_rules"].items():
        world.rule(nodes, rels, env, data)
    for (env, _id), data in raw["world_edges"].items():
        world.edge(rels, env, data)
    return WorldPart(nodes, rels, raw, world)


def _env_row(tenant_id: str, env: str, data: str) -> dict[str, Any]:
    meta = loads(data)
    return {"tenant_id": tenant_id, "env_name": env, "record": data,
            "graph_version": meta.get("graph_version"), "updated_at": meta.get("updated_at")}


_KUZU_TYPES = {"string": "STRING", "int64": "INT64", "double": "DOUBLE", "bool": "BOOLEAN",
               "list<item: string>": "STRING[]"}
_ARROW_TYPES = {"STRING": "string", "INT64": "int64", "DOUBLE": "float64", "BOOLEAN": "bool", "STRING[]": "list<string>"}


def _array(name: str, values: list[Any], kind: str | None = None) -> tuple[Any, str]:
    """One column as an Arrow array and its LadybugDB type, each value as Neo4j holds it (ints and
    floats mixed become doubles; all-null columns are strings). With ``kind`` (a table's existing
    column), the values must fit it: CypherQueryError if they do not."""
    import pyarrow as pa

    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise CypherQueryError(f"cannot project the property {name!r} into {ENGINE}: its values mix types ({exc})") \
            from None
    t = arr.type
    if pa.types.is_null(t):
        arr = arr.cast(pa.string())
    elif pa.types.is_integer(t):
        arr = arr.cast(pa.int64())
    elif pa.types.is_floating(t):
        arr = arr.cast(pa.float64())
    elif pa.types.is_large_string(t):
        arr = arr.cast(pa.string())
    elif pa.types.is_list(t) and pa.types.is_null(t.value_type):
        arr = arr.cast(pa.list_(pa.string()))
    got = _KUZU_TYPES.get(str(arr.type))
    if got is None:
        raise CypherQueryError(f"cannot project the property {name!r} ({arr.type}) into {ENGINE}")
    if kind is not None and got != kind:
        if arr.null_count == len(arr) or (got, kind) == ("INT64", "DOUBLE"):
            arr = arr.cast(pa.list_(pa.string()) if kind == "STRING[]" else _ARROW_TYPES[kind])
        else:
            raise CypherQueryError(f"the property {name!r} is {got} in new rows, {kind} in the projection")
        got = kind
    return arr, got


class Projection:
    """One tenant's graph in an in-memory LadybugDB database (see the module docstring)."""

    def __init__(self, tenant_id: str, nodes: Nodes, rels: Rels, episodes: set[str], world: WorldPart,
                 buffer_pool_bytes: int = 0) -> None:
        import ladybug

        self.tenant_id = tenant_id
        self.episodes = episodes  # ids, for the world part's (:Scene)-[:FROM_EPISODE]->(:Episode)
        self.lock = threading.Lock()  # one query (or refresh) at a time; released through unlock()
        self.closed = False  # replaced, dropped or abandoned: hand it out no more
        self.released = False  # its database is closed (its memory freed)
        # buffer_pool_bytes bounds the engine's memory (an in-memory database lives in its buffer
        # pool; 0: LadybugDB's default, most of the machine's memory). Not bounded by default: a
        # 20k-episode tenant (13 MiB SQLite file) did not load in 8x its file size (bench/README.md).
        self.db = ladybug.Database(":memory:", buffer_pool_size=buffer_pool_bytes)
        self.conn = ladybug.Connection(self.db)
        self.conn.set_max_threads_for_exec(2)
        self.kinds: dict[str, dict[str, str]] = {}  # table -> column -> LadybugDB type
        self.world = world
        self.world_gen = 0  # the store's world-write generation the world part is at (embedded.py)
        self._create(nodes, rels)
        self._create(world.nodes, world.rels)
        world.nodes, world.rels = {}, {}  # loaded: only raw and the index stay

    @contextmanager
    def _refreshing(self) -> Iterator[None]:
        """Hold the lock for a refresh. A query that still runs on the projection after
        ``REFRESH_WAIT`` seconds (the refresh's caller holds the cache's lock meanwhile) raises
        ProjectionBusy: the cache builds a new projection instead of waiting for it."""
        if not self.lock.acquire(timeout=REFRESH_WAIT):
            raise ProjectionBusy
        try:
            if self.closed:
                raise ProjectionBusy
            yield
        finally:
            self.unlock()

    def replace_world(self, world: WorldPart) -> None:
        """Drop the world part's tables and load them again (the episode part stays)."""
        with self._refreshing():
            self._drop_world()
            self._create(world.nodes, world.rels)
            world.nodes, world.rels = {}, {}
            self.world = world

    def _drop_world(self) -> None:
        for rtype in WORLD_REL_TABLES:
            self.conn.execute(f"DROP TABLE IF EXISTS {rtype}")
        for label in WORLD_NODE_TABLES:
            self.conn.execute(f"DROP TABLE IF EXISTS {label}")

    def _create(self, nodes: Nodes, rels: Rels) -> None:
        """Create and fill the node tables of ``nodes`` and the relationship tables of ``rels``."""
        for label, columns in nodes.items():
            cols = {n: _array(n, columns[n]) for n in _node_names(label)}
            columns.clear()  # consumed: the Python values go before the engine's copy is made
            self.kinds[label] = {n: kind for n, (_, kind) in cols.items()}
            ddl = ", ".join(f"{n} {kind}" for n, (_, kind) in cols.items())
            self.conn.execute(f"CREATE NODE TABLE {label}({ddl}, PRIMARY KEY ({NODE_TABLES[label][0]}))")
            self._copy_nodes(label, {n: arr for n, (arr, _) in cols.items()})
        for rtype, by_pair in rels.items():
            names = _rel_names(rtype)[2:]
            joined: dict[str, list[Any]] = {n: [v for c in by_pair.values() for v in c.get(n, [])] for n in names}
            kinds = {n: _array(n, values)[1] for n, values in joined.items()}
            self.kinds[rtype] = kinds
            ddl = "".join(f", {n} {kind}" for n, kind in kinds.items())
            self.conn.execute(f"CREATE REL TABLE {rtype}("
                              f"{', '.join(f'FROM {a} TO {b}' for a, b in REL_TABLES[rtype])}{ddl})")
        self._copy_rels(rels)

    def _copy_nodes(self, label: str, arrays: Mapping[str, Any]) -> None:
        import pyarrow as pa

        if arrays and len(next(iter(arrays.values()))):
            arrow_rows = pa.table(dict(arrays))  # noqa: F841 - read by COPY
            self.conn.execute(f"COPY {label} FROM arrow_rows")

    def _copy_rels(self, rels: Rels) -> None:
        """Append the relationships of ``rels`` to their (existing) tables."""
        import pyarrow as pa

        for rtype, by_pair in rels.items():
            kinds = self.kinds[rtype]
            for (a, b), columns in by_pair.items():
                if not columns["from"]:
                    continue
                arrow_rows = pa.table({"from": columns["from"], "to": columns["to"],  # noqa: F841 - read by COPY
                                       **{n: _array(n, columns[n], kinds[n])[0] for n in kinds}})
                self.conn.execute(f"COPY {rtype} FROM arrow_rows (from='{a}', to='{b}')")

    def update_world(self, raw: WorldRows, read_edges: Callable[[str, list[str]], list[tuple[str, str]]]) -> bool:
        """Bring the world part to ``raw`` (the world rows read now) by reloading only the rows
        that changed and the relationships that touch them; False (nothing changed) when the
        change is not of that kind (environments come or go, too many rows, a property changes
        type): the caller then reloads the whole world part. ``read_edges(env, ids)``:
        the (id, data) of the env's edges from or to those node ids."""
        old = self.world.raw
        world = self.world.world
        if raw["env_meta"].keys() != old["env_meta"].keys():
            return False
        changed = {t: {k for k, _ in raw[t].items() ^ old[t].items()} for t in raw}
        if sum(map(len, changed.values())) > INCREMENTAL_MAX:
            return False
        envs = [e for e, d in raw["env_meta"].items() if old["env_meta"][e] != d]
        scenes = changed["scenes"] | changed["scene_reports"]
        for sid in scenes:
            env = loads(raw["scenes"][sid]).get("env_name") if sid in raw["scenes"] else None
            was = loads(old["scenes"][sid]).get("env_name") if sid in old["scenes"] else None
            # an environment that only scenes name would come or go: the world part is reloaded
            if (env is not None and env not in world.envs) or (was is not None and was not in raw["env_meta"]):
                return False
        moved = set(changed["world_nodes"])
        rules = set(changed["world_rules"])
        edges = set(changed["world_edges"])
        for sid in scenes:  # what links to a scene names its id: those rows are reloaded with it
            moved |= {k for k, data in raw["world_nodes"].items() if sid in data}
            rules |= {k for k, data in raw["world_rules"].items() if sid in data}
            edges |= {k for k, data in raw["world_edges"].items() if sid in data}
        by_env: dict[str, list[str]] = {}
        for env, nid in moved:
            by_env.setdefault(env, []).append(nid)
        for env, ids in by_env.items():
            edges |= {(env, eid) for eid, _ in read_edges(env, ids)}
        if moved:
            moved_ids = {nid for _env, nid in moved}
            for key, data in raw["world_rules"].items():
                if any(nid in data for nid in moved_ids):  # a cheap test on the text first
                    linked = loads(data).get("linked_node_ids") or []
                    if any((key[0], nid) in moved for nid in linked):
                        rules.add(key)
        t = self.tenant_id
        # the changed edges as they are in the projection: (type, from label) -> [(from pk, key)]
        old_edges: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for env, eid in edges:
            if (env, eid) in old["world_edges"]:
                e = loads(old["world_edges"][(env, eid)])
                rtype = q.EDGE_TYPES.get(e.get("relation", ""))
                src = world.index.get((env, e.get("src_id")))
                if src is None and rtype == "EPISODIC" and e.get("src_id") in world.scenes:
                    src = ("Scene", e["src_id"])
                if rtype is not None and src is not None:
                    old_edges.setdefault((rtype, src[0]), []).append({"a": src[1], "key": q.world_key(t, env, eid)})
        with self._refreshing():
            try:
                for rtype in {rtype for rtype, _label in old_edges}:  # a scan: faster than UNWIND + MATCH here
                    self.conn.execute(f"MATCH ()-[e:{rtype}]->() WHERE e.key IN $keys DELETE e",
                                      {"keys": [r["key"] for (rt, _), rows in old_edges.items() if rt == rtype
                                                for r in rows]})
                self._delete("Rule", [q.world_key(t, env, rid) for env, rid in rules])
                self._delete("Scene", list(scenes))
                world.scenes = set(raw["scenes"])
                gone: dict[str, list[str]] = {}
                for k in moved:
                    if k in world.index:
                        label, key = world.index.pop(k)
                        gone.setdefault(label, []).append(key)
                for label, keys in gone.items():
                    self._delete(label, keys)
                nodes = _empty_nodes(("Scene", "Entity", "State", "Rule"))
                rels = _empty_rels(("IN_ENV", "FROM_EPISODE", "PRODUCED", "CONCERNS", "TRANSITION", "CONTAINS",
                                    "EPISODIC"))
                for sid in scenes:
                    if sid in raw["scenes"]:
                        world.scene(nodes, rels, raw["scenes"][sid], raw["scene_reports"].get(sid), self.episodes)
                for k in moved:
                    if k in raw["world_nodes"]:
                        world.node(nodes, rels, k[0], raw["world_nodes"][k])
                for k in rules:
                    if k in raw["world_rules"]:
                        world.rule(nodes, rels, k[0], raw["world_rules"][k])
                for k in edges:
                    if k in raw["world_edges"]:
                        world.edge(rels, k[0], raw["world_edges"][k])
                for label, columns in nodes.items():
                    self._insert_nodes(label, columns)
                for rtype, by_pair in rels.items():
                    for pair, columns in by_pair.items():
                        self._insert_rels(rtype, pair, columns)
                for env in envs:
                    row = _env_row(t, env, raw["env_meta"][env])
                    self.conn.execute("MATCH (e:Environment {env_name: $env_name}) SET e.record = $record, "
                                      "e.graph_version = $graph_version, e.updated_at = $updated_at",
                                      {k: v for k, v in row.items() if k != "tenant_id"})
            except (RuntimeError, CypherQueryError):
                # half applied: the whole world part is reloaded from the store (the caller)
                return False
        self.world.raw = raw
        return True

    # A few rows are written with UNWIND statements: each COPY costs 10-40 ms whatever its size.
    def _delete(self, label: str, pks: list[Any]) -> None:
        if pks:
            self.conn.execute(f"UNWIND $pks AS k MATCH (n:{label} {{{NODE_TABLES[label][0]}: k}}) DETACH DELETE n",
                              {"pks": pks})

    def _typed(self, table: str, columns: Columns, names: Iterable[str]) -> tuple[list[dict[str, Any]], str]:
        """The rows as parameters (each value as its column's type) and the property map that sets them."""
        kinds = self.kinds[table]
        values = {n: _array(n, columns[n], kinds[n])[0].to_pylist() for n in names}
        rows = [dict(zip(values, row, strict=True)) for row in zip(*values.values(), strict=True)]
        props = ", ".join(f"`{n}`: CAST(r.`{n}` AS {kinds[n]})" for n in values)
        return rows, props

    def _insert_nodes(self, label: str, columns: Columns) -> None:
        if columns[NODE_TABLES[label][0]]:
            rows, props = self._typed(label, columns, self.kinds[label])
            self.conn.execute(f"UNWIND $rows AS r CREATE (:{label} {{{props}}})", {"rows": rows})

    def _insert_rels(self, rtype: str, pair: tuple[str, str], columns: Columns) -> None:
        if not columns["from"]:
            return
        a, b = pair
        rows, props = self._typed(rtype, columns, self.kinds[rtype])
        rows = [{**row, "_from": src, "_to": dst} for row, src, dst in
                zip(rows or [{}] * len(columns["from"]), columns["from"], columns["to"], strict=True)]
        self.conn.execute(f"UNWIND $rows AS r MATCH (a:{a} {{{NODE_TABLES[a][0]}: r._from}}) "
                          f"MATCH (b:{b} {{{NODE_TABLES[b][0]}: r._to}}) "
                          f"CREATE (a)-[:{rtype} {{{props}}}]->(b)", {"rows": rows})

    def close(self) -> None:
        """Close it now if no query runs on it, else when that query's thread ends (``unlock``): a
        newer projection may replace it while a query runs, and a query abandoned past its deadline
        may run on in the engine for a while. Never waits for a query."""
        self.closed = True
        if self.lock.acquire(blocking=False):
            try:
                if not self.released:
                    self.released = True
                    self.conn.close()
                    self.db.close()
            finally:
                self.lock.release()

    def unlock(self) -> None:
        """Release ``lock``; when the projection was closed meanwhile, free its database now. (Whoever
        holds the lock when close() fails to take it unlocks after close() set ``closed``, so the
        last holder always sees it.)"""
        self.lock.release()
        if self.closed:
            self.close()


class ProjectionClosed(Exception):
    """The projection was replaced between being handed out and the query starting: ask again."""


class ProjectionBusy(Exception):
    """A query still runs on the projection: build a new one rather than wait for it."""


class ProjectionCache:
    """The projections of the last few tenants queried, each tagged with the store's version."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[Any, Projection]] = OrderedDict()

    def get(self, tenant_id: str, version: tuple[Any, ...], build: Callable[[], Projection],
            refresh_world: Callable[[Projection], None]) -> Projection:
        """The tenant's projection at ``version`` = (other connections' commits, this store's episode-part
        writes, its world-part writes): as it is, with its world part reloaded when only the last
        moved, or built anew."""
        with self._lock:
            item = self._items.get(tenant_id)
            if item is not None and item[1].closed:  # abandoned by a query past its deadline (run)
                del self._items[tenant_id]
                item = None
            if item is not None and item[0] == version:
                self._items.move_to_end(tenant_id)
                return item[1]
            if item is not None and item[0][:-1] == version[:-1]:
                try:
                    refresh_world(item[1])
                except ProjectionBusy:  # a query still runs on it: built anew below
                    pass
                except BaseException:  # half reloaded: never hand it out again
                    del self._items[tenant_id]
                    item[1].close()
                    raise
                else:
                    self._items[tenant_id] = (version, item[1])
                    self._items.move_to_end(tenant_id)
                    return item[1]
            proj = build()
            if item is not None:
                item[1].close()
            self._items[tenant_id] = (version, proj)
            self._items.move_to_end(tenant_id)
            while len(self._items) > PROJECTIONS_KEPT:
                _, (_, old) = self._items.popitem(last=False)
                old.close()
            return proj

    def close(self) -> None:
        with self._lock:
            for _, proj in self._items.values():
                proj.close()
            self._items.clear()


# ----------------------------------------------------------------------------- the query text
_BLANK_RE = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|`(?:[^`]|``)*`|//[^\n]*|/\*.*?\*/", re.S)
# LadybugDB statements that are not reads of the projection (the Neo4j ones are cypher_guard's)
_ENGINE_WORDS = ("COPY", "INSTALL", "ATTACH", "EXPORT", "IMPORT", "BEGIN", "COMMIT", "ROLLBACK", "CHECKPOINT",
                 "LOAD", "CALL", "MACRO", "PROJECT")
_ENGINE_RE = re.compile(r"(?<![.$:\w])(" + "|".join(_ENGINE_WORDS) + r")\b(?!\s*:)", re.I)
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _blank(query: str) -> str:
    """The query with the insides of strings, quoted names and comments replaced by spaces (same
    length, so positions found in it are positions in the query)."""
    def keep(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith(("//", "/*")):
            return " " * len(s)
        return s[0] + " " * (len(s) - 2) + s[-1]
    return _BLANK_RE.sub(keep, query)


def _unsupported(feature: str, instead: str) -> CypherQueryError:
    return CypherQueryError(f"the embedded store's Cypher engine ({ENGINE}) does not support {feature}; {instead} "
                            "(or run the query on the Neo4j store: --graph neo4j)")


def check_text(query: str) -> None:
    """Refuse what is not a read of the projection, before the engine parses it."""
    guard.check_text(query)
    if len(query) > MAX_QUERY_CHARS:
        raise CypherInputError("query", f"is {len(query)} characters; at most {MAX_QUERY_CHARS} are accepted")
    found = _ENGINE_RE.search(_blank(query))
    if found:
        word = found.group(1).upper()
        raise ReadOnlyQueryError(
            f"cypher() is read-only: {word} is not allowed (statements that write, read files or Python objects, "
            "or change the engine's settings are refused). Use the WorldModel API to change data.")


_LABELS_RE = re.compile(rf"\(\s*(?P<var>{_NAME}|`[^`]*`)?\s*(?P<labels>(?::\s*(?:{_NAME}|`[^`]*`)\s*)+)")
_BAD_LABEL_RE = re.compile(rf"\(\s*(?:{_NAME})?\s*:\s*{_NAME}\s*[|&!%]")
_REL_RE = re.compile(r"(?P<open><?-\s*)\[(?P<body>[^\[\]]*)\](?P<close>\s*->?)")
_CLAUSE_RE = re.compile(r"(?<![.$:\w])(OPTIONAL\s+MATCH|MATCH|WITH|RETURN|UNWIND|UNION(?:\s+ALL)?|WHERE|ORDER\s+BY|SKIP|"
                        r"LIMIT)\b", re.I)
_FUNCS = {"tostring": "to_string", "tointeger": "to_int64", "tofloat": "to_double", "toboolean": "to_bool",
          "type": "label"}
_FUNC_RE = re.compile(r"(?<![.$\w`])(?P<name>toString|toInteger|toFloat|toBoolean|type|labels)\s*\(", re.I)


_KEYWORDS = frozenset({"RETURN", "WITH", "IN", "AND", "OR", "NOT", "WHERE", "UNWIND", "THEN", "ELSE", "WHEN", "BY",
                       "AS", "DISTINCT", "XOR", "CASE", "COLLECT", "EXISTS", "COUNT"})


def _clauses(code: str) -> list[tuple[int, int, str, int, int]]:
    """The clause keywords of the query: (start, end of keyword, kind, bracket depth, end of clause).
    A clause ends at the next clause keyword of the same or a lower depth, or where its brackets
    close; keywords inside brackets (``[x IN l WHERE ...]``, ``EXISTS { MATCH ... }``) belong there."""
    depth, depths = 0, []
    for ch in code:
        if ch in ")]}":
            depth -= 1
        depths.append(depth)
        if ch in "([{":
            depth += 1
    found = []
    for m in _CLAUSE_RE.finditer(code):
        kind = m.group(1).upper()
        if kind == "WITH" and re.search(r"(?:STARTS|ENDS)\s+\Z", code[:m.start()], re.I):
            continue
        kind = "MATCH" if kind.endswith("MATCH") else kind.split()[0]
        found.append((m.start(), m.end(), kind, depths[m.start()]))
    out = []
    for i, (start, after, kind, d) in enumerate(found):
        end = len(code)
        for k in range(after, len(code)):
            if depths[k] < d:
                end = k
                break
        for nxt in found[i + 1:]:
            if nxt[3] <= d and nxt[0] < end:
                end = nxt[0]
                break
        out.append((start, after, kind, d, end))
    return out


MAX_RANGE = 1_000_000


def _check_ranges(code: str) -> None:
    """``range(a, b)`` builds its whole list before the timeout is looked at (300M elements ran 69 s
    past a 0.5 s timeout): only integer literals spanning at most MAX_RANGE are accepted."""
    for m in re.finditer(r"(?<![.$\w`])range\s*\(", code, re.I):
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            j += 1
        args = code[m.end():j - 1].split(",")
        if not 2 <= len(args) <= 3 or not all(re.fullmatch(r"\s*-?\d+\s*", a) for a in args):
            raise _unsupported("range() with bounds that are not integer literals",
                               f"write range(first, last) with numbers at most {MAX_RANGE:,} apart")
        first, last = int(args[0]), int(args[1])
        step = abs(int(args[2])) if len(args) == 3 else 1
        if step == 0 or abs(last - first) // step > MAX_RANGE:
            raise _unsupported(f"range() of more than {MAX_RANGE:,} numbers", "its list is built whole before "
                               "the timeout can stop it; use a smaller range")


def _label_tables(labels: list[str]) -> list[str]:
    tables: set[str] | None = None
    for label in labels:
        if label not in LABELS:
            raise CypherQueryError(f"the graph model has no label {label!r}; labels: {', '.join(sorted(LABELS))}")
        these = set(WORLD) if label == "WorldNode" else {label}
        tables = these if tables is None else tables & these
    return sorted(tables or ())


def translate(query: str) -> str:
    """The query in LadybugDB's dialect (module docstring); CypherQueryError for what cannot be."""
    code = _blank(query)
    if re.search(r"(?<![.$\w])(?:shortestPath|allShortestPaths)\s*\(", code, re.I):
        raise _unsupported("shortestPath()", "bound the path instead: MATCH p = (a)-[:CONTAINS*1..5]-(b) "
                           "RETURN p ORDER BY length(p) LIMIT 1")
    _check_ranges(code)
    if re.search(r"(?<![.$\w`])(?:properties|keys)\s*\(", code, re.I):
        raise _unsupported("properties() and keys() as Neo4j returns them (it lists every property of the "
                           "node's table, set or not)", "return the node itself (RETURN x) or name the properties")
    if _BAD_LABEL_RE.search(code):
        raise _unsupported("label expressions with | & ! %", "write one label per pattern, or UNION two queries")
    # list subscripts and slices: 1-based in LadybugDB, 0-based in Neo4j (same text, other rows)
    for m in re.finditer(r"[\w)\]`]\s*\[", code):
        word = re.search(r"(\w+)\s*\[\Z", code[:m.end()])
        if word and word.group(1).upper() in _KEYWORDS:
            continue
        raise _unsupported("list indexing and slicing (x[i], x[a..b])",
                           "its lists are 1-based, so the same text would return other values")
    edits: list[tuple[int, int, str]] = []
    for m in _LABELS_RE.finditer(code):
        labels = [s.strip().strip("`") for s in m.group("labels").split(":")[1:]]
        tables = _label_tables(labels)
        if not tables:  # no node has these labels together: keep the pattern, match nothing
            raise _unsupported(f"the label combination {':'.join(labels)}", "no node has all of these labels")
        edits.append((m.start("labels"), m.end("labels"), ":" + ":".join(tables) + " "))
    for m in _FUNC_RE.finditer(code):
        name = m.group("name").lower()
        if name == "labels":
            edits.append((m.start(), m.end(), "_wg_labels("))
        else:
            edits.append((m.start("name"), m.end("name"), _FUNCS[name]))
    edits += _relationship_edits(code)
    edits += _column_names(query, code)
    out = query
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + text + out[end:]
    # labels(x): the Neo4j store's labels of the node's table
    out = re.sub(r"_wg_labels\(", "_wg_labels_of(", out)
    while "_wg_labels_of(" in out:
        i = out.index("_wg_labels_of(")
        j, depth = i + len("_wg_labels_of("), 1
        while j < len(out) and depth:
            depth += {"(": 1, ")": -1}.get(out[j], 0)
            j += 1
        arg = out[i + len("_wg_labels_of("): j - 1]
        out = (out[:i] + f"CASE label({arg}) WHEN 'Entity' THEN ['WorldNode', 'Entity'] WHEN 'State' THEN "
               f"['WorldNode', 'State'] ELSE [label({arg})] END" + out[j:])
    return out


def _relationship_edits(code: str) -> list[tuple[int, int, str]]:
    """Neo4j matches each relationship at most once per MATCH (its patterns, comma-separated ones
    too) and var-length paths as trails; LadybugDB matches walks. So: ``* TRAIL`` for each
    var-length relationship, a name for each anonymous one, and ``r1 <> r2`` for each pair of
    fixed-length relationships of one MATCH. A named var-length relationship (a list in Neo4j,
    a path in LadybugDB) is refused."""
    edits: list[tuple[int, int, str]] = []
    clauses = _clauses(code)
    n = 0
    for i, (start, _after, kind, _d, pattern_end) in enumerate(clauses):
        if kind != "MATCH":
            continue
        where_at, end = None, pattern_end
        nxt = clauses[i + 1] if i + 1 < len(clauses) else None
        if nxt is not None and nxt[2] == "WHERE" and nxt[0] == pattern_end:
            where_at, end = nxt[0], nxt[4]
        fixed: list[tuple[str, str]] = []  # (name, types)
        varlen: list[str] = []
        for m in _REL_RE.finditer(code, start, pattern_end):
            body = m.group("body")
            bm = re.match(rf"\s*(?P<var>{_NAME})?\s*(?P<types>:[^*{{]*)?(?P<star>\*[^{{]*)?(?P<rest>.*)\Z", body, re.S)
            if bm is None:
                continue
            types = (bm.group("types") or "").replace(" ", "").lstrip(":")
            if bm.group("star") is not None:
                if bm.group("var"):
                    raise _unsupported(f"a named var-length relationship ([{bm.group('var')}{bm.group('types') or ''}*..])",
                                       "name the path instead: p = (a)-[:CONTAINS*1..3]->(b), relationships(p)")
                star = m.start("body") + bm.start("star")
                edits.append((star, star + 1, "* TRAIL "))
                varlen.append(types)
                continue
            var = bm.group("var")
            if var is None:
                n += 1
                var = f"_wg_r{n}"
                at = m.start("body") + (bm.start("types") if bm.group("types") else len(body) - len(body.lstrip()))
                edits.append((at, at, var))
            fixed.append((var, types))
        pairs = [(a, b) for k, (a, ta) in enumerate(fixed) for (b, tb) in fixed[k + 1:]
                 if _may_share(ta, tb)]
        if varlen and any(_may_share(tv, t) for tv in varlen for _, t in fixed):
            raise _unsupported("a var-length relationship and a fixed one of the same type in one MATCH",
                               "split them into two MATCH clauses, or give them different types")
        if pairs:
            cond = " AND ".join(f"{a} <> {b}" for a, b in pairs)
            if where_at is not None:
                body_start = where_at + len("WHERE")
                edits.append((body_start, body_start, " ("))
                edits.append((end, end, f") AND {cond} "))
            else:
                edits.append((pattern_end, pattern_end, f" WHERE {cond} "))
    return edits


def _may_share(a: str, b: str) -> bool:
    """Whether relationships typed ``a`` and ``b`` (``T1|T2``, empty for any) can be the same one."""
    if not a or not b:
        return True
    return bool({t.strip(":") for t in a.split("|")} & {t.strip(":") for t in b.split("|")})


def _column_names(query: str, code: str) -> list[tuple[int, int, str]]:
    """Neo4j names an unaliased RETURN item by its text (``count(*)``, ``e.name``); LadybugDB by its
    own rendering. Each unaliased item of each RETURN gets ``AS `<its text>```."""
    edits: list[tuple[int, int, str]] = []
    for _start, after, kind, _d, end in _clauses(code):
        if kind != "RETURN":
            continue
        items_at = after
        dm = re.match(r"\s*DISTINCT\b", code[after:end], re.I)
        if dm:
            items_at += dm.end()
        depth, item_start = 0, items_at
        bounds = []
        for k in range(items_at, end):
            ch = code[k]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
            elif ch == "," and depth == 0:
                bounds.append((item_start, k))
                item_start = k + 1
        bounds.append((item_start, end))
        for a, b in bounds:
            text = code[a:b]
            if not text.strip() or text.strip() == "*" or re.search(r"\bAS\s+[\w`]", text, re.I):
                continue
            raw = query[a:b].strip()
            stop = a + len(query[a:b].rstrip())
            edits.append((stop, stop, " AS `" + raw.replace("`", "``") + "`"))
    return edits


# ----------------------------------------------------------------------------- values
def plain(value: Any) -> Any:
    """An engine value as the Neo4j store's ``cypher_guard.plain`` returns the same value."""
    if isinstance(value, dict):
        if "_nodes" in value and "_rels" in value:  # a path: [node, rel, node, ...]
            nodes, rels = value["_nodes"], value["_rels"]
            out: list[Any] = [plain(nodes[0])] if nodes else []
            for k, rel in enumerate(rels):
                out += [plain(rel), plain(nodes[k + 1])]
            return out
        label = value.get("_LABEL")
        entity = "_ID" in value and label is not None
        props = {k: plain(v) for k, v in value.items() if not (entity and (k.startswith("_") or v is None))}
        if entity and isinstance(props.get("record"), str):
            try:
                props["record"] = loads(props["record"])
            except ValueError:
                pass
            if label == "Episode" and isinstance(props["record"], dict):
                props["record"].update({k: props.get(k) for k in q.EPISODE_STATE})
        return props
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


class _Call:
    """One query on a projection, shared by its caller and the worker thread that runs it."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.state = threading.Lock()  # guards finished / abandoned
        self.finished = False
        self.abandoned = False
        self.rows: list[Record] | None = None
        self.error: BaseException | None = None


# Runs abandoned past their deadline that the engine has not ended yet, per tenant (see "Deadline").
_abandoned: dict[str, int] = {}
_abandoned_lock = threading.Lock()


def abandoned_runs(tenant_id: str | None = None) -> int:
    """How many abandoned runs (of ``tenant_id``, or of all tenants) are still alive."""
    with _abandoned_lock:
        return _abandoned.get(tenant_id, 0) if tenant_id is not None else sum(_abandoned.values())


def _timed_out(timeout: float) -> CypherQueryError:
    return CypherQueryError(f"the query ran longer than {timeout} s (cypher_timeout_seconds); it was stopped. "
                            "Narrow it or add LIMIT")


def run(proj: Projection, tenant_id: str, query: str, params: Mapping[str, Any] | None, *, timeout: float,
        max_rows: int, max_bytes: int, deadline: float | None = None) -> list[Record]:
    """Run a checked, translated query on a tenant's projection, within the limits; rows or an error
    by ``deadline`` (monotonic; default now + ``timeout``) + ``GRACE`` seconds at most."""
    if deadline is None:
        deadline = time.monotonic() + timeout
    bound = guard.bind_params(tenant_id, params)
    for key, value in bound.items():
        try:
            orjson.dumps(value)
        except TypeError as exc:
            raise CypherInputError(f"params.{key}", f"must be JSON data (string, number, boolean, null, list or "
                                    f"object): {exc}") from None
    text = translate(query)
    used = set(re.findall(rf"\$({_NAME})", _blank(text)))
    args = {k: v for k, v in bound.items() if k in used}
    with _abandoned_lock:
        mine, total = _abandoned.get(tenant_id, 0), sum(_abandoned.values())
    if mine >= MAX_ABANDONED_PER_TENANT or total >= MAX_ABANDONED:
        raise CypherQueryError(
            f"{mine if mine >= MAX_ABANDONED_PER_TENANT else total} earlier queries "
            f"{'of this tenant ' if mine >= MAX_ABANDONED_PER_TENANT else ''}ran past cypher_timeout_seconds "
            f"({timeout} s) and the embedded Cypher engine ({ENGINE}) has not ended them yet; try again in a "
            "moment, with a narrower query (smaller lists and strings)")
    if time.monotonic() >= deadline:  # a retry (ProjectionClosed) after the deadline
        raise _timed_out(timeout)
    # one query at a time per projection: wait for the one before until the deadline, or until it is
    # closed (replaced, or abandoned by a query past its deadline: the caller then gets a fresh one)
    while not proj.lock.acquire(timeout=0.05):
        if proj.closed:
            raise ProjectionClosed
        if time.monotonic() >= deadline:
            raise _timed_out(timeout)
    call = _Call()
    try:
        if proj.closed:
            raise ProjectionClosed
        proj.conn.set_query_timeout(max(1, int((deadline - time.monotonic()) * 1000)))
        threading.Thread(target=_work, name="worldgraph-embedded-cypher", daemon=True,
                         args=(call, proj, tenant_id, query, text, args, deadline, timeout, max_rows,
                               max_bytes)).start()
    except BaseException:
        proj.unlock()
        raise
    try:
        finished = call.done.wait(max(0.0, deadline - time.monotonic())) or _interrupt(call, proj)
    except BaseException:  # e.g. Ctrl-C in the CLI: the query must not run on without its caller
        _interrupt(call, proj)
        _abandon(call, proj, tenant_id)
        raise
    if not finished and _abandon(call, proj, tenant_id):
        raise _timed_out(timeout)
    if call.error is not None:
        raise call.error
    assert call.rows is not None
    return call.rows


def _interrupt(call: _Call, proj: Projection) -> bool:
    """Past the deadline: interrupt the engine (again and again: an interrupt that arrives while the
    query is still being compiled is cleared when it starts) for up to ``GRACE`` seconds. Whether
    the query has ended."""
    until = time.monotonic() + GRACE
    while True:
        try:
            proj.conn.interrupt()
        except Exception:  # noqa: BLE001 - the abandon below is the fallback
            pass
        if call.done.wait(min(0.05, max(0.0, until - time.monotonic()))):
            return True
        if time.monotonic() >= until:
            return False


def _abandon(call: _Call, proj: Projection, tenant_id: str) -> bool:
    """Give up on a query the engine did not end: mark its projection closed (nobody else queues on
    its busy connection; the cache builds a fresh one for the next query; the worker frees the
    database when the engine returns) and count it until then. False when it ended meanwhile."""
    with call.state:
        if call.finished:
            return False
        call.abandoned = True
    proj.closed = True
    with _abandoned_lock:
        _abandoned[tenant_id] = _abandoned.get(tenant_id, 0) + 1
    log.warning("cypher() on the embedded store: the engine did not stop a query of tenant %r %.1f s after "
                "its deadline; abandoned it (its projection is freed when the engine returns)", tenant_id, GRACE)
    return True


def _work(call: _Call, proj: Projection, tenant_id: str, query: str, text: str, args: dict[str, Any],
          deadline: float, timeout: float, max_rows: int, max_bytes: int) -> None:
    """The worker: runs the query, holding ``proj.lock`` (taken by the caller) until it ends."""
    try:
        call.rows = _execute(call, proj, query, text, args, deadline, timeout, max_rows, max_bytes)
    except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
        call.error = exc
    finally:
        with call.state:
            call.finished = True
            abandoned = call.abandoned
        if abandoned:  # nobody waits for it: drop what it made before freeing the projection
            call.rows = call.error = None
        try:
            proj.unlock()  # closes the projection's database if it was closed or abandoned meanwhile
        finally:
            if abandoned:
                with _abandoned_lock:
                    _abandoned[tenant_id] -= 1
                    if not _abandoned[tenant_id]:
                        del _abandoned[tenant_id]
                log.info("cypher() on the embedded store: an abandoned query of tenant %r has ended", tenant_id)
            call.done.set()


def _execute(call: _Call, proj: Projection, query: str, text: str, args: dict[str, Any], deadline: float,
             timeout: float, max_rows: int, max_bytes: int) -> list[Record]:
    try:
        result = proj.conn.execute(text, args)
    except RuntimeError as exc:
        msg = str(exc)
        if "interrupt" in msg.lower() or "timeout" in msg.lower():
            raise _timed_out(timeout) from None
        hint = ""
        word = re.search(r"mismatched input '([A-Za-z_]\w*)'", msg)
        if word and re.search(rf"(?<![\w`]){re.escape(word.group(1))}(?![\w`])", query):
            hint = (f" ({word.group(1)!r} is a reserved word in {ENGINE}: write it in backticks, "
                    f"`{word.group(1)}`, or use another name)")
        raise CypherQueryError(f"the embedded store's Cypher engine ({ENGINE}) could not run the query: "
                               f"{msg.splitlines()[0] if msg else exc!r}{hint}") from None
    if isinstance(result, list):  # several statements: refused (one query at a time)
        for r in result:
            r.close()
        raise CypherQueryError("cypher() runs one query at a time: remove the ';' between statements")
    try:
        names = result.get_column_names()
        rows: list[Record] = []
        size = 0
        while result.has_next():
            if len(rows) >= max_rows:
                raise CypherInputError("query", f"returns more than {max_rows} rows (cypher_max_rows); add LIMIT "
                                        "or aggregate")
            # RETURN * would also show the names translate() gave anonymous relationships
            row = {k: plain(v) for k, v in zip(names, result.get_next(), strict=True) if not k.startswith("_wg_")}
            size += len(orjson.dumps(row, default=str))
            if size > max_bytes:
                raise CypherInputError("query", f"returns more than {max_bytes} bytes (cypher_max_result_bytes); "
                                       "return fewer or smaller values (e.g. properties instead of whole "
                                       "nodes), or add LIMIT")
            if call.abandoned or time.monotonic() > deadline:
                raise _timed_out(timeout)
            rows.append(row)
    finally:
        result.close()
    return rows
