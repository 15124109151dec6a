"""Text search latency on a kept bench store with 0, then more, rows not yet folded into the
indexes (bench/README.md, "Recording at 10M, accounted").

Rows written since the last fold are searched by a scan at every recall, which is what the fold
cadence (``optimize_every_rows``) trades against the fold's fixed cost. This records the bench
corpus's next rows into FOLDER with the background's folds off, and after each step times 60
queries of the corpus with ``index.text_search(k=50)`` (the mirror warm, the first 10 not counted).
Rows an earlier run left unfolded are folded first. It changes FOLDER (use a copy of a kept
store) and leaves its new rows unfolded; the next writable open's maintenance folds them.

    PYTHONPATH=TREE python bench/unfolded_text.py <keep>/wg-bench-10000000 5000,10000,20000

``--idle K --wait S`` instead records K rows with the background as configured (the default
cadence), waits S seconds without writing, and then reports the rows not folded and the same
latency: what a recall finds after a bulk ingest that stopped (bench/README.md, "Rows left
unfolded after an ingest"):

    PYTHONPATH=TREE python bench/unfolded_text.py COPY/wg-bench-1000000 --idle 3000 --wait 15

``--reopen`` closes the folder right after the rows (an import that ends) and opens it anew,
searches once and then waits: what the next process finds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

# after PYTHONPATH: an A/B names the checkout to measure there (PYTHONPATH=TREE)
sys.path.append(str(Path(__file__).resolve().parents[1]))

from bench.corpus import Corpus, PrecomputedEmbedder  # noqa: E402
from worldgraph import WorldModel  # noqa: E402

TENANT, SEED, CORPUS_MAX = "bench", 20260101, 10_000_000  # bench_memory.py's


def main(folder: Path, steps: list[int], idle: int = 0, wait: float = 0.0, reopen: bool = False) -> None:
    if not idle:
        os.environ["WORLDGRAPH_OPTIMIZE_EVERY_ROWS"] = "1000000000"  # the background folds nothing
        os.environ["WORLDGRAPH_COMPACT_EVERY_WRITES"] = "1000000000"
    emb = PrecomputedEmbedder()
    wm = WorldModel.open(folder, embedder=emb)
    try:
        t = time.perf_counter()
        warm = wm.index.warm_mirror(TENANT, timeout=900)
        print(json.dumps({"mirror_warm": warm, "s": round(time.perf_counter() - t, 1)}), flush=True)
        part = wm.index._part(TENANT)  # rows an earlier run left unfolded: folded first, as a fold does
        assert part is not None, f"no {TENANT} table in {folder}"
        part.latest_dataset().optimize.optimize_indices(num_indices_to_merge=0)
        stored = wm.store.stats(TENANT)["episodes"]
        queries = [q[0] for q in Corpus(CORPUS_MAX, seed=SEED).queries(60, seed=7)]
        batches = Corpus(max(CORPUS_MAX, stored + max(steps, default=0)), seed=SEED).batches(1000, start=stored)

        def latency() -> tuple[float, float]:
            times = []
            for q in queries:  # (wm: the process's open WorldModel, a new one after --reopen)
                t0 = time.perf_counter()
                wm.index.text_search(TENANT, q, k=50, columns=["episode_id"])
                times.append(time.perf_counter() - t0)
            kept = sorted(times[10:])
            return round(1000 * statistics.median(kept), 1), round(1000 * kept[int(0.99 * len(kept))], 1)

        if idle:
            print(json.dumps({"rows_not_folded": 0, "text_search_p50_ms": latency()[0]}), flush=True)
            for _ in range(0, idle, 1000):
                exps, vectors = next(batches)
                emb.register(exps, vectors)
                wm.record_experiences(TENANT, exps)
            if reopen:  # as a separate import: closed at once, then opened and searched anew
                wm.close(timeout=60)
                wm = WorldModel.open(folder, embedder=emb)
                wm.index.warm_mirror(TENANT, timeout=900)
                wm.index.text_search(TENANT, queries[0], k=50, columns=["episode_id"])
            time.sleep(wait)
            table = wm.index.table_for(TENANT)
            table.checkout_latest()
            p50, p99 = latency()
            print(json.dumps({"recorded": idle, "reopened": reopen, "waited_s": wait,
                              "rows_not_folded": int(table.index_stats("text_idx").num_unindexed_rows),
                              "text_search_p50_ms": p50, "p99_ms": p99, "load": round(os.getloadavg()[0], 2)}),
                  flush=True)
            return
        done = 0
        for n in [0, *steps]:
            while done < n:
                exps, vectors = next(batches)
                emb.register(exps, vectors)
                wm.record_experiences(TENANT, exps)
                done += len(exps)
            p50, p99 = latency()
            print(json.dumps({"rows_not_folded": done, "text_search_p50_ms": p50, "p99_ms": p99,
                              "load": round(os.getloadavg()[0], 2)}), flush=True)
    finally:
        wm.close(timeout=60)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="a copy of a kept bench store (it is changed)")
    ap.add_argument("steps", nargs="?", default="",
                    help="rows not folded to measure at, comma-separated (0 is measured first)")
    ap.add_argument("--idle", type=int, default=0, help="record this many rows as configured, then wait")
    ap.add_argument("--wait", type=float, default=15.0, help="seconds to wait after --idle's rows")
    ap.add_argument("--reopen", action="store_true",
                    help="after --idle's rows, close and open the folder anew, search once, then wait")
    args = ap.parse_args()
    main(args.folder, [int(x) for x in args.steps.split(",") if x], args.idle, args.wait, args.reopen)
