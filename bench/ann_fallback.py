"""ANN recall@10 and latency of LanceDB's own vector index on a kept bench store, the mirror off.

A table of at least ``mirror_min_rows`` rows is searched through the in-process mirror
(memory/index/mirror.py); LanceDB's IVF index serves it only until the mirror is ready (a new
process, or while the mirror is built). This measures that fallback path: the store is opened
read-only with ``mirror_min_rows=0`` (no mirror), and each query's ``vector_search`` (top 10) is
timed and compared with the exact top 10 over every stored vector (numpy, the corpus regenerated:
the store must hold the first N rows of the bench corpus, as bench_memory.py and record_speed.py
write them). Prints one JSON line: the index's partitions and unindexed rows, recall@10 (mean,
min), search p50 / p99 ms.

    nice .venv/bin/python bench/ann_fallback.py /work/tmp/copy/wg-bench-1000000 --queries 200

``--rebuild-partition-rows R`` first trains the index again on every row, with partitions of
about R rows (``ann_partition_rows``), timed (wall and CPU-seconds): it changes the folder, so run
it on a copy. R = 4 x 8192 gives the partitions an index trained at a quarter of the table has.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import Corpus, PrecomputedEmbedder  # noqa: E402
from worldgraph import WorldModel  # noqa: E402
from worldgraph.memory.index.policy import index_partitions  # noqa: E402
from worldgraph.memory.index.schema import VECTOR_INDEX_NAME  # noqa: E402

TENANT = "bench"
SEED = 20260101  # bench_memory.py's default --seed (its queries: seed + 2)


def rebuild(data: Path, partition_rows: int) -> dict[str, Any]:
    """Train the index again with partitions of ~``partition_rows`` rows, in this process (timed)."""
    wm = WorldModel.open(data, embedder=PrecomputedEmbedder(), mirror_min_rows=0, ann_partition_rows=partition_rows)
    try:
        wm.index.wait_for_maintenance()
        wall, cpu = time.perf_counter(), time.process_time()
        wm.index.rebuild_vector_index(TENANT)
        return {"rebuild_partition_rows": partition_rows, "rebuild_s": round(time.perf_counter() - wall, 1),
                "rebuild_cpu_s": round(time.process_time() - cpu, 1)}
    finally:
        wm.close()


def main(data: Path, queries: int, k: int = 10) -> dict[str, Any]:
    wm = WorldModel.open(data, embedder=PrecomputedEmbedder(), read_only=True, mirror_min_rows=0)
    try:
        n = wm.index.count(TENANT)
        part = wm.index._part(TENANT)  # noqa: SLF001 - the table, for its index's stats
        assert part is not None
        stats = part.table.index_stats(VECTOR_INDEX_NAME)
        corpus = Corpus(n, seed=SEED)
        qs = corpus.queries(queries, seed=SEED + 2)
        t0 = time.perf_counter()
        truth = corpus.exact_top([v for _, v, _ in qs], k)
        exact_s = time.perf_counter() - t0
        for _, vec, _ in qs[:5]:  # warm the caches: the first searches read the index from disk
            wm.index.vector_search(TENANT, vec, k=k, columns=["episode_id"])
        times, recalls = [], []
        for (_, vec, _), want in zip(qs, truth):
            t1 = time.perf_counter()
            hits = wm.index.vector_search(TENANT, vec, k=k, columns=["episode_id"])
            times.append(time.perf_counter() - t1)
            recalls.append(len(set(want) & {h["episode_id"] for h in hits}) / k)
        times.sort()
        return {"data": str(data), "rows": n, "partitions": index_partitions(part.latest_dataset(), VECTOR_INDEX_NAME),
                "indexed_rows": getattr(stats, "num_indexed_rows", None),
                "unindexed_rows": getattr(stats, "num_unindexed_rows", None),
                "queries": len(qs), "recall_at_10": round(statistics.fmean(recalls), 4),
                "min_recall_at_10": round(min(recalls), 2),
                "p50_ms": round(1000 * times[len(times) // 2], 1),
                "p99_ms": round(1000 * times[min(len(times) - 1, int(len(times) * 0.99))], 1),
                "exact_s": round(exact_s, 1)}
    finally:
        wm.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", type=Path, help="a bench data folder (read, not changed)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rebuild-partition-rows", type=int, default=0,
                    help="first train the index again with partitions of about this many rows (changes the folder)")
    args = ap.parse_args()
    built = rebuild(args.data, args.rebuild_partition_rows) if args.rebuild_partition_rows else {}
    print(json.dumps({**built, **main(args.data, args.queries)}))
