"""Choosing the ANN index: recall@10 against exact search, latency, build time and size per candidate.

    python bench/bench_ann.py --size 200000 --queries 100 --tmp /var/tmp \
        --types IVF_PQ,IVF_RQ,IVF_SQ,IVF_HNSW_SQ --nprobes 10,20 --candidates 100,300,500,1000

One table of ``--size`` corpus vectors (bench/corpus.py, the vectors bench_memory.py records) is
written once through ``EpisodeIndex``; each index type gets a copy of it and its ANN index,
built (and timed) by ``EpisodeIndex.rebuild_vector_index``. Every search goes through
``EpisodeIndex.vector_search`` with the candidate's settings (``ann_nprobes``,
``ann_candidates``), exactly as recall calls it. Queries are interleaved across the variants, so
the machine's load falls on all of them alike. The exact top 10 comes from numpy over every
vector, not from the library. See bench/README.md, "Choosing the ANN index".
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import measure  # noqa: E402
from corpus import Corpus, PrecomputedEmbedder  # noqa: E402

from worldgraph.config import WorldGraphConfig  # noqa: E402
from worldgraph.memory.index.episode_index import EpisodeIndex  # noqa: E402
from worldgraph.memory.index.policy import ann_partitions_for  # noqa: E402

TENANT = "bench"
NAME = PrecomputedEmbedder.name


def load_base(path: Path, corpus: Corpus, log: Any) -> None:
    """Every corpus vector into one tenant table, no ANN index (the copies get theirs)."""
    cfg = WorldGraphConfig(ann_index_min_rows=10**9, optimize_every_rows=10**9, compact_every_writes=10**6)
    idx = EpisodeIndex(path, corpus.centroids.shape[1], NAME, cfg)
    for first, vectors in corpus.vector_chunks():
        with idx.adding(TENANT) as add:  # new ids: appended
            add([{"episode_id": corpus.episode_id(first + j), "tenant_id": TENANT, "vector": v,
                  "text": f"episode {first + j}"} for j, v in enumerate(vectors)])
        if (first + len(vectors)) % 100_000 == 0 or first + len(vectors) == corpus.n:
            log(f"  wrote {first + len(vectors):,}")
    idx.optimize()
    idx.close()


def variants(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for kind in args.types.split(","):
        for nprobes in ([0] if kind.startswith("IVF_HNSW_SQ") and args.hnsw_partition_rows >= args.size
                        else [int(x) for x in args.nprobes.split(",")]):
            for cand in (int(x) for x in args.candidates.split(",")):
                out.append({"type": kind, "nprobes": nprobes, "candidates": cand})
    return out


def config_for(kind: str, args: argparse.Namespace, nprobes: int = 20, candidates: int = 500) -> WorldGraphConfig:
    """``kind`` is an index type, IVF_RQ with ``:bits`` for RaBitQ codes of more than one bit."""
    base, _, bits = kind.partition(":")
    rows = args.hnsw_partition_rows if base == "IVF_HNSW_SQ" else args.partition_rows
    return WorldGraphConfig(ann_index_type=base, ann_rq_bits=int(bits or 1), ann_partition_rows=rows,
                            ann_nprobes=max(1, nprobes), ann_candidates=candidates, ann_index_min_rows=1,
                            optimize_every_rows=10**9, compact_every_writes=10**6)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", type=int, default=200_000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--types", default="IVF_PQ,IVF_RQ,IVF_SQ,IVF_HNSW_SQ",
                    help="index types; IVF_RQ:4 is IVF_RQ with 4-bit codes")
    ap.add_argument("--nprobes", default="10,20")
    ap.add_argument("--candidates", default="100,300,500,1000", help="ann_candidates values (re-ranked hits)")
    ap.add_argument("--partition-rows", type=int, default=8192, help="ann_partition_rows of the IVF types")
    ap.add_argument("--hnsw-partition-rows", type=int, default=1 << 20,
                    help="ann_partition_rows of IVF_HNSW_SQ (lance's advice: one graph up to ~1M rows)")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--out", default="bench/results/ann.json")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    corpus = Corpus(args.size, seed=args.seed)
    queries = corpus.queries(args.queries, seed=args.seed + 2)
    qvecs = np.stack([v for _, v, _ in queries])
    truth = [set(t) for t in corpus.exact_top(qvecs, 10)]
    tmp = Path(tempfile.mkdtemp(prefix="wg-bench-ann-", dir=args.tmp))
    builds: dict[str, dict[str, Any]] = {}
    try:
        log(f"== {args.size:,} vectors, load {measure.load_average()}")
        load_base(tmp / "base", corpus, log)
        for kind in args.types.split(","):
            shutil.copytree(tmp / "base", tmp / kind.replace(":", "-"))
            indices = next((tmp / kind.replace(":", "-")).glob("*.lance")) / "_indices"
            before = measure.du(indices)
            idx = EpisodeIndex(tmp / kind.replace(":", "-"), qvecs.shape[1], NAME, config_for(kind, args))
            t0 = time.perf_counter()
            idx.rebuild_vector_index(TENANT)
            build_s = time.perf_counter() - t0
            idx.close()
            size = measure.du(indices) - before  # the ANN index alone
            builds[kind] = {"build_s": round(build_s, 1), "indices_mb": round(size / 1e6, 1),
                            "partitions": ann_partitions_for(config_for(kind, args), args.size)}
            log(f"  {kind}: built in {build_s:.1f}s, {size / 1e6:.1f} MB of indexes (load {measure.load_average()})")
        rows = variants(args)
        for v in rows:
            v["index"] = EpisodeIndex(tmp / v["type"].replace(":", "-"), qvecs.shape[1], NAME,
                                      config_for(v["type"], args, v["nprobes"], v["candidates"]))
            v["lat"], v["at10"], v["pool"] = [], [], []
        for vec in qvecs[:10]:  # warm-up: index files into the page cache and lance's index cache
            for v in rows:
                v["index"].vector_search(TENANT, vec, k=100, columns=["episode_id"])
        load = measure.load_average()
        for vec, want in zip(qvecs, truth):
            for v in rows:
                idx = v["index"]
                t0 = time.perf_counter()
                hits = idx.vector_search(TENANT, vec, k=100, columns=["episode_id"])
                v["lat"].append(time.perf_counter() - t0)
                v["pool"].append(len(want & {h["episode_id"] for h in hits[:10]}) / 10)
                top = idx.vector_search(TENANT, vec, k=10, columns=["episode_id"])
                v["at10"].append(len(want & {h["episode_id"] for h in top}) / 10)
        results = []
        for v in rows:
            lat = sorted(x * 1000 for x in v["lat"])
            results.append({"type": v["type"], "nprobes": v["nprobes"], "candidates": v["candidates"],
                            **builds[v["type"]],
                            "recall_at_10": round(float(np.mean(v["at10"])), 4),
                            "recall_at_10_of_pool": round(float(np.mean(v["pool"])), 4),
                            "p50_ms": round(float(np.percentile(lat, 50)), 2),
                            "p99_ms": round(float(np.percentile(lat, 99)), 2)})
            v["index"].close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{args.size:,} vectors, {len(qvecs)} queries, load average {load} -> {measure.load_average()}")
    print(f"{'type':<12} {'parts':>5} {'nprobes':>7} {'cands':>5} | {'r@10 k=10':>9} {'r@10 pool':>9} | "
          f"{'p50 ms':>7} {'p99 ms':>7} | {'build s':>7} {'index MB':>8}")
    for r in results:
        print(f"{r['type']:<12} {r['partitions']:>5} {r['nprobes'] or '-':>7} {r['candidates']:>5} | "
              f"{r['recall_at_10']:>9.3f} {r['recall_at_10_of_pool']:>9.3f} | {r['p50_ms']:>7.1f} {r['p99_ms']:>7.1f} | "
              f"{r['build_s']:>7.1f} {r['indices_mb']:>8.1f}")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                "args": vars(args), "load": [load, measure.load_average()],
                                "results": results}, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
