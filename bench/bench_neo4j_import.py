"""Importing a large environment snapshot into Neo4j in bounded transactions (issue 13).

Builds one environment of ``--nodes`` world nodes (bench_neo4j.make_plan's shape: 4 entities : 1
state, a containment tree and transition chains, an edge per node, 1 % rules, one scene), writes
it as a snapshot directory (``worldgraph.export.snapshot``), then per ``--batches`` value imports
it into a fresh tenant with ``read_snapshot`` + ``Neo4jGraphStore.replace_world`` (transactions of
at most that many records: ``neo4j_import_batch``), and once more over itself (the old
environment is deleted batch by batch first). Reports records per second and the number of
transactions, and checks the imported counts.

    python bench/bench_neo4j_import.py --uri bolt://127.0.0.1:7690 --nodes 100000 --batches 10000,2000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure  # noqa: E402
from bench_neo4j import ENV, make_plan  # noqa: E402

from worldgraph.export.snapshot import read_snapshot, snapshot_dir, write_snapshot  # noqa: E402
from worldgraph.kg.neo4j.snapshot_import import graph_size  # noqa: E402
from worldgraph.kg.neo4j.store import Neo4jGraphStore  # noqa: E402


def environment(tenant: str, nodes: int) -> dict[str, Any]:
    """A snapshot graph of ``nodes`` world nodes, as world_graph returns it."""
    rules = -(-2 * nodes // 99)  # make_plan keeps 1 % of the elements for rules
    plan = make_plan(tenant, 2 * nodes + rules + 1)
    while len(plan.nodes) < nodes:  # rounding: grow until the node count is reached
        rules += 1
        plan = make_plan(tenant, 2 * nodes + rules + 1)
    assert plan.scene is not None and plan.meta is not None
    counts = {"nodes": len(plan.nodes), "edges": len(plan.edges), "rules": len(plan.rules), "scenes": 1}
    meta = dict(plan.meta, tenant_id=tenant, counts=counts)
    return {"nodes": plan.nodes, "edges": plan.edges, "rules": plan.rules, "scenes": [plan.scene], "meta": meta}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default=os.environ.get("NEO4J_URI", "bolt://127.0.0.1:7690"))
    ap.add_argument("--user", default=os.environ.get("NEO4J_USER", "neo4j"))
    ap.add_argument("--password", default=os.environ.get("NEO4J_PASSWORD", "worldgraph-dev"))
    ap.add_argument("--nodes", type=int, default=100_000)
    ap.add_argument("--batches", default="10000", help="comma-separated neo4j_import_batch values")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        graph = environment("bench-import", args.nodes)
        path = write_snapshot(graph, snapshot_dir(Path(tmp), "bench-import", "bench", ENV))
        size = graph_size(graph)
        print(f"snapshot: {len(graph['nodes']):,} nodes, {len(graph['edges']):,} edges, {len(graph['rules']):,} "
              f"rules, 1 scene = {size:,} records", file=sys.stderr)
        for batch in (int(b) for b in args.batches.split(",")):
            store = Neo4jGraphStore(args.uri, args.user, args.password, import_batch=batch)
            tenant = f"import-{uuid.uuid4().hex[:8]}"
            commits: list[int] = []
            write = store.db.write

            def counted(work: Any, *a: Any) -> Any:
                commits.append(1)
                return write(work, *a)
            store.db.write = counted  # type: ignore[method-assign]
            try:
                row: dict[str, Any] = {"batch": batch, "records": size, "load": measure.load_average()}
                for phase in ("fresh", "over itself"):
                    t0 = time.perf_counter()
                    snap = read_snapshot(path)
                    t1 = time.perf_counter()
                    for key in ("nodes", "edges", "rules", "scenes"):
                        for rec in snap[key]:
                            rec["tenant_id"] = tenant
                    snap["meta"]["tenant_id"] = tenant
                    commits.clear()
                    store.replace_world(tenant, ENV, snap)
                    t2 = time.perf_counter()
                    stats = store.stats(tenant)
                    assert (stats["nodes"], stats["edges"], stats["rules"]) == (
                        len(graph["nodes"]), len(graph["edges"]), len(graph["rules"])), stats
                    assert store.snapshot_import.import_state(tenant, ENV) is None
                    row[phase] = {"read_snapshot_s": round(t1 - t0, 2), "replace_world_s": round(t2 - t1, 2),
                                  "records_per_s": round(size / (t2 - t1)), "transactions": len(commits)}
                    print(f"batch {batch:>6,} {phase:<12} replace_world {t2 - t1:6.1f} s = {size / (t2 - t1):8,.0f} "
                          f"records/s in {len(commits)} transactions (read_snapshot {t1 - t0:.1f} s)",
                          file=sys.stderr)
                store.db.write = write  # type: ignore[method-assign]
                store.replace_world(tenant, ENV, {"nodes": [], "edges": [], "rules": [], "scenes": [], "meta": None})
            finally:
                store.close()
            rows.append(row)

    print(f"\nsnapshot import into Neo4j, {len(graph['nodes']):,} nodes / {size:,} records")
    print(f"{'batch':>7} {'phase':<12} {'replace_world s':>15} {'records/s':>10} {'transactions':>12}")
    for r in rows:
        for phase in ("fresh", "over itself"):
            p = r[phase]
            print(f"{r['batch']:>7,} {phase:<12} {p['replace_world_s']:>15.1f} {p['records_per_s']:>10,} "
                  f"{p['transactions']:>12}")
    print(f"median records/s: {statistics.median(r[p]['records_per_s'] for r in rows for p in ('fresh', 'over itself')):,}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
