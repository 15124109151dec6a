"""Snapshot imports on Neo4j in bounded transactions (worldgraph.kg.neo4j.snapshot_import): how many
transactions an import takes, that a bad snapshot changes nothing, and what a killed import leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.kg.test_store_contract import ENV, canonical, edge, first_plan, node, rule, scene
from worldgraph.errors import InvalidInputError
from worldgraph.kg.neo4j.store import Neo4jGraphStore

pytestmark = pytest.mark.neo4j


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def open_store(neo4j_server: dict[str, str]) -> Iterator[Callable[..., Neo4jGraphStore]]:
    stores: list[Neo4jGraphStore] = []

    def make(**kw: Any) -> Neo4jGraphStore:
        stores.append(Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"], **kw))
        return stores[-1]
    yield make
    for s in stores:
        s.close()


def snapshot(tenant: str, n_nodes: int, n_scenes: int = 3) -> dict[str, Any]:
    """A containment tree and a transition chain over ``n_nodes`` nodes, a rule per 10 nodes, an
    episodic edge per scene; lists sorted by id, as world_graph returns them."""
    scenes = [scene(tenant, f"sc-{k:03d}", status="merged", minute=k) for k in range(n_scenes)]
    produced = tuple(s["id"] for s in scenes[:2])
    nodes = [node(tenant, f"n-{i:05d}", f"thing {i}", scenes=produced) for i in range(n_nodes)]
    edges = [edge(tenant, f"e-c{i:05d}", "containment", f"n-{(i - 1) // 4:05d}", f"n-{i:05d}")
             for i in range(1, n_nodes)]
    edges += [edge(tenant, f"e-t{i:05d}", "transition", f"n-{i:05d}", f"n-{i + 1:05d}", action="step")
              for i in range(n_nodes - 1)]
    edges += [edge(tenant, f"e-x{k:03d}", "episodic", "n-00000", s["id"]) for k, s in enumerate(scenes)]
    rules = [rule(tenant, f"r-{i:05d}", [f"n-{i:05d}", f"n-{i + 1:05d}"], scenes=produced)
             for i in range(0, n_nodes - 1, 10)]
    meta = {"env_name": ENV, "tenant_id": tenant, "app_name": "test", "graph_version": 9,
            "updated_at": "2026-01-05T13:00:00.000000+00:00", "last_trigger_reason": "import",
            "counts": {"nodes": n_nodes, "edges": len(edges), "rules": len(rules), "scenes": n_scenes}}
    return {"nodes": nodes, "edges": sorted(edges, key=lambda e: e["id"]), "rules": rules, "scenes": scenes,
            "meta": meta}


def count_transactions(store: Neo4jGraphStore) -> list[int]:
    """Count the store's write transactions (each ``db.write`` is one managed transaction)."""
    calls: list[int] = []
    write = store.db.write

    def counted(work: Any, *args: Any) -> Any:
        calls.append(1)
        return write(work, *args)
    store.db.write = counted  # type: ignore[method-assign]
    return calls


def test_large_import_runs_in_transactions_of_the_configured_size(open_store: Callable[..., Neo4jGraphStore],
                                                                  tenant: str) -> None:
    store = open_store(import_batch=50)
    store.apply_plan(first_plan(tenant))  # an older graph to replace (7 records)
    graph = snapshot(tenant, 120)  # 120 nodes, 241 edges, 12 rules, 3 scenes
    calls = count_transactions(store)
    store.replace_world(tenant, ENV, graph)
    # begin, 1 delete batch (7 old records < 50), scenes 1, nodes 3, rules 1, edges 5, finish
    assert len(calls) == 1 + 1 + 1 + 3 + 1 + 5 + 1
    assert canonical(store.world_graph(tenant, ENV)) == canonical(graph)
    assert store.snapshot_import.import_state(tenant, ENV) is None
    # replacing it again deletes the 135 old nodes, rules and scenes (their edges with them) 50 at a time
    smaller = snapshot(tenant, 60)
    calls.clear()
    store.replace_world(tenant, ENV, smaller)
    assert len(calls) == 1 + 3 + 1 + 2 + 1 + 3 + 1
    assert canonical(store.world_graph(tenant, ENV)) == canonical(smaller)
    assert store.stats(tenant)["nodes"] == 60


