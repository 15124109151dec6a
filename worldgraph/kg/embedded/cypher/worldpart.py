"""A world write applied to a projection row by row (``worldpart.update_world``): the world rows
that changed, and the relationships touching them, rewritten in place or deleted and created
again, instead of the whole world part reloaded."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from worldgraph.errors import CypherQueryError
from worldgraph.kg.codec import loads
from worldgraph.kg.embedded.cypher.load import WorldRows, env_row
from worldgraph.kg.embedded.cypher.model import INCREMENTAL_MAX, NODE_TABLES, empty_nodes, empty_rels
from worldgraph.kg.neo4j import schema as q

if TYPE_CHECKING:
    from worldgraph.kg.embedded.cypher.projection import Projection

__all__ = ["update_world"]

EDGE_TYPES = tuple(q.WORLD_EDGE_TYPES.values())  # the world edges' relationship tables


def update_world(proj: Projection, raw: WorldRows, read_edges: Callable[[str, list[str]], list[tuple[str, str]]]) -> bool:
    """Bring the world part to ``raw`` (the world rows read now) by reloading only the rows
    that changed and the relationships that touch them; False (nothing changed) when the
    change is not of that kind (environments come or go, too many rows, a property changes
    type): the caller then reloads the whole world part. ``read_edges(env, ids)``:
    the (id, data) of the env's edges from or to those node ids."""
    if proj.world is None or proj.episodes is None:  # opened from a file: its rows are not at hand
        return False
    old = proj.world.raw
    world = proj.world.world
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
    # A row still there whose label and links stay as they were (the same kind, sources, linked
    # nodes, ends) is updated in place; the rest is deleted and created again with the
    # relationships touching it (a node's edges, the rules linked to it).
    same = _unlinked_changes(old, raw, changed, scenes)
    moved = set(changed["world_nodes"]) - same["world_nodes"]
    rules = set(changed["world_rules"]) - same["world_rules"]
    edges = set(changed["world_edges"]) - same["world_edges"]
    for sid in scenes:  # what links to a scene names its id: those rows are reloaded with it
        moved |= {k for k, data in raw["world_nodes"].items() if sid in data}
        rules |= {k for k, data in raw["world_rules"].items() if sid in data}
        edges |= {k for k, data in raw["world_edges"].items() if sid in data}
    by_env: dict[str, list[str]] = {}
    for env, nid in moved:
        by_env.setdefault(env, []).append(nid)
    for env, ids in by_env.items():
        edges |= {(env, eid) for eid, _ in read_edges(env, ids)}
    same["world_nodes"] -= moved
    same["world_edges"] -= edges
    # an edge updated in place keeps its ends: neither may be a node that is replaced
    same["world_edges"] = {k for k in same["world_edges"] if not _touches(loads(raw["world_edges"][k]), k[0], moved)}
    edges |= {k for k in set(changed["world_edges"]) - edges if k not in same["world_edges"]}
    if moved:
        moved_ids = {nid for _env, nid in moved}
        for key, data in raw["world_rules"].items():
            if any(nid in data for nid in moved_ids):  # a cheap test on the text first
                linked = loads(data).get("linked_node_ids") or []
                if any((key[0], nid) in moved for nid in linked):
                    rules.add(key)
    t = proj.tenant_id
    # the changed edges as they are in the projection: (type, from label) -> [(from pk, key)]
    old_edges: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for env, eid in edges:
        if (env, eid) in old["world_edges"]:
            e = loads(old["world_edges"][(env, eid)])
            rtype = q.WORLD_EDGE_TYPES.get(e.get("relation", ""))
            src = world.index.get((env, e.get("src_id")))
            if src is None and rtype == "EPISODIC" and e.get("src_id") in world.scenes:
                src = ("Scene", e["src_id"])
            if rtype is not None and src is not None:
                old_edges.setdefault((rtype, src[0]), []).append({"a": src[1], "key": q.world_key(t, env, eid)})
    with proj.refreshing():
        try:
            # each from its source node, found by its key, then among that node's relationships
            # (a scan of the whole relationship table took 20-45 ms per type at 10k edges)
            for (rtype, label), erows in old_edges.items():
                proj.conn.execute(f"MATCH (a:{label})-[e:{rtype}]->() WHERE a.{NODE_TABLES[label][0]} IN $a "
                                  "AND e.key IN $keys DELETE e",
                                  {"a": list({r["a"] for r in erows}), "keys": [r["key"] for r in erows]})
            proj.delete_nodes("Rule", [q.world_key(t, env, rid) for env, rid in rules])
            proj.delete_nodes("Scene", list(scenes))
            world.scenes = set(raw["scenes"])
            gone: dict[str, list[str]] = {}
            for k in moved:
                if k in world.index:
                    label, key = world.index.pop(k)
                    gone.setdefault(label, []).append(key)
            for label, keys in gone.items():
                proj.delete_nodes(label, keys)
            nodes = empty_nodes(("Scene", "Entity", "State", "Rule"))
            rels = empty_rels(("IN_ENV", "FROM_EPISODE", "PRODUCED", "CONCERNS", *EDGE_TYPES))
            for sid in scenes:
                if sid in raw["scenes"]:
                    world.scene(nodes, rels, raw["scenes"][sid], raw["scene_reports"].get(sid), proj.episodes)
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
                proj.insert_nodes(label, columns)
            for rtype, by_pair in rels.items():
                for pair, columns in by_pair.items():
                    proj.insert_rels(rtype, pair, columns)
            # in place: their links are as they were (the rows the loader makes for them are dropped)
            nodes = empty_nodes(("Entity", "State", "Rule"))
            rels = empty_rels(EDGE_TYPES)
            unused = empty_rels(("PRODUCED", "CONCERNS"))
            for k in same["world_nodes"]:
                world.node(nodes, unused, k[0], raw["world_nodes"][k])
            for k in same["world_rules"] - rules:
                world.rule(nodes, unused, k[0], raw["world_rules"][k])
            for k in same["world_edges"]:
                world.edge(rels, k[0], raw["world_edges"][k])
            for label, columns in nodes.items():
                proj.update_nodes(label, columns)
            for rtype, by_pair in rels.items():
                for pair, columns in by_pair.items():
                    proj.update_rels(rtype, pair, columns)
            for env in envs:
                row = env_row(t, env, raw["env_meta"][env])
                proj.conn.execute("MATCH (e:Environment {env_name: $env_name}) SET e.record = $record, "
                                  "e.graph_version = $graph_version, e.updated_at = $updated_at",
                                  {k: v for k, v in row.items() if k != "tenant_id"})
        except (RuntimeError, CypherQueryError):
            # half applied: the whole world part is reloaded from the store (the caller)
            return False
    proj.world.raw = raw
    return True



