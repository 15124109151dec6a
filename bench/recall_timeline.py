"""Where a recall's time goes, on a store that ``bench_memory.py --keep DIR`` built and kept (read only).

    PYTHONPATH=/path/to/tree python bench/recall_timeline.py --store DIR/wg-bench-N --size N \\
        --kinds "plain,role + 30 days,agent" --out run.json
    python bench/recall_timeline.py --compare a.json b.json ...       # the runs side by side
    PYTHONPATH=/path/to/tree python bench/recall_timeline.py --store ... --size N --alone  # each part alone

Per filter kind (``plain``, or a kind of filtered.py), ``--queries`` recalls as bench_memory times
them (limit 5, hybrid, after 10 warm-up calls): wall and process CPU (every thread) per call, p50 /
p99; the start and end of the index's vector and text searches and of the store's record reads within
each recall (the text search runs on recall's pool thread), and the time from the end of the text
search to the end of the recall; then, untimed, every query's top 10 ids and relevance scores (limit
10), to check two source trees give the same results. ``--alone``: per kind, the vector search and
the text search (with the kind's filter), the records of their hits and the whole recall, each
alone over the queries. ``--profile FILE``:
cProfile of the first kind's recalls (the calling thread only). Writes nothing into the store.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

# worldgraph first: the package PYTHONPATH names is the one measured (as in recall_probe.py)
import worldgraph  # isort: skip

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_memory as bm  # noqa: E402
from filtered import make_filter  # noqa: E402

PARTS = ("vector_search", "text_search", "episodes_with_feedback")


class Timeline:
    """The calls of ``PARTS`` made during one recall: (name, start, end), from any thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float, float]] = []
        self.on = False
        self.lock = threading.Lock()

    def wrap(self, obj: Any, name: str) -> None:
        fn = getattr(obj, name)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.on:
                    with self.lock:
                        self.calls.append((name, t0, time.perf_counter()))

        setattr(obj, name, timed)


def _ms(values: list[float], p: float) -> float:
    return round(float(np.percentile(values, p)), 2)


def run_kind(wm: Any, corpus: Any, queries: list[Any], kind: str, tl: Timeline, prof: Any) -> dict[str, Any]:
    calls = []
    for i, (text, _, topic) in enumerate(queries):
        opts: dict[str, Any] = {"hybrid": True}
        role = None
        if kind != "plain":
            f = make_filter(kind, corpus, i, topic)
            role, opts = f.role, {**opts, **f.options}
        calls.append((text, role, opts))
    for text, role, opts in calls[:10]:
        wm.recall_experiences(bm.TENANT, role, text, 5, opts)
    wall, cpu, marks = [], [], []
    if prof is not None:
        prof.enable()
    for text, role, opts in calls:
        tl.calls.clear()
        tl.on = True
        t0, c0 = time.perf_counter(), time.process_time()
        wm.recall_experiences(bm.TENANT, role, text, 5, opts)
        t1, c1 = time.perf_counter(), time.process_time()
        tl.on = False
        wall.append((t1 - t0) * 1000)
        cpu.append((c1 - c0) * 1000)
        marks.append([(name, (a - t0) * 1000, (b - t0) * 1000) for name, a, b in tl.calls] + [("end", (t1 - t0) * 1000, 0.0)])
    if prof is not None:
        prof.disable()
    at: dict[str, list[float]] = {}
    for m in marks:
        for name in PARTS:
            first = next((x for x in m if x[0] == name), None)
            if first is not None:
                at.setdefault(f"{name} start", []).append(first[1])
                at.setdefault(f"{name} end", []).append(first[2])
        text_end = next((x[2] for x in m if x[0] == "text_search"), None)
        if text_end is not None:
            at.setdefault("after the text search", []).append(m[-1][1] - text_end)
    results = [wm.recall_experiences(bm.TENANT, role, text, 10, opts) for text, role, opts in calls]
    return {"p50": _ms(wall, 50), "p99": _ms(wall, 99), "cpu_p50": _ms(cpu, 50), "cpu_p99": _ms(cpu, 99),
            "timeline_p50": {k: round(statistics.median(v), 2) for k, v in at.items()},
            "ids": [[r.episode_id for r in rs] for rs in results],
            "scores": [[round(float(r.relevance_score), 5) for r in rs] for rs in results],
            "wall": wall, "cpu": cpu}