def test_emptying_a_large_environment_is_bounded_too(open_store: Callable[..., Neo4jGraphStore],
                                                     tenant: str) -> None:
    store = open_store(import_batch=50)
    store.replace_world(tenant, ENV, snapshot(tenant, 120))
    calls = count_transactions(store)
    store.replace_world(tenant, ENV, {"nodes": [], "edges": [], "rules": [], "scenes": [], "meta": None})
    # begin, the 135 nodes, rules and scenes 50 at a time (3), finish
    assert len(calls) == 1 + 3 + 1
    assert store.stats(tenant)["nodes"] == 0 and store.stats(tenant)["edges"] == 0


def test_import_within_one_batch_is_one_transaction(open_store: Callable[..., Neo4jGraphStore], tenant: str) -> None:
    store = open_store(import_batch=1000)
    graph = snapshot(tenant, 120)
    calls = count_transactions(store)
    store.replace_world(tenant, ENV, graph)
    assert len(calls) == 1
    assert canonical(store.world_graph(tenant, ENV)) == canonical(graph)


def test_bad_large_snapshot_changes_nothing(open_store: Callable[..., Neo4jGraphStore], tenant: str) -> None:
    store = open_store(import_batch=20)
    good = snapshot(tenant, 40)
    store.replace_world(tenant, ENV, good)
    bad = snapshot(tenant, 80)
    bad["edges"].append(edge(tenant, "e-zzz", "containment", "n-00001", "n-missing"))
    with pytest.raises(InvalidInputError, match="n-missing|e-zzz"):
        store.replace_world(tenant, ENV, bad)
    assert canonical(store.world_graph(tenant, ENV)) == canonical(good)
    assert store.snapshot_import.import_state(tenant, ENV) is None


KILLED_IMPORT = """
import json, sys
from worldgraph.kg.neo4j.store import Neo4jGraphStore
uri, user, password, tenant, env, path = sys.argv[1:]
store = Neo4jGraphStore(uri, user, password, import_batch=10)
store.replace_world(tenant, env, json.load(open(path)))
print("finished", flush=True)
"""


def test_killed_import_leaves_whole_records_and_is_completed_by_importing_again(
        open_store: Callable[..., Neo4jGraphStore], neo4j_server: dict[str, str], tenant: str, tmp_path: Path) -> None:
    store = open_store()
    graph = snapshot(tenant, 1500)  # ~4.7k records: ~470 transactions of 10
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(graph))
    proc = subprocess.Popen([sys.executable, "-c", KILLED_IMPORT, neo4j_server["uri"], neo4j_server["user"],
                             neo4j_server["password"], tenant, ENV, str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.getcwd())
    deadline = time.monotonic() + 120
    while store.stats(tenant)["nodes"] < 200:  # part of the nodes are in: kill it mid-import
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the import wrote no nodes in 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # what is left: marked incomplete, no meta, and every record present is a whole snapshot record
    assert store.snapshot_import.import_state(tenant, ENV) is not None
    left = store.world_graph(tenant, ENV)
    assert left["meta"] is None
    assert 200 <= len(left["nodes"]) < len(graph["nodes"])
    by_id = {key: {r["id"]: r for r in graph[key]} for key in ("nodes", "edges", "rules", "scenes")}
    for key in ("nodes", "edges", "rules", "scenes"):
        for rec in left[key]:
            assert rec == by_id[key][rec["id"]]
    present = {n["id"] for n in left["nodes"]} | {s["id"] for s in left["scenes"]}
    assert all(e["src_id"] in present and e["dst_id"] in present for e in left["edges"])
    # importing again replaces it and completes
    store.replace_world(tenant, ENV, graph)
    assert canonical(store.world_graph(tenant, ENV)) == canonical(graph)
    assert store.snapshot_import.import_state(tenant, ENV) is None
