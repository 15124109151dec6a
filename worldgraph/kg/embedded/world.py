"""The world part of the embedded store (``WorldStore``'s methods but the leases): nodes, edges,
rules, scenes, reports and meta of each environment, merged in one IMMEDIATE transaction (the
environment's write lock), on the shared connection."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from worldgraph.gcpause import gc_paused
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.connection import SqliteConnection
from worldgraph.kg.embedded.leases import check_fence
from worldgraph.kg.embedded.scenes import write_scene
from worldgraph.kg.embedded.sql import chunks
from worldgraph.kg.records import GraphView, MergePlan, MetaRecord, SceneRecord
from worldgraph.kg.store import Record, WorldStore

__all__ = ["SqliteWorld", "env_counts"]


class SqliteWorld(WorldStore):
    """Every WorldStore method of EmbeddedGraphStore but the leases (``SqliteSceneLeases``), on ``db``."""

    def __init__(self, db: SqliteConnection) -> None:
        self.db = db

    # ---------------------------------------------------------------- world graph
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        view = GraphView(tenant_id=tenant_id, env_name=env_name)
        ids = list(dict.fromkeys(node_ids))
        for chunk in chunks(list(dict.fromkeys(names))):
            ids += [r[0] for r in self.db.query(sql.node_ids_by_name(len(chunk)), [tenant_id, env_name, *chunk])]
        ids = list(dict.fromkeys(ids))

        def either(table: str, col_a: str, col_b: str, chunk: list[str], into: dict[str, Any]) -> None:
            """Rows of ``table`` whose ``col_a`` or ``col_b`` is in ``chunk``, each kept once."""
            for rid, d in self.db.query(sql.rows_where_either(table, col_a, col_b, len(chunk)),
                                        [tenant_id, env_name, *chunk, tenant_id, env_name, *chunk]):
                if rid not in into:
                    into[rid] = loads(d)

        for chunk in chunks(ids):
            # the nodes asked for, and the states of those that are entities (a new state closes them)
            either("world_nodes", "id", "json_extract(data, '$.entity_id')", chunk, view.nodes)
            either("world_edges", "src_id", "dst_id", chunk, view.edges)
            # the current containment chain above them (the merge refuses containment cycles)
            for rid, d in self.db.query(sql.containment_above(len(chunk)),
                                        [tenant_id, env_name, *chunk, tenant_id, env_name, tenant_id, env_name]):
                if rid not in view.edges:
                    view.edges[rid] = loads(d)
        # every containment edge (closed ones too) into a child of the containment edges loaded:
        # the merge recomputes a child's parents on the timeline from all of them (a retracted
        # container's contents, a cycle broken on the chain above)
        children = {e.get("dst_id") for e in view.edges.values() if e.get("relation") == "containment"} - set(ids)
        for chunk in chunks(sorted(c for c in children if isinstance(c, str))):
            for rid, d in self.db.query(sql.containment_into(len(chunk)), [tenant_id, env_name, *chunk]):
                if rid not in view.edges:
                    view.edges[rid] = loads(d)
        for (d,) in self.db.query(sql.ENV_RULES, (tenant_id, env_name)):
            rec = loads(d)
            view.rules[rec["id"]] = rec
        view.meta = self.meta(tenant_id, env_name)
        return view

    def world_records(self, tenant_id: str, env_name: str, ids: list[str]) -> GraphView:
        view = GraphView(tenant_id=tenant_id, env_name=env_name)
        for chunk in chunks(list(dict.fromkeys(ids))):
            for table, into in (("world_nodes", view.nodes), ("world_edges", view.edges), ("world_rules", view.rules)):
                for rid, d in self.db.query(sql.rows_by_id(table, len(chunk)), [tenant_id, env_name, *chunk]):
                    into[rid] = loads(d)
        return view

    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        # BEGIN IMMEDIATE takes the database's write lock first: the view is read, planned and
        # written while no other process or thread can write, so no update is lost.
        with self.db.transaction() as cur:
            check_fence(cur, tenant_id, fence)
            view = self.load_view(tenant_id, env_name, node_ids, names)
            plan = planner(view)
            return view.meta if plan is None else _apply_plan(cur, plan, view.meta)

    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        rows = self.db.query(sql.GET_SCENE_REPORT, (tenant_id, scene_id))
        return loads(rows[0][0]) if rows else None

    def meta(self, tenant_id: str, env_name: str) -> MetaRecord | None:
        """The environment's meta record, None before its first merge."""
        rows = self.db.query(sql.GET_META, (tenant_id, env_name))
        return loads(rows[0][0]) if rows else None

    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        with self.db.transaction() as cur:
            return _apply_plan(cur, plan, self.meta(plan.tenant_id, plan.env_name))  # type: ignore[return-value]

    def upsert_scene(self, scene: SceneRecord) -> None:
        with self.db.transaction() as cur:
            write_scene(cur, scene)

    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        rows = self.db.query(sql.GET_SCENE, (tenant_id, scene_id))
        return loads(rows[0][0]) if rows else None

    def claim_scene(self, tenant_id: str, scene_id: str) -> bool:
        with self.db.transaction() as cur:
            row = cur.execute(sql.CLAIMABLE_SCENE, (tenant_id, scene_id)).fetchone()
            if row is None:
                return False
            scene = loads(row[0])
            scene["status"] = "running"
            cur.execute(sql.SET_SCENE_RUNNING, (dumps(scene), tenant_id, scene_id))
            return True

    def list_scenes(self, tenant_id: str | None = None, env_name: str | None = None,
                    statuses: list[str] | None = None) -> list[SceneRecord]:
        params = [p for p in (tenant_id, env_name) if p is not None] + list(statuses or [])
        statement = sql.list_scenes(tenant_id is not None, env_name is not None, len(statuses or []))
        return [loads(d) for (d,) in self.db.query(statement, params)]

    def environments(self, tenant_id: str) -> list[str]:
        return [r[0] for r in self.db.query(sql.ENVIRONMENTS, (tenant_id, tenant_id))]

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        def load(table: str) -> list[Record]:
            rows = self.db.query(sql.records_of_env(table), (tenant_id, env_name))
            with gc_paused():  # the records are acyclic; see gc_paused
                return [loads(d) for (d,) in rows]

        return {"nodes": load("world_nodes"), "edges": load("world_edges"), "rules": load("world_rules"),
                "scenes": load("scenes"), "meta": self.meta(tenant_id, env_name)}

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        t, env = tenant_id, env_name
        with self.db.transaction() as cur:
            for table in ("world_nodes", "world_edges", "world_rules", "scene_links", "scenes", "scene_reports",
                          "env_meta"):
                cur.execute(sql.delete_in_env(table), (t, env))
            cur.executemany(sql.INSERT_NODE, [(t, env, n["id"], dumps(n)) for n in graph.get("nodes", [])])
            cur.executemany(sql.INSERT_EDGE,
                            [(t, env, e["id"], e["src_id"], e["dst_id"], dumps(e)) for e in graph.get("edges", [])])
            cur.executemany(sql.INSERT_RULE, [(t, env, r["id"], dumps(r)) for r in graph.get("rules", [])])
            for scene in graph.get("scenes", []):
                write_scene(cur, scene)
            links = [(t, env, s, kind, rec["id"])
                     for kind, key in (("node", "nodes"), ("rule", "rules"))
                     for rec in graph.get(key, []) for s in rec.get("source_scenes", [])]
            cur.executemany(sql.INSERT_SCENE_LINK, links)
            if graph.get("meta") is not None:
                cur.execute(sql.INSERT_META, (t, env, dumps(graph["meta"])))


