"""The full-text half of recall by filter kind, on a store that bench_memory.py kept (read-only).

For each filter kind of filtered.py (and no filter): ``index.text_search`` as recall calls it
(k = fulltext_pool, the episode ids only) p50 / p99, and with ``--recall`` ``recall_experiences``
(hybrid) p50 / p99, after warm-up calls. ``--kinds "ids 0.5%,ids 2%"``: a random episode-id set of
that share for each query (a feedback floor's or a session's episodes as recall passes them), a new
one each time, so none of its terms are held in process (a set's first search). The hits of every
search are written out, so two runs (two versions of the code: ``--code DIR``) can be compared hit
for hit and score for score.

    python bench/text_filters.py DATA_FOLDER --queries 40 --recall --out OUT.json [--code DIR]

The store is opened read-only (nothing is written into it): its mirror must have been saved
(bench_memory.py's runs make it ready before they time anything).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(p / 100 * (len(s) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data")
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--code", default=str(HERE.parent), help="the worldgraph checkout to import")
    ap.add_argument("--kinds", default="", help="comma-separated filter kinds (default: all of filtered.py's, "
                    "and none); also 'ids P%%': a random episode-id set of P %% of the episodes for each query")
    ap.add_argument("--recall", action="store_true", help="time recall_experiences too")
    ap.add_argument("--alternate", action="store_true",
                    help="in one process, each call twice, alternately first: with search.WIDE_FILTER_SHARE as "
                    "it is and above 1 (every filter of the mirror's columns to LanceDB's prefilter, as before it)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    sys.path[:0] = [args.code, str(HERE)]
    from corpus import Corpus, PrecomputedEmbedder
    from filtered import KINDS, make_filter

    import worldgraph
    from worldgraph import WorldModel

    assert Path(worldgraph.__file__).resolve().is_relative_to(Path(args.code).resolve()), worldgraph.__file__
    emb = PrecomputedEmbedder()
    t0 = time.perf_counter()
    wm = WorldModel.open(args.data, embedder=emb, read_only=True)
    opened = time.perf_counter() - t0
    tenant = "bench"
    n = wm.store.stats(tenant)["episodes"]
    corpus = Corpus(n, seed=args.seed)
    queries = corpus.queries(args.queries, seed=args.seed + 2)  # bench_memory's queries
    for text, vec, _ in queries:
        emb.vectors[text] = vec
    t0 = time.perf_counter()
    wm.index.warm_mirror(tenant)
    warm = time.perf_counter() - t0
    pool = wm.config.fulltext_pool
    kinds = [k for k in args.kinds.split(",") if k] or ["none", *KINDS]
    rng = np.random.default_rng(args.seed + 9)

    def where_of(kind: str, i: int, topic: int) -> Any:
        """A filter of ``kind``: none, filtered.py's, or "ids P%": a random episode-id set of P % of the
        episodes, another for each query (so its terms are never held: a first search of the set)."""
        if kind == "none":
            return None
        if kind.startswith("ids "):
            share = float(kind.split()[1].rstrip("%")) / 100
            return frozenset(corpus.episode_id(int(r)) for r in rng.choice(n, int(n * share), replace=False))
        return make_filter(kind, corpus, i, topic)
    out: dict[str, Any] = {"data": args.data, "code": args.code, "rows": n, "open_s": round(opened, 2),
                           "mirror_warm_s": round(warm, 2), "kinds": {}}
    if args.alternate:
        alternate(wm, tenant, queries, kinds, where_of, pool, args.recall, out)
        wm.close()
        Path(args.out).write_text(json.dumps(out))
        return 0
    for kind in kinds:
        filters = [where_of(kind, i, t) for i, (_, _, t) in enumerate(queries)]
        wheres = [{"episode_ids": f} if isinstance(f, frozenset) else None if f is None else f.where for f in filters]
        for (text, _, _), where in list(zip(queries, wheres))[:3]:
            wm.index.text_search(tenant, text, k=pool, where=where, columns=["episode_id"])
        times, cpus, hits = [], [], []
        for (text, _, _), where in zip(queries, wheres):
            c0, t0 = time.process_time(), time.perf_counter()
            found = wm.index.text_search(tenant, text, k=pool, where=where, columns=["episode_id"])
            times.append(time.perf_counter() - t0)
            cpus.append(time.process_time() - c0)  # the process's, every thread
            hits.append([(h["episode_id"], round(h["bm25"], 5)) for h in found])
        row: dict[str, Any] = {"text_p50_ms": round(pct(times, 50) * 1000, 2),
                               "text_p99_ms": round(pct(times, 99) * 1000, 2),
                               "text_mean_ms": round(statistics.fmean(times) * 1000, 2),
                               "text_cpu_p50_ms": round(pct(cpus, 50) * 1000, 2), "hits": hits}
        if args.recall and not kind.startswith("ids "):
            calls = [(text, None if f is None else f.role, {"hybrid": True, **({} if f is None else f.options)})
                     for (text, _, _), f in zip(queries, filters)]
            for text, role, opts in calls[:3]:
                wm.recall_experiences(tenant, role, text, 5, opts)
            rt = []
            for text, role, opts in calls:
                t0 = time.perf_counter()
                wm.recall_experiences(tenant, role, text, 5, opts)
                rt.append(time.perf_counter() - t0)
            row |= {"recall_p50_ms": round(pct(rt, 50) * 1000, 2), "recall_p99_ms": round(pct(rt, 99) * 1000, 2)}
        out["kinds"][kind] = row
        print(f"{kind:<15} text p50 {row['text_p50_ms']:7.2f} p99 {row['text_p99_ms']:7.2f} CPU p50 {row['text_cpu_p50_ms']:7.2f}"
              + (f"   recall p50 {row['recall_p50_ms']:7.2f} p99 {row['recall_p99_ms']:7.2f}" if args.recall else ""),
              flush=True)
    out["texts"] = dict(wm.index._texts.counts)
    wm.close()
    Path(args.out).write_text(json.dumps(out))
    return 0


def alternate(wm: Any, tenant: str, queries: list[Any], kinds: list[str], where_of: Any, pool: int, recall: bool,
              out: dict[str, Any]) -> None:
    """``--alternate``: per kind and query, the same call with the wide check of the mirror's filters
    on (``search.WIDE_FILTER_SHARE``) and off (above 1), the two in turn first, in one process."""
    from worldgraph.memory.index import search

    share = search.WIDE_FILTER_SHARE
    for kind in kinds:
        filters = [where_of(kind, i, t) for i, (_, _, t) in enumerate(queries)]
        row: dict[str, Any] = {}
        steps = [("text", lambda q, f: wm.index.text_search(tenant, q, k=pool, where=None if f is None else f.where,
                                                           columns=["episode_id"]))]
        if recall:
            steps.append(("recall", lambda q, f: wm.recall_experiences(
                tenant, None if f is None else f.role, q, 5, {"hybrid": True, **({} if f is None else f.options)})))
        for name, call in steps:
            times: dict[str, list[float]] = {"on": [], "off": []}
            for i, ((text, _, _), f) in enumerate(zip(queries, filters)):
                for side in (("on", "off") if i % 2 else ("off", "on")):
                    search.WIDE_FILTER_SHARE = share if side == "on" else 2.0
                    t0 = time.perf_counter()
                    call(text, f)
                    if i >= 3:  # (the first three: warm-up)
                        times[side].append(time.perf_counter() - t0)
            search.WIDE_FILTER_SHARE = share
            for side, ts in times.items():
                row[f"{name}_{side}_p50_ms"] = round(pct(ts, 50) * 1000, 2)
                row[f"{name}_{side}_p99_ms"] = round(pct(ts, 99) * 1000, 2)
        out["kinds"][kind] = row
        print(f"{kind:<15} " + "  ".join(f"{key[:-3]} {v:7.2f}" for key, v in row.items()), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
