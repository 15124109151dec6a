"""The two ways a mirrored table finds a narrow filter's rows, each timed alone, per filter kind,
on a store that ``bench_memory.py --keep DIR`` built and kept (read only):

    PYTHONPATH=/path/to/tree python bench/filter_paths.py --store DIR/wg-bench-N --size N

For ``--queries`` queries of each kind of filtered.py (each with its own filter): the p50 of
``Mirror.mask`` (a numpy pass over every row of each filter column) and of
``MirrorSearch._indexed_rows`` with its cost model switched off (the LanceDB scalar index of the
filter's narrowest clause, its row addresses mapped to mirror rows, the other clauses checked),
the rows each gives (the same), and which of the two the cost model picks
(``mirror_search.MASK_NS_PER_ROW`` and ``INDEX_NS_PER_ROW``: bench/README.md, "A narrow filter's
rows: the cheaper way, and the nearest lists").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import worldgraph  # noqa: F401  (isort: skip) the package PYTHONPATH names is the one measured

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_memory as bm  # noqa: E402
from filtered import KINDS, make_filter  # noqa: E402

from worldgraph.memory.index import mirror_search  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="a store kept by bench_memory.py --keep DIR: DIR/wg-bench-N")
    ap.add_argument("--size", type=int, required=True, help="N: the episode count that store was built with")
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--seed", type=int, default=20260101, help="bench_memory's --seed of that store")
    args = ap.parse_args(argv)
    corpus = bm.Corpus(args.size, seed=args.seed)
    wm = bm.WorldModel.open(args.store, embedder=bm.PrecomputedEmbedder())
    try:
        idx = wm.index
        idx.warm_mirror(bm.TENANT)
        idx.wait_for_maintenance()
        part = idx._part(bm.TENANT)
        ds = part.latest_dataset()
        mirror = idx._mirrors.get(part.name, ds)
        if mirror is None:
            ap.error(f"--store {args.store}: its table is not searched through a mirror")
        queries = corpus.queries(args.queries, seed=args.seed + 2)
        priced = mirror_search.MASK_NS_PER_ROW
        print(f"{'kind':<16} {'rows':>9} {'mask ms':>8} {'index ms':>9}  picked")
        for kind in KINDS:
            mask_s, index_s, picked, rows = [], [], [], 0
            for i, (_, _, topic) in enumerate(queries):
                where = make_filter(kind, corpus, i, topic).where
                share = mirror.share(where)
                mirror_search.MASK_NS_PER_ROW = priced
                picked.append(idx._indexed_rows(part, ds, mirror, where, share) is not None)
                t0 = time.perf_counter()
                keep = mirror.mask(where)
                t1 = time.perf_counter()
                mirror_search.MASK_NS_PER_ROW = float("inf")  # the index whenever a clause has one
                found = idx._indexed_rows(part, ds, mirror, where, share)
                t2 = time.perf_counter()
                mask_s.append(t1 - t0)
                index_s.append(t2 - t1)
                rows = int(keep.sum())
                if found is not None and not np.array_equal(np.sort(found), np.flatnonzero(keep)):
                    print(f"  {kind}: the index's rows differ from the mask's ({len(found)} against {rows})")
            mirror_search.MASK_NS_PER_ROW = priced
            print(f"{kind:<16} {rows:>9,} {statistics.median(mask_s) * 1000:>8.2f} "
                  f"{statistics.median(index_s) * 1000:>9.2f}  index {sum(picked)} of {len(picked)}")
    finally:
        wm.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