def _apply_plan(cur: sqlite3.Cursor, plan: MergePlan, old_meta: MetaRecord | None) -> MetaRecord | None:
    t, env = plan.tenant_id, plan.env_name
    if plan.scene is not None and plan.report is not None:
        cur.execute(sql.UPSERT_SCENE_REPORT, (t, env, plan.scene["id"], dumps(plan.report)))
    if plan.meta is None and plan.size() == 0:  # nothing merged: only the scene's status moves
        if plan.scene is not None:
            write_scene(cur, plan.scene)
        return old_meta
    cur.executemany(sql.UPSERT_NODE, [(t, env, n["id"], dumps(n)) for n in plan.nodes])
    cur.executemany(sql.UPSERT_EDGE, [(t, env, e["id"], e["src_id"], e["dst_id"], dumps(e)) for e in plan.edges])
    cur.executemany(sql.UPSERT_RULE, [(t, env, r["id"], dumps(r)) for r in plan.rules])
    links = [(t, env, s, kind, rec["id"])
             for kind, recs in (("node", plan.nodes), ("rule", plan.rules))
             for rec in recs for s in rec.get("source_scenes", [])]
    cur.executemany(sql.INSERT_SCENE_LINK, links)
    if plan.scene is not None:
        write_scene(cur, plan.scene)
    meta: MetaRecord = dict(plan.meta or {})  # type: ignore[assignment]
    meta.update({"tenant_id": t, "env_name": env})
    meta["counts"] = env_counts(cur, t, env)
    cur.execute(sql.UPSERT_META, (t, env, dumps(meta)))
    return meta


def env_counts(cur: sqlite3.Cursor, tenant_id: str, env_name: str) -> dict[str, int]:
    """The counts of an environment's meta record: its nodes, edges, rules and scenes."""
    return {key: cur.execute(sql.count_in_env(table), (tenant_id, env_name)).fetchone()[0]
            for key, table in sql.ENV_COUNTED}
