"""Recall and feedback alone, on a store that ``bench_memory.py --keep DIR`` built and kept.

    python bench/bench_memory.py --sizes 100000 --keep /var/tmp/keep        # once: builds DIR/wg-bench-100000
    PYTHONPATH=/path/to/tree python bench/recall_probe.py --store /var/tmp/keep/wg-bench-100000 --size 100000

Prints one JSON line: p50 wall and CPU milliseconds of ``--queries`` hybrid recalls (the same
calls as bench_memory's ``recall`` and ``filtered`` columns, after 10 warm-up calls) and of
``--feedback`` ``submit_feedback`` calls on random episodes, plus the ``worldgraph`` package it
ran (whichever ``PYTHONPATH`` names) and the load average. No recording, no index build: a run
takes seconds, so two source trees can be alternated many times on one store within a minute
(bench/README.md, "The redesign (issue 23)"). The ratings it submits stay in the store (0.5
each), which the next run's recalls aggregate like any other feedback.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# worldgraph first: the package PYTHONPATH names is the one measured. bench_memory puts this
# checkout's root first on sys.path, which would otherwise import this checkout's worldgraph.
import worldgraph  # isort: skip

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_memory as bm  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="a store kept by bench_memory.py --keep DIR: DIR/wg-bench-N")
    ap.add_argument("--size", type=int, required=True, help="N: the episode count that store was built with")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--feedback", type=int, default=300, help="submit_feedback calls timed (0: none)")
    ap.add_argument("--seed", type=int, default=20260101, help="bench_memory's --seed of that store")
    ap.add_argument("--profile", default=None, metavar="FILE", help="cProfile the plain recalls into FILE (pstats)")
    args = ap.parse_args(argv)

    store = Path(args.store)
    if not (store / "worldgraph.db").exists():
        ap.error(f"--store {store}: no worldgraph.db there; build one with bench_memory.py --sizes N --keep DIR "
                 "and pass DIR/wg-bench-N")
    corpus = bm.Corpus(args.size, seed=args.seed)
    emb = bm.PrecomputedEmbedder()
    wm = bm.WorldModel.open(store, embedder=emb)
    try:
        wm.index.warm_mirror(bm.TENANT)  # as bench_memory: the mirror, its lists and postings ready
        wm.index.wait_for_maintenance()
        stored = wm.store.stats(bm.TENANT)["episodes"]
        if stored != args.size:
            ap.error(f"--size {args.size}: the store holds {stored} episodes of tenant {bm.TENANT!r}")
        queries = corpus.queries(args.queries, seed=args.seed + 2)  # bench_memory's queries
        out: dict[str, Any] = {"worldgraph": str(Path(worldgraph.__file__).parent)}
        prof = cProfile.Profile() if args.profile else None
        for filtered in (False, True):
            if prof is not None and not filtered:
                prof.enable()
            r = bm.bench_recall(wm, emb, queries, corpus, filtered=filtered)
            if prof is not None and not filtered:
                prof.disable()
            out["filtered" if filtered else "recall"] = {"p50_ms": r["p50_ms"], "cpu_p50_ms": r["cpu_p50_ms"]}
        if prof is not None:
            prof.dump_stats(args.profile)
        if args.feedback:
            rng = np.random.default_rng()
            ids = [corpus.episode_id(int(j)) for j in rng.choice(args.size, min(args.feedback, args.size), replace=False)]
            wall, cpu = [], []
            for eid in ids:
                t0, c0 = time.perf_counter(), time.process_time()
                wm.submit_feedback(bm.TENANT, eid, 0.5)
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
            out["feedback"] = {"p50_ms": round(statistics.median(wall) * 1000, 3),
                               "cpu_p50_ms": round(statistics.median(cpu) * 1000, 3)}
    finally:
        wm.close()
    out["load"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
