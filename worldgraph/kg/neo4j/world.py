"""The world-graph side of the Neo4j store: views, merges, plans, scenes, whole environments."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, cast

from neo4j import ManagedTransaction, Result

from worldgraph.errors import InvalidInputError
from worldgraph.kg.codec import loads
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.base import Neo4jBase
from worldgraph.kg.neo4j.leases import check_fence
from worldgraph.kg.neo4j.rows import BATCH, _by_id, _chunks, _column, _decode, _dedupe, _dumps, _row, _run_batched, _set_meta
from worldgraph.kg.neo4j.snapshot_import import graph_size, old_records, replace_world_in_batches
from worldgraph.kg.records import EdgeRecord, GraphView, MergePlan, MetaRecord, NodeRecord, RuleRecord, SceneRecord
from worldgraph.kg.store import Record, WorldStore


class Neo4jWorldStore(Neo4jBase, WorldStore):
    """The world-graph methods of Neo4jGraphStore (see its module for the transaction rules)."""

    # ---------------------------------------------------------------- world graph
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        return self._read(lambda tx: _view(tx, tenant_id, env_name, node_ids, names))

    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        def work(tx: ManagedTransaction) -> MetaRecord | None:
            tx.run(q.LOCK_ENV, tenant_id=tenant_id, env_name=env_name).consume()
            check_fence(tx, tenant_id, fence)
            view = _view(tx, tenant_id, env_name, node_ids, names)
            plan = planner(view)
            return view.meta if plan is None else self._apply_plan(tx, plan, view.meta)
        return self._write(work)

    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        recs = self._records(q.GET_SCENE_REPORT, tenant_id=tenant_id, id=scene_id)
        return recs[0] if recs else None

    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        def work(tx: ManagedTransaction) -> MetaRecord | None:
            tx.run(q.LOCK_ENV, tenant_id=plan.tenant_id, env_name=plan.env_name).consume()  # see q.upsert_nodes
            old = _decode(tx.run(q.GET_META, tenant_id=plan.tenant_id, env_name=plan.env_name))
            return self._apply_plan(tx, plan, cast(MetaRecord, old[0]) if old else None)
        return self._write(work)  # type: ignore[return-value]

    def _apply_plan(self, tx: ManagedTransaction, plan: MergePlan, old_meta: MetaRecord | None) -> MetaRecord | None:
        t, env = plan.tenant_id, plan.env_name
        scenes = [plan.scene] if plan.scene is not None else []
        if plan.meta is None and plan.size() == 0:  # nothing merged: only the scene's status moves
            _upsert_scenes(tx, t, scenes)
            meta: MetaRecord | None = old_meta
        else:
            # records go to the store as plain JSON dicts
            written = self._write_world(tx, t, env, scenes, cast(list[Record], plan.nodes),
                                        cast(list[Record], plan.rules), cast(list[Record], plan.edges))
            meta = dict(plan.meta or {})  # type: ignore[assignment]
            meta.update({"tenant_id": t, "env_name": env})  # type: ignore[union-attr]
            prefix = q.env_prefix(t, env)
            if written.fresh:
                # The environment had no world node, so no edge either (see _write_world): the
                # plan's nodes and edges are all it has. Only rules and scenes are counted; the
                # full count reads an index entry per node and edge (~5 % of a 10k-element plan).
                row = tx.run(q.ENV_RULE_SCENE_COUNTS, tenant_id=t, env_name=env, prefix=prefix).single()
                assert row is not None
                counts = {"nodes": written.nodes, "edges": written.edges, "rules": int(row["rules"]),
                          "scenes": int(row["scenes"])}
            else:
                full = tx.run(q.ENV_COUNTS, tenant_id=t, env_name=env, prefix=prefix).single()
                assert full is not None
                counts = {k: int(full[k]) for k in ("nodes", "edges", "rules", "scenes")}
            meta["counts"] = counts  # type: ignore[index]
            _set_meta(tx, t, env, meta)  # type: ignore[arg-type]
        if plan.scene is not None and plan.report is not None:
            tx.run(q.SET_SCENE_REPORT, tenant_id=t, id=plan.scene["id"], report=_dumps(plan.report)).consume()
        return meta

    @staticmethod
    def _write_world(tx: ManagedTransaction, t: str, env: str, scenes: list[SceneRecord],
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
        _upsert_scenes(tx, t, scenes)
        node_list, rule_list, edge_list = _dedupe(nodes), _dedupe(rules), _dedupe(edges)
        prefix = q.env_prefix(t, env)
        esc = q._esc
        if fresh is None and (node_list or edge_list):
            row = tx.run(q.ENV_HAS_NODES, prefix=prefix).single()
            fresh = row is not None and not row["has_nodes"]

        def key(id: Any) -> str | None:  # the world key of a record of this env (None stays None)
            return None if id is None else prefix + esc(id)
        scene_ids = list(dict.fromkeys(s for n in node_list for s in n.get("source_scenes") or []))
        for kind in q.NODE_LABELS:  # with their PRODUCED links
            rows = [{**_row(n, q.NODE_PROPS), "key": key(n["id"]),
                     "scenes": list(dict.fromkeys(n.get("source_scenes") or []))}
                    for n in node_list if n.get("kind", "entity") == kind]
            query = q.create_nodes(kind) if fresh else q.upsert_nodes(kind)
            _run_batched(tx, query, rows, scene_ids=scene_ids, **params)
        unknown = [n["id"] for n in node_list if n.get("kind", "entity") not in q.NODE_LABELS]
        if unknown:
            raise InvalidInputError("nodes[].kind", f"must be one of {sorted(q.NODE_LABELS)}; nodes {unknown[:5]}")
        rule_rows = [{**_row(r, q.RULE_PROPS), "key": key(r["id"]),
                      "linked": [key(i) for i in dict.fromkeys(r.get("linked_node_ids") or [])]} for r in rule_list]
        _run_batched(tx, q.UPSERT_RULES, rule_rows, **params)
        bad = [e["id"] for e in edge_list if e.get("relation") not in q.EDGE_TYPES]
        if bad:
            raise InvalidInputError("edges[].relation", f"must be one of {list(q.EDGE_TYPES)}; edges {bad[:5]}")
        sent: list[tuple[str, list[dict[str, Any]], list[Result]]] = []
        for relation in q.EDGE_TYPES:
            rows = [{**_row(e, q.EDGE_PROPS), "key": key(e["id"]), "src": key(e.get("src_id")),
                     "dst": key(e.get("dst_id")), "src_id": e.get("src_id"), "dst_id": e.get("dst_id")}
                    for e in edge_list if e.get("relation") == relation]
            query = q.create_edges(relation) if fresh and relation != "episodic" else q.upsert_edges(relation)
            sent.append((relation, rows, _run_batched(tx, query, rows, **params)))
        _run_batched(tx, q.LINK_SCENE_RULES, _scene_links(rule_list, key), **params)
        missing: list[str] = []
        for relation, rows, results in sent:
            if sum(_column(results, "written")) < len(rows):  # rare: find which, then roll back
                missing += _column(_run_batched(tx, q.edges_missing_ends(relation), rows, **params), "id")
        if missing:
            raise InvalidInputError(
                "edges[].src_id/dst_id",
                f"every edge must join existing nodes (or a scene) of env {env!r}; these do not: {missing[:5]}")
        return Written(bool(fresh), len(node_list), len(edge_list))

    def upsert_scene(self, scene: SceneRecord) -> None:
        self._write(lambda tx: _upsert_scenes(tx, scene["tenant_id"], [scene]))

    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        recs = self._records(q.GET_SCENE, tenant_id=tenant_id, id=scene_id)
        return cast(SceneRecord, recs[0]) if recs else None

    def claim_scene(self, tenant_id: str, scene_id: str) -> bool:
        def work(tx: ManagedTransaction) -> bool:
            row = tx.run(q.LOCK_SCENE, tenant_id=tenant_id, id=scene_id).single()
            if row is None:
                return False
            if row["status"] not in ("pending", "failed"):
                tx.run(q.UNLOCK_SCENE, tenant_id=tenant_id, id=scene_id).consume()
                return False
            scene = loads(row["record"])
            scene["status"] = "running"
            tx.run(q.CLAIM_SCENE, tenant_id=tenant_id, id=scene_id, record=_dumps(scene)).consume()
            return True
        return self._write(work)

    def list_scenes(self, tenant_id: str | None = None, env_name: str | None = None,
                    statuses: list[str] | None = None) -> list[SceneRecord]:
        recs = self._records(q.LIST_SCENES, tenant_id=tenant_id, env_name=env_name, statuses=statuses or None)
        return cast(list[SceneRecord], recs)

    def environments(self, tenant_id: str) -> list[str]:
        return sorted(self._read(lambda tx: [r["env_name"] for r in tx.run(q.ENVIRONMENTS, tenant_id=tenant_id)]))

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        params = {"tenant_id": tenant_id, "env_name": env_name, "prefix": q.env_prefix(tenant_id, env_name)}

        def work(tx: ManagedTransaction) -> dict[str, Any]:
            out: dict[str, Any] = {key: _by_id(_decode(tx.run(query, params))) for key, query in (
                ("nodes", q.ENV_NODES), ("edges", q.ENV_EDGES), ("rules", q.ENV_RULES), ("scenes", q.ENV_SCENES))}
            meta = _decode(tx.run(q.GET_META, params))
            out["meta"] = meta[0] if meta else None
            return out
        return self._read(work)

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        if graph_size(graph) + old_records(self, tenant_id, env_name, self.import_batch) > self.import_batch:
            replace_world_in_batches(self, tenant_id, env_name, graph, self.import_batch)  # bounded transactions
            return

        def work(tx: ManagedTransaction) -> None:
            tx.run(q.LOCK_ENV, tenant_id=tenant_id, env_name=env_name).consume()  # see q.upsert_nodes
            tx.run(q.DELETE_ENV, tenant_id=tenant_id, env_name=env_name,
                   prefix=q.env_prefix(tenant_id, env_name)).consume()
            self._write_world(tx, tenant_id, env_name, list(graph.get("scenes", [])), graph.get("nodes", []),
                              graph.get("rules", []), graph.get("edges", []), fresh=True)
            if graph.get("meta") is not None:
                _set_meta(tx, tenant_id, env_name, graph["meta"])
        self._write(work)


class Written(NamedTuple):
    """What ``_write_world`` wrote: ``fresh`` (created into an environment without world nodes:
    the environment now holds exactly these nodes and edges) and how many."""

    fresh: bool
    nodes: int
    edges: int


def _upsert_scenes(tx: ManagedTransaction, tenant_id: str, scenes: list[SceneRecord]) -> None:
    rows = [{**_row(s, q.SCENE_PROPS), "env": s.get("env_name"), "episode": s.get("episode_id")}
            for s in _dedupe(cast(list[Record], scenes))]
    _run_batched(tx, q.UPSERT_SCENES, rows, tenant_id=tenant_id)


def _scene_links(records: list[Record], key: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """One row per scene: its id and the keys of the records that name it in source_scenes,
    in chunks of BATCH keys (so one scene is looked up once per chunk, not once per record)."""
    by_scene: dict[str, list[Any]] = {}
    for rec in records:
        for s in dict.fromkeys(rec.get("source_scenes") or []):
            by_scene.setdefault(s, []).append(key(rec["id"]))
    return [{"scene_id": s, "keys": chunk} for s, keys in by_scene.items() for chunk in _chunks(keys, BATCH)]


def _view(tx: ManagedTransaction, tenant_id: str, env_name: str, node_ids: list[str], names: Any) -> GraphView:
    """``load_view`` inside a transaction (the merge's write transaction, or a read)."""
    ids = list(dict.fromkeys(node_ids))
    if names:
        found = tx.run(q.VIEW_IDS_BY_NAME, tenant_id=tenant_id, env_name=env_name, names=list(dict.fromkeys(names)))
        ids = list(dict.fromkeys([*ids, *(r["id"] for r in found)]))
    params = {"tenant_id": tenant_id, "env_name": env_name, "ids": ids,
              "keys": [q.world_key(tenant_id, env_name, i) for i in ids], "prefix": q.env_prefix(tenant_id, env_name)}
    view = GraphView(tenant_id=tenant_id, env_name=env_name)
    view.nodes = {r["id"]: cast(NodeRecord, r) for r in _decode(tx.run(q.VIEW_NODES, params))}
    view.edges = {r["id"]: cast(EdgeRecord, r) for r in _decode(tx.run(q.VIEW_EDGES, params))}
    for r in _decode(tx.run(q.VIEW_ANCESTOR_EDGES, params)):
        view.edges.setdefault(r["id"], cast(EdgeRecord, r))
    children = sorted({e["dst_id"] for e in view.edges.values() if e.get("relation") == "containment"} - set(ids))
    if children:
        keys = [q.world_key(tenant_id, env_name, c) for c in children]
        for r in _decode(tx.run(q.VIEW_CONTAINMENT_INTO, {**params, "keys": keys})):
            view.edges.setdefault(r["id"], cast(EdgeRecord, r))
    view.rules = {r["id"]: cast(RuleRecord, r) for r in _decode(tx.run(q.ENV_RULES, params))}
    meta = _decode(tx.run(q.GET_META, params))
    view.meta = cast(MetaRecord, meta[0]) if meta else None
    return view
