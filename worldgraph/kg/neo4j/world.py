"""The world part of the Neo4j store (``WorldStore``'s methods but the leases): views, merges, plans,
scenes; whole environments through the snapshot-import part it is given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from neo4j import ManagedTransaction

from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection
from worldgraph.kg.neo4j.leases import check_fence
from worldgraph.kg.neo4j.rows import by_id, decode, set_meta
from worldgraph.kg.neo4j.snapshot_import import Neo4jSnapshotImport
from worldgraph.kg.neo4j.world_writes import upsert_scenes, write_world
from worldgraph.kg.records import EdgeRecord, GraphView, MergePlan, MetaRecord, NodeRecord, RuleRecord, SceneRecord
from worldgraph.kg.store import Record, WorldStore

__all__ = ["Neo4jWorld"]


class Neo4jWorld(WorldStore):
    """The world-graph methods of Neo4jGraphStore but the leases (``neo4j.leases``), on ``db``;
    ``replace_world`` is ``snapshot_import``'s."""

    def __init__(self, db: Neo4jConnection, snapshot_import: Neo4jSnapshotImport) -> None:
        self.db = db
        self.snapshot_import = snapshot_import
        self._facts_ready = False  # q.FACT_SCHEMA ensured (before the first world write)

    def _ensure_fact_schema(self) -> None:
        """The FACT relationships' key constraint (q.FACT_SCHEMA), once per store object, before
        the first write that may hold a fact edge: MERGE seeks its index. Schema commands cannot
        share the write's transaction, so it runs before it."""
        if not self._facts_ready:
            self.db.create_schema(q.FACT_SCHEMA, q.AWAIT_INDEXES)
            self._facts_ready = True

    # ---------------------------------------------------------------- world graph
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        return self.db.read(lambda tx: _view(tx, tenant_id, env_name, node_ids, names))

    def world_records(self, tenant_id: str, env_name: str, ids: list[str]) -> GraphView:
        keys = [q.world_key(tenant_id, env_name, i) for i in dict.fromkeys(ids)]
        view = GraphView(tenant_id=tenant_id, env_name=env_name)

        def read(tx: ManagedTransaction) -> None:
            view.nodes = {r["id"]: cast(NodeRecord, r) for r in decode(tx.run(q.RECORD_NODES, keys=keys))}
            view.edges = {r["id"]: cast(EdgeRecord, r) for r in decode(tx.run(q.RECORD_EDGES, keys=keys))}
            view.rules = {r["id"]: cast(RuleRecord, r) for r in decode(tx.run(q.RECORD_RULES, keys=keys))}
        self.db.read(read)
        return view

    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        self._ensure_fact_schema()

        def work(tx: ManagedTransaction) -> MetaRecord | None:
            tx.run(q.LOCK_ENV, tenant_id=tenant_id, env_name=env_name).consume()
            check_fence(tx, tenant_id, fence)
            view = _view(tx, tenant_id, env_name, node_ids, names)
            plan = planner(view)
            return view.meta if plan is None else _apply_plan(tx, plan, view.meta)
        return self.db.write(work)

    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        recs = self.db.records(q.GET_SCENE_REPORT, tenant_id=tenant_id, id=scene_id)
        return recs[0] if recs else None

    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        self._ensure_fact_schema()

        def work(tx: ManagedTransaction) -> MetaRecord | None:
            tx.run(q.LOCK_ENV, tenant_id=plan.tenant_id, env_name=plan.env_name).consume()  # see q.upsert_nodes
            old = decode(tx.run(q.GET_META, tenant_id=plan.tenant_id, env_name=plan.env_name))
            return _apply_plan(tx, plan, cast(MetaRecord, old[0]) if old else None)
        return self.db.write(work)  # type: ignore[return-value]

    def upsert_scene(self, scene: SceneRecord) -> None:
        self.db.write(lambda tx: upsert_scenes(tx, scene["tenant_id"], [scene]))

    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        recs = self.db.records(q.GET_SCENE, tenant_id=tenant_id, id=scene_id)
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
            tx.run(q.CLAIM_SCENE, tenant_id=tenant_id, id=scene_id, record=dumps(scene)).consume()
            return True
        return self.db.write(work)

    def list_scenes(self, tenant_id: str | None = None, env_name: str | None = None,
                    statuses: list[str] | None = None) -> list[SceneRecord]:
        recs = self.db.records(q.LIST_SCENES, tenant_id=tenant_id, env_name=env_name, statuses=statuses or None)
        return cast(list[SceneRecord], recs)

    def environments(self, tenant_id: str) -> list[str]:
        return sorted(self.db.read(lambda tx: [r["env_name"] for r in tx.run(q.ENVIRONMENTS, tenant_id=tenant_id)]))

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        params = {"tenant_id": tenant_id, "env_name": env_name, "prefix": q.env_prefix(tenant_id, env_name)}

        def work(tx: ManagedTransaction) -> dict[str, Any]:
            out: dict[str, Any] = {key: by_id(decode(tx.run(query, params))) for key, query in (
                ("nodes", q.ENV_NODES), ("edges", q.ENV_EDGES), ("rules", q.ENV_RULES), ("scenes", q.ENV_SCENES))}
            meta = decode(tx.run(q.GET_META, params))
            out["meta"] = meta[0] if meta else None
            return out
        return self.db.read(work)

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        self._ensure_fact_schema()
        self.snapshot_import.replace_world(tenant_id, env_name, graph)


