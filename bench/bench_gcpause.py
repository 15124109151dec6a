"""The cyclic GC paused or not around the bulk paths that pause it: read_snapshot, write_snapshot
and summarize_graph of an N-node graph (2N edges, N/10 rules), in a process that loaded LanceDB and
the package, as a server has. Paused and unpaused runs alternate; medians of 9. It decides whether
``worldgraph/gcpause.py`` earns its keep.

    python bench/bench_gcpause.py 10000 [repeats]
"""

from __future__ import annotations

import contextlib
import gc
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lancedb  # noqa: F401 - a realistic heap, as in a server process

import worldgraph.export.snapshot as snap
import worldgraph.world.summary as summ
from worldgraph.gcpause import gc_paused

T, ENV, NOW = "t", "env", "2026-01-01T00:00:00.000000+00:00"


def graph_of(n: int) -> dict[str, Any]:
    rnd = random.Random(3)
    base = {"tenant_id": T, "env_name": ENV, "confidence": 0.5}
    nodes = [{**base, "id": f"n{i:06d}", "kind": "entity", "type": "item", "name": f"thing {i}",
              "norm_name": f"thing {i}", "attributes": {"color": rnd.choice(["red", "blue"]), "size": i % 7},
              "evidence": [f"seen {i}"], "source_scenes": [f"s{i % 50}"]} for i in range(n)]
    edges = [{**base, "id": f"e{i:06d}", "relation": "containment", "src_id": f"n{rnd.randrange(n):06d}",
              "dst_id": f"n{rnd.randrange(n):06d}", "evidence": ["x"], "source_scenes": ["s1"],
              "valid_from": NOW, "valid_to": None} for i in range(2 * n)]
    rules = [{**base, "id": f"r{i:05d}", "condition": f"if {i}", "outcome": f"then {i}",
              "linked_node_ids": [f"n{i:06d}"], "evidence": ["y"], "source_scenes": ["s1"]} for i in range(n // 10)]
    scenes = [{"id": f"s{i}", "tenant_id": T, "env_name": ENV, "status": "merged", "created_at": NOW}
              for i in range(50)]
    meta = {"env_name": ENV, "app_name": "general", "graph_version": 1, "updated_at": NOW, "tenant_id": T,
            "last_trigger_reason": None,
            "counts": {"nodes": n, "edges": 2 * n, "rules": n // 10, "scenes": 50}}
    return {"nodes": nodes, "edges": edges, "rules": rules, "scenes": scenes, "meta": meta}


def interleaved(fns: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    """Median seconds of each function, run in turns (A, B, A, B, ...) so that load changes on a
    shared machine hit both alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(reps):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def paused_or_not(fn: Callable[[], Any]) -> dict[str, Callable[[], Any]]:
    def run(pause: Callable[[], Any]) -> Callable[[], Any]:
        def go() -> Any:
            for module in (snap, summ):  # the name each module calls
                module.gc_paused = pause
            return fn()
        return go
    return {"paused": run(gc_paused), "not paused": run(contextlib.nullcontext)}


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
    graph = graph_of(n)
    out = Path(tempfile.mkdtemp()) / "snap"
    snap.write_snapshot(graph, out)
    scene = {"id": "s1", "action": "take thing 5", "after_observation": "thing 7 is red"}
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    cols = {"read_snapshot": interleaved(paused_or_not(lambda: snap.read_snapshot(out)), reps),
            "write_snapshot": interleaved(paused_or_not(lambda: snap.write_snapshot(graph, out)), reps),
            "summarize_graph": interleaved(paused_or_not(
                lambda: summ.summarize_graph(graph, scene, 40)), reps)}  # type: ignore[arg-type]
    print(f"{n} nodes, {2 * n} edges, {len(gc.get_objects())} tracked objects")
    print("| gc | read_snapshot ms | write_snapshot ms | summarize_graph ms |")
    print("|---|---|---|---|")
    for label in ("paused", "not paused"):
        print(f"| {label} | " + " | ".join(f"{cols[c][label] * 1000:.0f}" for c in cols) + " |")


if __name__ == "__main__":
    main()