def alone(wm: Any, corpus: Any, queries: list[Any], kind: str) -> dict[str, Any]:
    """Each part of a recall of filter ``kind`` alone over the queries (the index's searches with
    the filter as recall passes it to them, without a store-only part such as feedback)."""
    cfg, out, hits = wm.config, {}, {}
    filters = {text: None if kind == "plain" else make_filter(kind, corpus, i, topic)
               for i, (text, _, topic) in enumerate(queries)}

    def timed(name: str, fn: Any) -> None:
        for text, vec, _ in queries[:10]:
            fn(text, vec)
        wall, cpu = [], []
        for text, vec, _ in queries:
            t0, c0 = time.perf_counter(), time.process_time()
            fn(text, vec)
            wall.append((time.perf_counter() - t0) * 1000)
            cpu.append((time.process_time() - c0) * 1000)
        out[name] = {"p50": _ms(wall, 50), "cpu_p50": _ms(cpu, 50), "cpu_mean": round(statistics.fmean(cpu), 2)}
        print(kind, name, out[name], file=sys.stderr)

    def where(text: str) -> dict[str, Any] | None:
        f = filters[text]
        return None if f is None else f.where

    def vector(text: str, vec: np.ndarray) -> None:
        hits[text] = [h["episode_id"] for h in wm.index.vector_search(bm.TENANT, vec, k=cfg.candidate_pool,
                                                                       columns=["episode_id"], where=where(text))]

    def words(text: str, _vec: np.ndarray) -> None:
        found = wm.index.text_search(bm.TENANT, text, k=cfg.fulltext_pool, columns=["episode_id"], where=where(text))
        hits[text] = list(dict.fromkeys([*hits[text], *(h["episode_id"] for h in found)]))

    def recall(text: str, _vec: np.ndarray) -> None:
        f = filters[text]
        wm.recall_experiences(bm.TENANT, None if f is None else f.role, text, 5,
                              {"hybrid": True, **({} if f is None else f.options)})

    timed("vector_search", vector)
    timed("text_search", words)
    timed("records", lambda text, _vec: wm.store.episodes_with_feedback(bm.TENANT, hits[text]))
    timed("recall", recall)
    return out


def compare(paths: list[str]) -> None:
    runs = [(p, json.loads(Path(p).read_text())) for p in paths]
    first = runs[0][1]["kinds"]
    for kind in first:
        print(f"== {kind}")
        for path, run in runs:
            r = run["kinds"][kind]
            same = sum(a == b for a, b in zip(first[kind]["ids"], r["ids"]))
            same_scores = sum(a == b for a, b in zip(first[kind]["scores"], r["scores"]))
            print(f"{path}: wall p50 {r['p50']} p99 {r['p99']}, CPU p50 {r['cpu_p50']} p99 {r['cpu_p99']}, "
                  f"after the text search p50 {r['timeline_p50'].get('after the text search')}; against the first: "
                  f"{same} of {len(r['ids'])} same ids, {same_scores} same scores")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store")
    ap.add_argument("--size", type=int)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20260101, help="bench_memory's --seed of that store")
    ap.add_argument("--kinds", default="plain", help="plain and/or kinds of filtered.py, comma-separated")
    ap.add_argument("--alone", action="store_true", help="each part alone instead")
    ap.add_argument("--profile", default=None, metavar="FILE")
    ap.add_argument("--out", default=None)
    ap.add_argument("--compare", nargs="+", metavar="JSON", help="print runs written by --out side by side")
    args = ap.parse_args(argv)
    if args.compare:
        compare(args.compare)
        return 0
    if not args.store or not args.size:
        ap.error("--store and --size are needed (or --compare)")
    corpus = bm.Corpus(args.size, seed=args.seed)
    emb = bm.PrecomputedEmbedder()
    wm = bm.WorldModel.open(Path(args.store), embedder=emb)
    out: dict[str, Any] = {"worldgraph": str(Path(worldgraph.__file__).parent), "kinds": {}}
    try:
        wm.index.warm_mirror(bm.TENANT)  # as bench_memory: the mirror, its lists and postings ready
        wm.index.wait_for_maintenance()
        queries = corpus.queries(args.queries, seed=args.seed + 2)  # bench_memory's queries
        for text, vec, _ in queries:
            emb.vectors[text] = vec
        if args.alone:
            out["alone"] = {kind: alone(wm, corpus, queries, kind) for kind in args.kinds.split(",")}
        else:
            tl = Timeline()
            tl.wrap(wm.index, "vector_search")
            tl.wrap(wm.index, "text_search")
            tl.wrap(wm.store, "episodes_with_feedback")
            prof = cProfile.Profile() if args.profile else None
            for n, kind in enumerate(args.kinds.split(",")):
                r = out["kinds"][kind] = run_kind(wm, corpus, queries, kind, tl, prof if n == 0 else None)
                print(kind, {k: v for k, v in r.items() if k not in ("ids", "scores", "wall", "cpu")}, file=sys.stderr)
            if prof is not None:
                prof.dump_stats(args.profile)
    finally:
        wm.close()
    out["load"] = os.getloadavg()
    if args.out:
        Path(args.out).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
