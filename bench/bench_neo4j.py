"""Batched apply_plan throughput: Neo4j vs the embedded store, in the same run.

Each run applies one MergePlan of ~10k graph elements (nodes + edges + rules) to a fresh tenant
("create"), then the same plan again with every record changed and every edge closed ("update",
the upsert path). Reports the median over ``--runs`` runs, in graph elements per second.

    python bench/bench_neo4j.py                      # starts a local Neo4j (tools/neo4j-local), stops it after
    python bench/bench_neo4j.py --uri bolt://127.0.0.1:7687 --elements 20000 --runs 5
    NEO4J_URI=bolt://... python bench/bench_neo4j.py

Target: >= 20,000 elements/s on Neo4j.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worldgraph.kg.embedded import EmbeddedGraphStore  # noqa: E402
from worldgraph.kg.records import MergePlan  # noqa: E402
from worldgraph.kg.store import GraphStore  # noqa: E402

ENV = "bench-env"
NOW = "2026-01-05T12:00:00.000000+00:00"
LATER = "2026-01-05T13:00:00.000000+00:00"


def make_plan(tenant: str, elements: int, update: bool = False) -> MergePlan:
    """Half nodes (4 entities : 1 state), half edges (containment tree, transition chains), 1% rules."""
    n_rules = max(1, elements // 100)
    n_nodes = (elements - n_rules) // 2
    n_edges = elements - n_rules - n_nodes
    n_states = n_nodes // 5
    stamp = LATER if update else NOW
    scene_id = f"scene-{'b' if update else 'a'}"
    nodes, edges, rules = [], [], []
    for i in range(n_nodes):
        state = i >= n_nodes - n_states
        nodes.append({
            "id": f"n{i:07d}", "tenant_id": tenant, "env_name": ENV, "kind": "state" if state else "entity",
            "type": "door_state" if state else "item", "name": f"thing {i}", "norm_name": f"thing {i}",
            "attributes": {"color": "brass", "size": i % 7}, "confidence": 0.9 if update else 0.7,
            "evidence": [f"seen {i}"] * (2 if update else 1), "evidence_count": 2 if update else 1,
            "source_scenes": ["scene-a", "scene-b"] if update else ["scene-a"],
            "entity_id": "n0000000" if state else None, "valid_from": NOW, "valid_to": None,
            "created_at": NOW, "updated_at": stamp})
    entities = n_nodes - n_states
    for j in range(n_edges):
        if j < entities - 1:  # containment tree over the entities
            rel, src, dst = "containment", f"n{j // 8:07d}", f"n{j + 1:07d}"
        else:  # transition chain over the states
            k = j % max(1, n_states - 1)
            rel, src, dst = "transition", f"n{entities + k:07d}", f"n{entities + k + 1:07d}"
        edges.append({
            "id": f"e{j:07d}", "tenant_id": tenant, "env_name": ENV, "relation": rel, "src_id": src, "dst_id": dst,
            "action": "open" if rel == "transition" else None, "confidence": 0.8, "evidence": ["seen"],
            "evidence_count": 1, "source_scenes": ["scene-a"], "valid_from": NOW,
            "valid_to": LATER if update else None, "created_at": NOW, "updated_at": stamp})
    for r in range(n_rules):
        rules.append({
            "id": f"r{r:07d}", "tenant_id": tenant, "env_name": ENV, "condition": f"condition {r}",
            "outcome": "outcome", "linked_node_ids": [f"n{r:07d}", f"n{r + 1:07d}"], "confidence": 0.6,
            "evidence": ["tried"], "evidence_count": 1, "source_scenes": ["scene-a"], "valid_from": NOW,
            "valid_to": None, "created_at": NOW, "updated_at": stamp})
    scene = {"id": scene_id, "tenant_id": tenant, "env_name": ENV, "status": "merged", "error": None,
             "episode_id": None, "created_at": stamp, "updated_at": stamp, "current_round": 1,
             "trigger_reason": "bench", "action": "look", "before_observation": "", "after_observation": "",
             "feedback": "", "admissible_commands": [], "latest_response": "", "recent_history_excerpt": ""}
    meta = {"env_name": ENV, "app_name": "bench", "graph_version": 2 if update else 1, "updated_at": stamp,
            "last_trigger_reason": "bench"}
    return MergePlan(tenant_id=tenant, env_name=ENV, nodes=nodes, edges=edges, rules=rules, scene=scene, meta=meta)


def measure(store: GraphStore, elements: int, runs: int) -> dict[str, Any]:
    create, update, read = [], [], []
    for _ in range(runs):
        tenant = f"bench-{uuid.uuid4().hex[:10]}"
        plan, again = make_plan(tenant, elements), make_plan(tenant, elements, update=True)
        create.append(_timed(lambda: store.apply_plan(plan)))
        update.append(_timed(lambda: store.apply_plan(again)))
        read.append(_timed(lambda: store.world_graph(tenant, ENV)))
        meta = store.world_graph(tenant, ENV)["meta"]
        assert meta["counts"]["nodes"] == len(plan.nodes) and meta["counts"]["edges"] == len(plan.edges), meta
    size = make_plan("x", elements).size()
    return {"store": store.name, "elements": size, "runs": runs,
            "create_s": statistics.median(create), "update_s": statistics.median(update),
            "world_graph_s": statistics.median(read),
            "create_eps": size / statistics.median(create), "update_eps": size / statistics.median(update)}


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default=os.environ.get("NEO4J_URI"), help="a running Neo4j (default: start a local one)")
    ap.add_argument("--user", default=os.environ.get("NEO4J_USER", "neo4j"))
    ap.add_argument("--password", default=os.environ.get("NEO4J_PASSWORD", "worldgraph-dev"))
    ap.add_argument("--elements", type=int, default=10_000, help="graph elements per plan (default 10000)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured runs first (query plans, JIT)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    from worldgraph.kg.neo4j_store import Neo4jGraphStore

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        embedded = EmbeddedGraphStore(Path(tmp) / "bench.db")
        measure(embedded, args.elements, args.warmup) if args.warmup else None
        results.append(measure(embedded, args.elements, args.runs))
        embedded.close()

        local_home = None
        uri = args.uri
        if not uri:
            from worldgraph import neo4j_local

            local_home = Path(tmp) / "neo4j-local"
            print("starting a local Neo4j (tools/neo4j-local) ...", file=sys.stderr)
            uri = neo4j_local.start(port=_free_port(), data_dir=local_home / "data", timeout=300, home=local_home)
        try:
            neo = Neo4jGraphStore(uri, args.user, args.password)
            try:
                measure(neo, args.elements, args.warmup) if args.warmup else None
                results.append(measure(neo, args.elements, args.runs))
            finally:
                neo.close()
        finally:
            if local_home is not None:
                from worldgraph import neo4j_local

                neo4j_local.stop(home=local_home)

    print(f"\napply_plan throughput, plans of {results[0]['elements']:,} elements, median of {args.runs} runs")
    print(f"{'store':<10} {'create s':>9} {'create el/s':>12} {'update s':>9} {'update el/s':>12} {'world_graph s':>14}")
    for r in results:
        print(f"{r['store']:<10} {r['create_s']:>9.3f} {r['create_eps']:>12,.0f} {r['update_s']:>9.3f} "
              f"{r['update_eps']:>12,.0f} {r['world_graph_s']:>14.3f}")
    neo = results[-1]
    ok = min(neo["create_eps"], neo["update_eps"]) >= 20_000
    print(f"\nNeo4j target >= 20,000 elements/s: {'met' if ok else 'NOT met'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
