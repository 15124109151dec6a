"""The three ways a mirrored table finds a narrow filter's rows, each timed alone, per filter kind,
on a store that ``bench_memory.py --keep DIR`` built and kept (read only):

    PYTHONPATH=/path/to/tree python bench/filter_paths.py --store DIR/wg-bench-N --size N

For ``--queries`` queries of each kind of filtered.py (each with its own filter): the p50 of
``Mirror.mask`` (a numpy pass over every row of each filter column) and of
``MirrorSearch._indexed_rows`` with its cost model switched off (the LanceDB scalar index of the
filter's narrowest clause, its row addresses mapped to mirror rows, the other clauses checked),
of ``MirrorSearch._posted_rows`` with its cost model switched off (the mirror's postings of the
narrowest clause they answer, filter_postings.py; built first), the rows each gives (the same), and
which the cost models pick (``mirror_search.MASK_NS_PER_ROW``, ``INDEX_NS_PER_ROW`` and
``POSTED_NS_PER_ROW``: bench/README.md, "A narrow filter's rows: the cheaper way, and the
nearest lists" and "A narrow filter's rows from the mirror's postings").
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

from worldgraph.memory.index import filter_postings as postings  # noqa: E402
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
        idx._mirrors.wait()
        t = time.perf_counter()  # (built again here, timed: the background built them at any size)
        mirror.postings = postings.build({f: mirror.cols.segments(f) for f in postings.FIELDS}, mirror.cols.n)
        print(f"postings: {mirror.postings.covered:,} rows, {mirror.postings.nbytes / 1e6:.0f} MB, "
              f"built in {time.perf_counter() - t:.2f} s")
        queries = corpus.queries(args.queries, seed=args.seed + 2)
        priced = mirror_search.MASK_NS_PER_ROW
        print(f"{'kind':<16} {'rows':>9} {'mask ms':>8} {'index ms':>9} {'postings ms':>12}  picked")
        for kind in KINDS:
            mask_s, index_s, posted_s, picked, rows = [], [], [], [], 0
            for i, (_, _, topic) in enumerate(queries):
                where = make_filter(kind, corpus, i, topic).where
                share = mirror.share(where)
                mirror_search.MASK_NS_PER_ROW = priced
                picked.append("postings" if idx._posted_rows(mirror, where) is not None else
                              "index" if idx._indexed_rows(part, ds, mirror, where, share) is not None else "mask")
                t0 = time.perf_counter()
                keep = mirror.mask(where)
                t1 = time.perf_counter()
                mirror_search.MASK_NS_PER_ROW = float("inf")  # the index whenever a clause has one
                found = idx._indexed_rows(part, ds, mirror, where, share)
                t2 = time.perf_counter()
                posted = idx._posted_rows(mirror, where)
                t3 = time.perf_counter()
                mask_s.append(t1 - t0)
                index_s.append(t2 - t1)
                posted_s.append(t3 - t2)
                rows = int(keep.sum())
                for way, got in (("index", found), ("postings", posted)):
                    if got is not None and not np.array_equal(np.sort(got), np.flatnonzero(keep)):
                        print(f"  {kind}: the {way}'s rows differ from the mask's ({len(got)} against {rows})")
            mirror_search.MASK_NS_PER_ROW = priced
            ways = ", ".join(f"{w} {picked.count(w)}" for w in ("postings", "index", "mask") if picked.count(w))
            print(f"{kind:<16} {rows:>9,} {statistics.median(mask_s) * 1000:>8.2f} "
                  f"{statistics.median(index_s) * 1000:>9.2f} {_ms(posted_s):>12}  {ways}")
    finally:
        wm.close()
    return 0


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1000:.2f}" if seconds else "-"


if __name__ == "__main__":
    raise SystemExit(main())