def _unlinked_changes(old: WorldRows, raw: WorldRows, changed: dict[str, set[Any]], scenes: set[str]) \
        -> dict[str, set[Any]]:
    """Of the changed world nodes, rules and edges, those present before and after whose change
    leaves what the projection derives links from as it was: a node's kind and source scenes, a
    rule's linked nodes and source scenes, an edge's relation and ends; and that name no changed
    scene. (A rule or edge may still be replaced when a node it links is: the caller checks.)"""
    links = {"world_nodes": ("kind", "source_scenes"), "world_rules": ("linked_node_ids", "source_scenes"),
             "world_edges": ("relation", "src_id", "dst_id")}
    out: dict[str, set[Any]] = {}
    for table, fields in links.items():
        keep = set()
        for k in changed[table]:
            if k not in old[table] or k not in raw[table] or any(sid in raw[table][k] or sid in old[table][k]
                                                                for sid in scenes):
                continue
            a, b = loads(old[table][k]), loads(raw[table][k])
            if all(a.get(f) == b.get(f) for f in fields):
                keep.add(k)
        out[table] = keep
    return out


def _touches(edge: dict[str, Any], env: str, moved: set[tuple[str, str]]) -> bool:
    return (env, edge.get("src_id")) in moved or (env, edge.get("dst_id")) in moved
