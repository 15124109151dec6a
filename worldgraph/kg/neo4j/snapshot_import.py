"""Replacing a whole environment on Neo4j (a snapshot import): the ``snapshot_import`` part of the
store (``Neo4jSnapshotImport``), in bounded transactions.

A snapshot of up to ``batch`` records (nodes + edges + rules + scenes), replacing an environment
of up to ``batch`` nodes, rules and scenes altogether (``old_records``), is replaced in ONE
transaction, as every other write of the store: all of it or none of it. A larger one would make
one transaction hold every record in the server's memory until the commit (a 100k-node
environment is ~200k elements and their properties), so it runs as a sequence of transactions of
at most ``batch`` records each (``neo4j_import_batch`` in the config):

1. the environment is marked incomplete (``import_incomplete`` on its :Environment node, an id of
   this import) and its meta is dropped;
2. its old nodes, rules and scenes are deleted (with their edges and links), ``batch`` at a time;
3. the snapshot's scenes, then nodes, then rules (their CONCERNS links), then edges are written,
   ``batch`` at a time, each with its PRODUCED links: an edge is written after both its ends;
4. the meta is written and the mark removed, in one last transaction.

The snapshot is checked before anything is written (node kinds, edge relations, every edge's ends
among the snapshot's nodes or scenes), so a bad snapshot changes nothing. If the import stops
between two transactions (the process is killed, the server goes away), the environment is left
marked incomplete and without meta: every record in it is a whole record of the snapshot (or of
nothing, once the old ones are gone), no edge dangles, and ``import_state`` names the unfinished
import. Importing the snapshot again replaces whatever is there and completes it.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from neo4j import ManagedTransaction

from worldgraph.errors import InvalidInputError
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection
from worldgraph.kg.neo4j.rows import chunks, dedupe, set_meta
from worldgraph.kg.neo4j.world_writes import write_world
from worldgraph.kg.records import SceneRecord
from worldgraph.kg.store import Record

__all__ = ["Neo4jSnapshotImport", "check_snapshot", "graph_size"]


def graph_size(graph: dict[str, Any]) -> int:
    """The records a replace_world writes: nodes, edges, rules and scenes."""
    return sum(len(graph.get(k) or []) for k in ("nodes", "edges", "rules", "scenes"))


class Neo4jSnapshotImport:
    """Whole-environment replacement on ``db``, in transactions of at most ``batch`` records."""

    def __init__(self, db: Neo4jConnection, batch: int) -> None:
        self.db = db
        self.batch = batch

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        """``WorldStore.replace_world``: one transaction when the snapshot and the records it replaces
        fit in ``batch``, else ``replace_in_batches`` (see the module docstring)."""
        if graph_size(graph) + self.old_records(tenant_id, env_name, self.batch) > self.batch:
            self.replace_in_batches(tenant_id, env_name, graph)  # bounded transactions
            return

        def work(tx: ManagedTransaction) -> None:
            tx.run(q.LOCK_ENV, tenant_id=tenant_id, env_name=env_name).consume()  # see q.upsert_nodes
            tx.run(q.DELETE_ENV, tenant_id=tenant_id, env_name=env_name,
                   prefix=q.env_prefix(tenant_id, env_name)).consume()
            write_world(tx, tenant_id, env_name, list(graph.get("scenes", [])), graph.get("nodes", []),
                        graph.get("rules", []), graph.get("edges", []), fresh=True)
            if graph.get("meta") is not None:
                set_meta(tx, tenant_id, env_name, graph["meta"])
        self.db.write(work)

    def replace_in_batches(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> int:
        """Replace the environment by ``graph`` in transactions of at most ``batch`` records (see the
        module docstring). Returns how many transactions it committed."""
        batch = self.batch
        scenes, nodes = dedupe(graph.get("scenes") or []), dedupe(graph.get("nodes") or [])
        rules, edges = dedupe(graph.get("rules") or []), dedupe(graph.get("edges") or [])
        check_snapshot(nodes, edges, scenes)
        params = {"tenant_id": tenant_id, "env_name": env_name, "prefix": q.env_prefix(tenant_id, env_name)}
        self.db.write(lambda tx: tx.run(q.IMPORT_BEGIN, params, import_id=uuid.uuid4().hex).consume())
        commits = 1
        while True:
            deleted = self.db.write(lambda tx: int(tx.run(q.DELETE_ENV_BATCH, params, limit=batch).single()["deleted"]))
            commits += 1
            if deleted < batch:
                break

        def write(scenes: list[Record] = [], nodes: list[Record] = [], rules: list[Record] = [],  # noqa: B006
                  edges: list[Record] = []) -> None:  # noqa: B006 - never mutated
            def work(tx: ManagedTransaction) -> None:
                tx.run(q.LOCK_ENV, params).consume()  # every writer of the env holds it (see q.upsert_nodes)
                write_world(tx, tenant_id, env_name, cast(list[SceneRecord], scenes), nodes, rules, edges,
                            fresh=True)  # the old records are gone: every node and edge is new
            self.db.write(work)
        for chunk in chunks(scenes, batch):
            write(scenes=chunk)
        for chunk in chunks(nodes, batch):
            write(nodes=chunk)
        for chunk in chunks(rules, batch):  # after the nodes: their CONCERNS links
            write(rules=chunk)
        for chunk in chunks(edges, batch):  # after both ends
            write(edges=chunk)
        commits += sum(-(-len(part) // batch) for part in (scenes, nodes, rules, edges))

        def finish(tx: ManagedTransaction) -> None:
            if graph.get("meta") is not None:
                set_meta(tx, tenant_id, env_name, graph["meta"])
            tx.run(q.IMPORT_END, params).consume()
        self.db.write(finish)
        return commits + 1

    def old_records(self, tenant_id: str, env_name: str, limit: int) -> int:
        """The environment's nodes, rules and scenes (what a replace deletes, edges with them),
        counted up to ``limit``: emptying a large environment is bounded too."""
        params = {"tenant_id": tenant_id, "env_name": env_name, "prefix": q.env_prefix(tenant_id, env_name)}
        row = self.db.read(lambda tx: tx.run(q.ENV_RECORDS_UP_TO, params, limit=limit + 1).single())
        return 0 if row is None else int(row["records"])

    def import_state(self, tenant_id: str, env_name: str) -> str | None:
        """The id of an import of this environment that has not finished (stopped, or still running)."""
        row = self.db.read(lambda tx: tx.run(q.IMPORT_STATE, tenant_id=tenant_id, env_name=env_name).single())
        return None if row is None else row["import_id"]


def check_snapshot(nodes: list[Record], edges: list[Record], scenes: list[Record]) -> None:
    """What the single-transaction path finds out while writing (and rolls back), checked up front."""
    unknown = [n["id"] for n in nodes if n.get("kind", "entity") not in q.NODE_LABELS]
    if unknown:
        raise InvalidInputError("nodes[].kind", f"must be one of {sorted(q.NODE_LABELS)}; nodes {unknown[:5]}")
    bad = [e["id"] for e in edges if e.get("relation") not in q.WORLD_EDGE_TYPES]
    if bad:
        raise InvalidInputError("edges[].relation", f"must be one of {list(q.WORLD_EDGE_TYPES)}; edges {bad[:5]}")
    node_ids = {n["id"] for n in nodes}
    any_ids = node_ids | {s["id"] for s in scenes}  # an episodic edge may end at a scene
    missing = [e["id"] for e in edges
               if not {e.get("src_id"), e.get("dst_id")} <= (any_ids if e.get("relation") == "episodic" else node_ids)]
    if missing:
        raise InvalidInputError(
            "edges[].src_id/dst_id",
            f"every edge must join nodes (or, if episodic, a scene) of the snapshot; these do not: {missing[:5]}")