def _view(tx: ManagedTransaction, tenant_id: str, env_name: str, node_ids: list[str], names: Any) -> GraphView:
    """``load_view`` inside a transaction (the merge's write transaction, or a read)."""
    ids = list(dict.fromkeys(node_ids))
    if names:
        found = tx.run(q.VIEW_IDS_BY_NAME, tenant_id=tenant_id, env_name=env_name, names=list(dict.fromkeys(names)))
        ids = list(dict.fromkeys([*ids, *(r["id"] for r in found)]))
    params = {"tenant_id": tenant_id, "env_name": env_name, "ids": ids,
              "keys": [q.world_key(tenant_id, env_name, i) for i in ids], "prefix": q.env_prefix(tenant_id, env_name)}
    view = GraphView(tenant_id=tenant_id, env_name=env_name)
    view.nodes = {r["id"]: cast(NodeRecord, r) for r in decode(tx.run(q.VIEW_NODES, params))}
    view.edges = {r["id"]: cast(EdgeRecord, r) for r in decode(tx.run(q.VIEW_EDGES, params))}
    for r in decode(tx.run(q.VIEW_ANCESTOR_EDGES, params)):
        view.edges.setdefault(r["id"], cast(EdgeRecord, r))
    children = sorted({e["dst_id"] for e in view.edges.values() if e.get("relation") == "containment"} - set(ids))
    if children:
        keys = [q.world_key(tenant_id, env_name, c) for c in children]
        for r in decode(tx.run(q.VIEW_CONTAINMENT_INTO, {**params, "keys": keys})):
            view.edges.setdefault(r["id"], cast(EdgeRecord, r))
    view.rules = {r["id"]: cast(RuleRecord, r) for r in decode(tx.run(q.ENV_RULES, params))}
    meta = decode(tx.run(q.GET_META, params))
    view.meta = cast(MetaRecord, meta[0]) if meta else None
    return view


def _apply_plan(tx: ManagedTransaction, plan: MergePlan, old_meta: MetaRecord | None) -> MetaRecord | None:
    t, env = plan.tenant_id, plan.env_name
    scenes = [plan.scene] if plan.scene is not None else []
    if plan.meta is None and plan.size() == 0:  # nothing merged: only the scene's status moves
        upsert_scenes(tx, t, scenes)
        meta: MetaRecord | None = old_meta
    else:
        # records go to the store as plain JSON dicts
        written = write_world(tx, t, env, scenes, cast(list[Record], plan.nodes),
                                    cast(list[Record], plan.rules), cast(list[Record], plan.edges))
        meta = dict(plan.meta or {})  # type: ignore[assignment]
        meta.update({"tenant_id": t, "env_name": env})  # type: ignore[union-attr]
        prefix = q.env_prefix(t, env)
        if written.fresh:
            # The environment had no world node, so no edge either (see write_world): the
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
        set_meta(tx, t, env, meta)  # type: ignore[arg-type]
    if plan.scene is not None and plan.report is not None:
        tx.run(q.SET_SCENE_REPORT, tenant_id=t, id=plan.scene["id"], report=dumps(plan.report)).consume()
    return meta
