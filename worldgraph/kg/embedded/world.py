"""The world half of the embedded store (``WorldStore``): nodes, edges, rules, scenes, reports
and meta of each environment, merged in one IMMEDIATE transaction (the environment's write lock)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from worldgraph.gcpause import gc_paused
from worldgraph.kg.codec import dumps as _dumps
from worldgraph.kg.codec import loads as _loads
from worldgraph.kg.embedded.leases import check_fence
from worldgraph.kg.embedded.sql import SqliteAccess
from worldgraph.kg.embedded.sql import chunks as _chunks
from worldgraph.kg.embedded.sql import placeholders as _placeholders
from worldgraph.kg.records import GraphView, MergePlan, MetaRecord, SceneRecord
from worldgraph.kg.store import Record, WorldStore

__all__ = ["SqliteWorld"]


class SqliteWorld(SqliteAccess, WorldStore):
    """Mixin of EmbeddedGraphStore: every WorldStore method but the leases (embedded.leases)."""

    # ---------------------------------------------------------------- world graph
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        view = GraphView(tenant_id=tenant_id, env_name=env_name)
        ids = list(dict.fromkeys(node_ids))
        for chunk in _chunks(list(dict.fromkeys(names))):
            ids += [r[0] for r in self._query(
                f"SELECT id FROM world_nodes WHERE tenant_id = ? AND env_name = ? "
                f"AND json_extract(data, '$.norm_name') IN ({_placeholders(len(chunk))})",
                [tenant_id, env_name, *chunk])]
        ids = list(dict.fromkeys(ids))
        # One SELECT per indexed column, joined by UNION ALL (a row found twice is kept once):
        # with ``a IN (...) OR b IN (...)`` SQLite used only the (tenant_id, env_name) prefix
        # and checked every row of the environment; this way each arm is an index lookup
        # (primary key, nodes_entity, edges_src, edges_dst; see EXPLAIN QUERY PLAN).
        def either(table: str, col_a: str, col_b: str, chunk: list[str], into: dict[str, Any]) -> None:
            """Rows of ``table`` whose ``col_a`` or ``col_b`` is in ``chunk``, each kept once."""
            ph = _placeholders(len(chunk))
            for rid, d in self._query(
                f"SELECT id, data FROM {table} WHERE tenant_id = ? AND env_name = ? AND {col_a} IN ({ph}) "
                f"UNION ALL SELECT id, data FROM {table} WHERE tenant_id = ? AND env_name = ? AND {col_b} IN ({ph})",
                [tenant_id, env_name, *chunk, tenant_id, env_name, *chunk],
            ):
                if rid not in into:
                    into[rid] = _loads(d)

        for chunk in _chunks(ids):
            # the nodes asked for, and the states of those that are entities (a new state closes them)
            either("world_nodes", "id", "json_extract(data, '$.entity_id')", chunk, view.nodes)
            either("world_edges", "src_id", "dst_id", chunk, view.edges)
            # the current containment chain above them (the merge refuses containment cycles); CROSS
            # JOIN keeps SQLite driving from the chain (else it scans the env's edges, ~60 ms at 6k)
            ph = _placeholders(len(chunk))
            for rid, d in self._query(
                f"WITH RECURSIVE up(id, depth) AS (SELECT id, 0 FROM world_nodes WHERE tenant_id = ? AND env_name = ? "
                f"AND id IN ({ph}) UNION SELECT e.src_id, up.depth + 1 FROM world_edges e JOIN up ON e.dst_id = up.id "
                f"WHERE e.tenant_id = ? AND e.env_name = ? AND json_extract(e.data, '$.relation') = 'containment' "
                f"AND json_extract(e.data, '$.valid_to') IS NULL AND up.depth < 64) "
                f"SELECT e.id, e.data FROM up CROSS JOIN world_edges e ON e.dst_id = up.id WHERE e.tenant_id = ? "
                f"AND e.env_name = ? AND json_extract(e.data, '$.relation') = 'containment' "
                f"AND json_extract(e.data, '$.valid_to') IS NULL",
                [tenant_id, env_name, *chunk, tenant_id, env_name, tenant_id, env_name],
            ):
                if rid not in view.edges:
                    view.edges[rid] = _loads(d)
        # every containment edge (closed ones too) into a child of the containment edges loaded:
        # the merge recomputes a child's parents on the timeline from all of them (a retracted
        # container's contents, a cycle broken on the chain above)
        children = {e.get("dst_id") for e in view.edges.values() if e.get("relation") == "containment"} - set(ids)
        for chunk in _chunks(sorted(c for c in children if isinstance(c, str))):
            for rid, d in self._query(
                f"SELECT id, data FROM world_edges WHERE tenant_id = ? AND env_name = ? AND dst_id IN "
                f"({_placeholders(len(chunk))}) AND json_extract(data, '$.relation') = 'containment'",
                [tenant_id, env_name, *chunk],
            ):
                if rid not in view.edges:
                    view.edges[rid] = _loads(d)
        for (d,) in self._query(
            "SELECT data FROM world_rules WHERE tenant_id = ? AND env_name = ?", (tenant_id, env_name)
        ):
            rec = _loads(d)
            view.rules[rec["id"]] = rec
        view.meta = self._meta(tenant_id, env_name)
        return view

    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        # BEGIN IMMEDIATE takes the database's write lock first: the view is read, planned and
        # written while no other process or thread can write, so no update is lost.
        with self._tx() as cur:
            check_fence(cur, tenant_id, fence)
            view = self.load_view(tenant_id, env_name, node_ids, names)
            plan = planner(view)
            return view.meta if plan is None else self._apply_plan(cur, plan, view.meta)

    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        rows = self._query("SELECT data FROM scene_reports WHERE tenant_id = ? AND scene_id = ?", (tenant_id, scene_id))
        return _loads(rows[0][0]) if rows else None

    def _meta(self, tenant_id: str, env_name: str) -> MetaRecord | None:
        rows = self._query("SELECT data FROM env_meta WHERE tenant_id = ? AND env_name = ?", (tenant_id, env_name))
        return _loads(rows[0][0]) if rows else None

    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        with self._tx() as cur:
            return self._apply_plan(cur, plan, self._meta(plan.tenant_id, plan.env_name))  # type: ignore[return-value]

    def _apply_plan(self, cur: sqlite3.Cursor, plan: MergePlan, old_meta: MetaRecord | None) -> MetaRecord | None:
        t, env = plan.tenant_id, plan.env_name
        if plan.scene is not None and plan.report is not None:
            cur.execute("INSERT INTO scene_reports(tenant_id, env_name, scene_id, data) VALUES (?,?,?,?) "
                        "ON CONFLICT(tenant_id, scene_id) DO UPDATE SET data = excluded.data",
                        (t, env, plan.scene["id"], _dumps(plan.report)))
        if plan.meta is None and plan.size() == 0:  # nothing merged: only the scene's status moves
            if plan.scene is not None:
                self._upsert_scene(cur, plan.scene)
            return old_meta
        cur.executemany(
            "INSERT INTO world_nodes(tenant_id, env_name, id, data) VALUES (?,?,?,?) "
            "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data",
            [(t, env, n["id"], _dumps(n)) for n in plan.nodes],
        )
        cur.executemany(
            "INSERT INTO world_edges(tenant_id, env_name, id, src_id, dst_id, data) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data",
            [(t, env, e["id"], e["src_id"], e["dst_id"], _dumps(e)) for e in plan.edges],
        )
        cur.executemany(
            "INSERT INTO world_rules(tenant_id, env_name, id, data) VALUES (?,?,?,?) "
            "ON CONFLICT(tenant_id, env_name, id) DO UPDATE SET data = excluded.data",
            [(t, env, r["id"], _dumps(r)) for r in plan.rules],
        )
        links = [(t, env, s, kind, rec["id"])
                 for kind, recs in (("node", plan.nodes), ("rule", plan.rules))
                 for rec in recs for s in rec.get("source_scenes", [])]
        cur.executemany("INSERT OR IGNORE INTO scene_links VALUES (?,?,?,?,?)", links)
        if plan.scene is not None:
            self._upsert_scene(cur, plan.scene)
        meta: MetaRecord = dict(plan.meta or {})  # type: ignore[assignment]
        meta.update({"tenant_id": t, "env_name": env})
        meta["counts"] = self._counts(cur, t, env)
        cur.execute(
            "INSERT INTO env_meta(tenant_id, env_name, data) VALUES (?,?,?) "
            "ON CONFLICT(tenant_id, env_name) DO UPDATE SET data = excluded.data",
            (t, env, _dumps(meta)),
        )
        return meta

    @staticmethod
    def _counts(cur: sqlite3.Cursor, tenant_id: str, env_name: str) -> dict[str, int]:
        counts = {}
        for key, table in (("nodes", "world_nodes"), ("edges", "world_edges"), ("rules", "world_rules"), ("scenes", "scenes")):
            counts[key] = cur.execute(
                f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND env_name = ?", (tenant_id, env_name)
            ).fetchone()[0]
        return counts

    @staticmethod
    def _upsert_scene(cur: sqlite3.Cursor, scene: SceneRecord) -> None:
        cur.execute(
            "INSERT INTO scenes(tenant_id, env_name, id, status, created_at, episode_id, data) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT(tenant_id, id) DO UPDATE SET status = excluded.status, data = excluded.data, "
            "episode_id = excluded.episode_id",
            (scene["tenant_id"], scene["env_name"], scene["id"], scene["status"], scene["created_at"],
             scene.get("episode_id"), _dumps(scene)),
        )

    def upsert_scene(self, scene: SceneRecord) -> None:
        with self._tx() as cur:
            self._upsert_scene(cur, scene)

    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        rows = self._query("SELECT data FROM scenes WHERE tenant_id = ? AND id = ?", (tenant_id, scene_id))
        return _loads(rows[0][0]) if rows else None

    def claim_scene(self, tenant_id: str, scene_id: str) -> bool:
        with self._tx() as cur:
            row = cur.execute(
                "SELECT data FROM scenes WHERE tenant_id = ? AND id = ? AND status IN ('pending', 'failed')",
                (tenant_id, scene_id),
            ).fetchone()
            if row is None:
                return False
            scene = _loads(row[0])
            scene["status"] = "running"
            cur.execute("UPDATE scenes SET status = 'running', data = ? WHERE tenant_id = ? AND id = ?",
                        (_dumps(scene), tenant_id, scene_id))
            return True

    def list_scenes(self, tenant_id: str | None = None, env_name: str | None = None,
                    statuses: list[str] | None = None) -> list[SceneRecord]:
        sql, params = "SELECT data FROM scenes WHERE 1=1", []
        if tenant_id is not None:
            sql += " AND tenant_id = ?"
            params.append(tenant_id)
        if env_name is not None:
            sql += " AND env_name = ?"
            params.append(env_name)
        if statuses:
            sql += f" AND status IN ({_placeholders(len(statuses))})"
            params.extend(statuses)
        return [_loads(d) for (d,) in self._query(sql + " ORDER BY created_at, id", params)]

    def environments(self, tenant_id: str) -> list[str]:
        rows = self._query(
            "SELECT env_name FROM env_meta WHERE tenant_id = ? UNION SELECT env_name FROM scenes WHERE tenant_id = ? "
            "ORDER BY 1", (tenant_id, tenant_id))
        return [r[0] for r in rows]

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        def load(table: str) -> list[Record]:
            rows = self._query(
                f"SELECT data FROM {table} WHERE tenant_id = ? AND env_name = ? ORDER BY id", (tenant_id, env_name)
            )
            with gc_paused():  # the records are acyclic; see gc_paused
                return [_loads(d) for (d,) in rows]

        return {"nodes": load("world_nodes"), "edges": load("world_edges"), "rules": load("world_rules"),
                "scenes": load("scenes"), "meta": self._meta(tenant_id, env_name)}

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        t, env = tenant_id, env_name
        with self._tx() as cur:
            for table in ("world_nodes", "world_edges", "world_rules", "scene_links", "scenes", "scene_reports",
                          "env_meta"):
                cur.execute(f"DELETE FROM {table} WHERE tenant_id = ? AND env_name = ?", (t, env))
            cur.executemany("INSERT INTO world_nodes(tenant_id, env_name, id, data) VALUES (?,?,?,?)",
                            [(t, env, n["id"], _dumps(n)) for n in graph.get("nodes", [])])
            cur.executemany(
                "INSERT INTO world_edges(tenant_id, env_name, id, src_id, dst_id, data) VALUES (?,?,?,?,?,?)",
                [(t, env, e["id"], e["src_id"], e["dst_id"], _dumps(e)) for e in graph.get("edges", [])])
            cur.executemany("INSERT INTO world_rules(tenant_id, env_name, id, data) VALUES (?,?,?,?)",
                            [(t, env, r["id"], _dumps(r)) for r in graph.get("rules", [])])
            for scene in graph.get("scenes", []):
                self._upsert_scene(cur, scene)
            links = [(t, env, s, kind, rec["id"])
                     for kind, key in (("node", "nodes"), ("rule", "rules"))
                     for rec in graph.get(key, []) for s in rec.get("source_scenes", [])]
            cur.executemany("INSERT OR IGNORE INTO scene_links VALUES (?,?,?,?,?)", links)
            if graph.get("meta") is not None:
                cur.execute("INSERT INTO env_meta(tenant_id, env_name, data) VALUES (?,?,?)",
                            (t, env, _dumps(graph["meta"])))
