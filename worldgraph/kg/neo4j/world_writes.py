"""Writing world records on Neo4j inside a caller's transaction: what a merge (``neo4j.world``) and
a snapshot import (``neo4j.snapshot_import``) both write with."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, cast

from neo4j import ManagedTransaction, Result

from worldgraph.errors import InvalidInputError
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.rows import BATCH, chunks, column, dedupe, run_batched, unwind_row
from worldgraph.kg.records import SceneRecord
from worldgraph.kg.store import Record

__all__ = ["Written", "upsert_scenes", "write_world"]


def write_world(tx: ManagedTransaction, t: str, env: str, scenes: list[SceneRecord],
                nodes: Iterable[Record], rules: Iterable[Record], edges: Iterable[Record],
                fresh: bool | None = None) -> Written:
    """Upsert scenes, nodes, rules, edges and the scene links, in this order (ends first);
    returns whether the nodes and edges were created into an environment without any, and
    how many.

    ``fresh``: the nodes and edges are known to be new (the caller emptied the environment);
    None asks the database (``q.ENV_HAS_NODES``): an environment without world nodes gets its
    nodes and node-to-node edges by CREATE (``q.create_nodes``), not MERGE. The caller holds
    the environment's lock (``q.LOCK_ENV``), so nobody adds nodes in between."""
    params = {"tenant_id": t, "env_name": env}
    upsert_scenes(tx, t, scenes)
    node_list, rule_list, edge_list = dedupe(nodes), dedupe(rules), dedupe(edges)
    prefix = q.env_prefix(t, env)
    esc = q.escape_key
    if fresh is None and (node_list or edge_list):
        row = tx.run(q.ENV_HAS_NODES, prefix=prefix).single()
        fresh = row is not None and not row["has_nodes"]

    def key(id: Any) -> str | None:  # the world key of a record of this env (None stays None)
        return None if id is None else prefix + esc(id)
    scene_ids = list(dict.fromkeys(s for n in node_list for s in n.get("source_scenes") or []))
    for kind in q.NODE_LABELS:  # with their PRODUCED links
        rows = [{**unwind_row(n, q.NODE_PROPS), "key": key(n["id"]),
                 "scenes": list(dict.fromkeys(n.get("source_scenes") or []))}
                for n in node_list if n.get("kind", "entity") == kind]
        query = q.create_nodes(kind) if fresh else q.upsert_nodes(kind)
        run_batched(tx, query, rows, scene_ids=scene_ids, **params)
    unknown = [n["id"] for n in node_list if n.get("kind", "entity") not in q.NODE_LABELS]
    if unknown:
        raise InvalidInputError("nodes[].kind", f"must be one of {sorted(q.NODE_LABELS)}; nodes {unknown[:5]}")
    rule_rows = [{**unwind_row(r, q.RULE_PROPS), "key": key(r["id"]),
                  "linked": [key(i) for i in dict.fromkeys(r.get("linked_node_ids") or [])]} for r in rule_list]
    run_batched(tx, q.UPSERT_RULES, rule_rows, **params)
    bad = [e["id"] for e in edge_list if e.get("relation") not in q.WORLD_EDGE_TYPES]
    if bad:
        raise InvalidInputError("edges[].relation", f"must be one of {list(q.WORLD_EDGE_TYPES)}; edges {bad[:5]}")
    sent: list[tuple[str, list[dict[str, Any]], list[Result]]] = []
    for relation in q.WORLD_EDGE_TYPES:
        rows = [{**unwind_row(e, q.edge_props(relation)), "key": key(e["id"]), "src": key(e.get("src_id")),
                 "dst": key(e.get("dst_id")), "src_id": e.get("src_id"), "dst_id": e.get("dst_id")}
                for e in edge_list if e.get("relation") == relation]
        query = q.create_edges(relation) if fresh and relation != "episodic" else q.upsert_edges(relation)
        sent.append((relation, rows, run_batched(tx, query, rows, **params)))
    run_batched(tx, q.LINK_SCENE_RULES, _scene_links(rule_list, key), **params)
    missing: list[str] = []
    for relation, rows, results in sent:
        if sum(column(results, "written")) < len(rows):  # rare: find which, then roll back
            missing += column(run_batched(tx, q.edges_missing_ends(relation), rows, **params), "id")
    if missing:
        raise InvalidInputError(
            "edges[].src_id/dst_id",
            f"every edge must join existing nodes (or a scene) of env {env!r}; these do not: {missing[:5]}")
    return Written(bool(fresh), len(node_list), len(edge_list))


class Written(NamedTuple):
    """What ``write_world`` wrote: ``fresh`` (created into an environment without world nodes:
    the environment now holds exactly these nodes and edges) and how many."""

    fresh: bool
    nodes: int
    edges: int


def upsert_scenes(tx: ManagedTransaction, tenant_id: str, scenes: list[SceneRecord]) -> None:
    rows = [{**unwind_row(s, q.SCENE_PROPS), "env": s.get("env_name"), "episode": s.get("episode_id")}
            for s in dedupe(cast(list[Record], scenes))]
    run_batched(tx, q.UPSERT_SCENES, rows, tenant_id=tenant_id)


def _scene_links(records: list[Record], key: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """One row per scene: its id and the keys of the records that name it in source_scenes,
    in chunks of BATCH keys (so one scene is looked up once per chunk, not once per record)."""
    by_scene: dict[str, list[Any]] = {}
    for rec in records:
        for s in dict.fromkeys(rec.get("source_scenes") or []):
            by_scene.setdefault(s, []).append(key(rec["id"]))
    return [{"scene_id": s, "keys": chunk} for s, keys in by_scene.items() for chunk in chunks(keys, BATCH)]
