"""Reading one tenant's rows from SQLite into node and relationship columns: the episode part and
the world part (each rebuilt on its own)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.cypher.model import (
    EPISODE_CHUNK,
    EPISODE_KEYS,
    NODE_TABLES,
    REL_TABLES,
    WORLD_NODE_TABLES,
    WORLD_REL_TABLES,
    Columns,
    Nodes,
    Rels,
    SqlQuery,
    add_row,
    empty_nodes,
    empty_rels,
    link,
    prop_column,
    props_of,
)
from worldgraph.kg.embedded.episode_format import full_data
from worldgraph.kg.neo4j import schema as q


def load_tenant(query: SqlQuery, tenant_id: str) -> tuple[Nodes, Rels, set[str], WorldPart]:
    """The tenant's episode part (node and relationship columns, episode ids) and its world part,
    as the Neo4j store would hold them. Reads only rows of ``tenant_id``."""
    nodes, rels, episodes = load_episode_part(query, tenant_id)
    return nodes, rels, episodes, load_world_part(read_world_rows(query, tenant_id), tenant_id, episodes)


def load_episode_part(query: SqlQuery, tenant_id: str) -> tuple[Nodes, Rels, set[str]]:
    """Column by column: a Python dict per episode lives only while its chunk is decoded."""
    t = (tenant_id,)
    nodes = empty_nodes(label for label in NODE_TABLES if label not in WORLD_NODE_TABLES)
    rels = empty_rels(rtype for rtype in REL_TABLES if rtype not in WORLD_REL_TABLES)
    seq = {eid: (s, nxt) for eid, s, nxt in
           query(sql.PROJECTION_SESSION_LINKS, t)}
    ep = nodes["Episode"]
    rows = whole_records(query(sql.PROJECTION_EPISODES, t))
    decoded = arrow_episodes(ep, rows, tenant_id, seq)
    if decoded is None:
        agent_ids, canvas_ids = add_episodes(ep, rows, tenant_id, seq)
        ids = ep["id"]
    else:
        ids, agent_ids, canvas_ids = decoded
    del rows
    episodes: set[str] = set(ids)
    for sid, last in query(sql.PROJECTION_SESSIONS, t):
        add_row(nodes["Session"], {"tenant_id": tenant_id, "id": sid, "last_seq": last})
    for (data,) in query(sql.PROJECTION_AGENTS, t):
        add_row(nodes["Agent"], agent_row(tenant_id, data))
    canvases = set()
    for (data,) in query(sql.PROJECTION_CANVASES, t):
        row = canvas_row(tenant_id, data)
        canvases.add(row["id"])
        add_row(nodes["Canvas"], row)
    agents = set(nodes["Agent"]["id"])
    performed = [(e, a) for e, a in zip(ids, agent_ids, strict=True) if a is not None and a in agents]
    on_canvas = [(e, c) for e, c in zip(ids, canvas_ids, strict=True) if c is not None and c in canvases]
    rels["PERFORMED_BY"][("Episode", "Agent")] = {"from": [e for e, _ in performed], "to": [a for _, a in performed]}
    rels["ON_CANVAS"][("Episode", "Canvas")] = {"from": [e for e, _ in on_canvas], "to": [c for _, c in on_canvas]}
    nxt = [(eid, s[1]) for eid, s in seq.items() if s[1] is not None and eid in episodes and s[1] in episodes]
    rels["NEXT"][("Episode", "Episode")] = {"from": [a for a, _ in nxt], "to": [b for _, b in nxt]}
    for (data,) in query(sql.PROJECTION_CANVAS_AUDITS, t):
        row = audit_row(tenant_id, data)
        add_row(nodes["CanvasAudit"], row)
        if row.get("episode_id") in episodes:
            link(rels, "DURING", "CanvasAudit", row["id"], "Episode", row["episode_id"])
    for (data,) in query(sql.PROJECTION_FEEDBACK, t):
        row = feedback_row(tenant_id, data)
        add_row(nodes["Feedback"], row)
        if row["episode_id"] in episodes:
            link(rels, "RATES", "Feedback", row["id"], "Episode", row["episode_id"])
    return nodes, rels, episodes


def add_episodes(ep: Columns, rows: list[tuple[Any, ...]], tenant_id: str,
                 seq: dict[str, tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """Append episode rows ((data, index_status, index_error), as PROJECTION_EPISODES reads them) to
    the Episode columns ``ep``, EPISODE_CHUNK at a time; ``seq``: episode id -> (its seq in its
    session, the next episode). Returns their agent ids and canvas ids, in order."""
    agent_ids: list[Any] = []
    canvas_ids: list[Any] = []
    for start in range(0, len(rows), EPISODE_CHUNK):
        chunk = rows[start:start + EPISODE_CHUNK]
        recs = [loads(r[0]) for r in chunk]
        datas = [r[0] for r in chunk]
        for i, rec in enumerate(recs):
            if "index_status" in rec or "index_error" in rec:  # the Neo4j store keeps them out of the record
                recs[i] = rec = _without_state(rec)
                datas[i] = dumps(rec)
        for k in EPISODE_KEYS:
            ep[k] += prop_column([rec.get(k) for rec in recs])
        ep["index_status"] += [r[1] for r in chunk]
        ep["index_error"] += [r[2] for r in chunk]
        ep["record"] += datas
        ep["tenant_id"] += [tenant_id] * len(chunk)
        ep["session_seq"] += [seq[rec["id"]][0] if rec["id"] in seq else None for rec in recs]
        agent_ids += [rec.get("agent_id") for rec in recs]
        canvas_ids += [rec.get("canvas_id") for rec in recs]
        del recs, datas
    return agent_ids, canvas_ids


# The properties ARROW_NUMBERS holds are numbers (the record model's); every other episode
# property copied is a string. A key in any other shape sends the load to add_episodes.
ARROW_NUMBERS = frozenset({"ts"})
_INT_TS = re.compile(rb'"ts":-?[0-9]+[,}]')  # an integer ts: Python's decode keeps it an int (INT64)


def _integer_ts(buf: bytes, datas: list[str]) -> bool:
    """Whether a record's own ts is an integer (``buf``: the records, one a line). A nested "ts"
    (an action's, say) matches the pattern too: only the records it matches are decoded to tell."""
    import numpy as np

    starts = [m.start() for m in _INT_TS.finditer(buf)]
    if not starts:
        return False
    lines = np.searchsorted(np.flatnonzero(np.frombuffer(buf, np.uint8) == ord("\n")), starts)
    return any(type(loads(datas[i]).get("ts")) is int for i in dict.fromkeys(lines.tolist()))


def arrow_episodes(ep: Columns, rows: list[tuple[Any, ...]], tenant_id: str,
                   seq: dict[str, tuple[Any, Any]]) -> tuple[list[Any], list[Any], list[Any]] | None:
    """``add_episodes`` for a new projection, with the records decoded by Arrow's JSON reader (one
    C++ pass instead of a Python dict per record: 100k episodes ~0.2 s instead of ~0.9 s, and no
    Python value per property). The Episode columns of ``ep`` become Arrow arrays. Returns the
    episodes' ids, agent ids and canvas ids, in order; None (``ep`` untouched) when the records
    hold anything the Python decode would copy differently: a property of another type than the
    model's, a list, an object or a duplicate key where a property is, an integer ts, a legacy
    index state inside the record, or text Arrow refuses (a lone surrogate). The caller then
    decodes them in Python (``add_episodes``), so the rows are the same either way."""
    import pyarrow as pa
    import pyarrow.json as pj

    if not rows:
        return None
    datas = [r[0] for r in rows]
    try:
        buf = "\n".join(datas).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return None
    if _integer_ts(buf, datas):
        return None
    # blocks parsed on the cores in parallel; a record must fit in one
    block = max(1 << 22, 4 * max(map(len, datas)) + 2)
    fields = [(k, pa.float64() if k in ARROW_NUMBERS else pa.string()) for k in (*EPISODE_KEYS, *q.EPISODE_STATE)]
    try:
        table = pj.read_json(pa.BufferReader(buf), read_options=pj.ReadOptions(block_size=block),
                             parse_options=pj.ParseOptions(explicit_schema=pa.schema(fields),
                                                           unexpected_field_behavior="ignore"))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(rows) or any(table.column(k).null_count != len(rows) for k in q.EPISODE_STATE):
        return None  # a record holds an index state (the Neo4j store keeps it out of the record)
    for k in EPISODE_KEYS:
        col = table.column(k).combine_chunks()
        # an all-null column is a string column, as _array makes it
        ep[k] = pa.nulls(len(col), pa.string()) if col.null_count == len(col) else col
    ids = table.column("id").to_pylist()
    ep["index_status"] = [r[1] for r in rows]
    ep["index_error"] = [r[2] for r in rows]
    ep["record"] = pa.array(datas, pa.string())
    ep["tenant_id"] = [tenant_id] * len(rows)
    ep["session_seq"] = [seq[i][0] if i in seq else None for i in ids]
    return ids, table.column("agent_id").to_pylist(), table.column("canvas_id").to_pylist()


def _without_state(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in q.EPISODE_STATE}


def whole_records(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """Episode rows (data, ...) with each data the whole record's JSON (``episode_format``): the
    projection's ``record`` and properties are the record's, whatever format the row keeps."""
    return [(full_data(r[0]), *r[1:]) for r in rows]


def projected_record(data: str) -> str:
    """An episode's ``record`` property as a projection holds it, from its row's data."""
    data = full_data(data)
    if '"index_status"' not in data and '"index_error"' not in data:
        return data
    rec = loads(data)
    return dumps(_without_state(rec)) if "index_status" in rec or "index_error" in rec else data


def agent_row(tenant_id: str, data: str) -> dict[str, Any]:
    """An (:Agent) node's properties from its agents row, as the Neo4j store keeps them."""
    a = loads(data)
    agent = {"id": a["id"], "tenant_id": tenant_id, "agent_role": a.get("agent_role", "")}
    return {**agent, "record": dumps(agent)}


def canvas_row(tenant_id: str, data: str) -> dict[str, Any]:
    c = loads(data)
    return {"tenant_id": tenant_id, "id": c["id"], "name": c.get("name"), "record": data}


def audit_row(tenant_id: str, data: str) -> dict[str, Any]:
    return {"tenant_id": tenant_id, **props_of(loads(data), ("id", *q.AUDIT_PROPS)), "record": data}


def feedback_row(tenant_id: str, data: str) -> dict[str, Any]:
    f = loads(data)
    return {"tenant_id": tenant_id, "id": f["id"], "episode_id": f["episode_id"], "category": f.get("feedback_category"),
            "score": f["feedback_score"], "created_at": f["created_at"], "record": data}


# The world part's source rows as read (undecoded): table -> key -> data. A refresh reads them
# again and compares, so only the rows that changed are decoded and reloaded.
WorldRows = dict[str, dict[Any, str]]


def read_world_rows(query: SqlQuery, tenant_id: str) -> WorldRows:
    out: WorldRows = {}
    for table, statement in sql.PROJECTION_WORLD_ROWS.items():
        rows = query(statement, (tenant_id,))
        out[table] = {r[0]: r[1] for r in rows} if statement.count(",") == 1 else {(r[0], r[1]): r[2] for r in rows}
    return out


def read_world_keys(query: SqlQuery, tenant_id: str, base: WorldRows, touched: Iterable[tuple[str, Any]]) -> WorldRows:
    """``base`` (the rows a projection was built from) with the rows ``touched`` ((table, key) as
    in WorldRows) read again: what read_world_rows would return when only those rows were written."""
    raw = {table: dict(rows) for table, rows in base.items()}
    for table, key in touched:
        rows = query(sql.PROJECTION_WORLD_ROW[table], (tenant_id, *(key if isinstance(key, tuple) else (key,))))
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
        add_row(nodes["Scene"], {"tenant_id": self.tenant_id, **props_of(s, ("id", *q.SCENE_PROPS)), "report": report,
                              "record": data})
        env = s.get("env_name")
        link(rels, "IN_ENV", "Scene", s["id"], "Environment", env)
        if s.get("episode_id") in episodes:
            link(rels, "FROM_EPISODE", "Scene", s["id"], "Episode", s["episode_id"])
        return env

    def node(self, nodes: Nodes, rels: Rels, env: str, data: str) -> None:
        n = loads(data)
        label = q.NODE_LABELS.get(n.get("kind", "entity"), "Entity")
        key = q.world_key(self.tenant_id, env, n["id"])
        self.index[(env, n["id"])] = (label, key)
        add_row(nodes[label], {"tenant_id": self.tenant_id, "env_name": env, "key": key,
                            **props_of(n, ("id", *q.NODE_PROPS)), "record": data})
        for sid in dict.fromkeys(n.get("source_scenes") or []):
            if sid in self.scenes:
                link(rels, "PRODUCED", "Scene", sid, label, key)

    def rule(self, nodes: Nodes, rels: Rels, env: str, data: str) -> None:
        r = loads(data)
        key = q.world_key(self.tenant_id, env, r["id"])
        add_row(nodes["Rule"], {"tenant_id": self.tenant_id, "env_name": env, "key": key,
                             **props_of(r, ("id", *q.RULE_PROPS)), "record": data})
        for nid in dict.fromkeys(r.get("linked_node_ids") or []):
            if (env, nid) in self.index:
                label, nkey = self.index[(env, nid)]
                link(rels, "CONCERNS", "Rule", key, label, nkey)
        for sid in dict.fromkeys(r.get("source_scenes") or []):
            if sid in self.scenes:
                link(rels, "PRODUCED", "Scene", sid, "Rule", key)

    def edge(self, rels: Rels, env: str, data: str) -> None:
        e = loads(data)
        relation = e.get("relation", "")
        rtype = q.WORLD_EDGE_TYPES.get(relation)
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
                 "id": e["id"], **props_of(e, q.edge_props(relation)), "record": data}
        link(rels, rtype, src[0], src[1], dst[0], dst[1], props)


@dataclass
class WorldPart:
    nodes: Nodes
    rels: Rels
    raw: WorldRows  # the rows it was built from
    world: _World


def load_world_part(raw: WorldRows, tenant_id: str, episodes: set[str]) -> WorldPart:
    nodes = empty_nodes(WORLD_NODE_TABLES)
    rels = empty_rels(WORLD_REL_TABLES)
    reports = raw["scene_reports"]
    envs: dict[str, dict[str, Any]] = {}
    world = _World(tenant_id, set(raw["scenes"]))
    for sid, data in raw["scenes"].items():
        env = world.scene(nodes, rels, data, reports.get(sid), episodes)
        envs.setdefault(env, {"tenant_id": tenant_id, "env_name": env})
    for env, data in raw["env_meta"].items():
        envs[env] = env_row(tenant_id, env, data)
    for row in envs.values():
        add_row(nodes["Environment"], row)
    world.envs = set(envs)
    for (env, _id), data in raw["world_nodes"].items():
        world.node(nodes, rels, env, data)
    for (env, _id), data in raw["world_rules"].items():
        world.rule(nodes, rels, env, data)
    for (env, _id), data in raw["world_edges"].items():
        world.edge(rels, env, data)
    return WorldPart(nodes, rels, raw, world)


def env_row(tenant_id: str, env: str, data: str) -> dict[str, Any]:
    meta = loads(data)
    return {"tenant_id": tenant_id, "env_name": env, "record": data,
            "graph_version": meta.get("graph_version"), "updated_at": meta.get("updated_at")}

