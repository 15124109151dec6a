"""Recall filtered by what only the store holds (feedback floor, an episode-id set such as a
session's), on a store kept by bench_memory.py (``--keep``: it rates 1 % of the episodes, uniform
scores in [-1, 1]). One process, one code version: run it alternately with two checkouts
(``PYTHONPATH=<checkout>``) on two copies of the store for a before/after table.

Per kind: ``recall_experiences`` p50 / p99 (limit 5, hybrid, after 5 warm-up calls, a 3 s pause
for what a version reads in the background, and 5 more), the first call's time, the mean count of
results, the vector candidates' recall@10 against the exact filtered top 10 (numpy over the stored
vectors of every episode that passes), and the full-text hits' overlap@10 with LanceDB's own
filtered BM25 (pylance directly, the ids as a prefilter): plain, and tie-aware (a hit counts when
LanceDB scores it at least as high as its own 10th: the bench's templated texts tie a lot). The
candidates are what recall ranks: with an ``episode_ids`` filter in the index, its filtered top 10;
without (a version before it), the filter applied to the index's top ``candidate_pool`` (what
recall did), best 10 of those. Then the index alone (``vector_search`` k 100 and ``text_search``
k 50, as recall asks) with random episode-id sets of 0.1 % to 50 % of the table: p50 / p99 each.

    python bench/store_filters.py DATA_FOLDER --queries 50 --out result.json
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from corpus import ROLES, Corpus, PrecomputedEmbedder

TENANT = "bench"


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.asarray(values) * 1000.0, p))


def rated(data: Path) -> dict[str, float]:
    """Each rated episode's mean raw score, read from SQLite directly (not through the library)."""
    con = sqlite3.connect(f"file:{data / 'worldgraph.db'}?mode=ro", uri=True)
    try:
        return {e: float(m) for e, m in con.execute(
            "SELECT episode_id, AVG(score) FROM feedback WHERE tenant_id = ? GROUP BY episode_id", (TENANT,))}
    finally:
        con.close()


def vectors_and_roles(wm: Any, ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    vecs, roles = [], []
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        rows = {r["episode_id"]: r for r in wm.index.get(TENANT, chunk)}
        vecs += [np.asarray(rows[e]["vector"], np.float32) for e in chunk]
        roles += [rows[e]["agent_role"] for e in chunk]
    m = np.stack(vecs)
    return m / np.linalg.norm(m, axis=1, keepdims=True), np.array(roles, dtype=object)


def candidates(wm: Any, vec: np.ndarray, where: dict[str, Any], passing: set[str], k: int) -> list[str]:
    """The filtered vector top ``k`` as this version's recall gets it (see the module docstring)."""
    from worldgraph.errors import InvalidInputError

    try:
        hits = wm.index.vector_search(TENANT, vec, k=k, where={**where, "episode_ids": sorted(passing)},
                                      columns=["episode_id"])
        return [h["episode_id"] for h in hits]
    except InvalidInputError:  # no episode_ids filter in this version: the top candidate_pool, then the filter
        hits = wm.index.vector_search(TENANT, vec, k=wm.config.candidate_pool, where=where or None,
                                      columns=["episode_id"])
        return [h["episode_id"] for h in hits if h["episode_id"] in passing][:k]


def text_overlap(wm: Any, data: Path, queries: list[Any], corpus: Any, kind: str, keep: np.ndarray,
                 ids: list[str], roles: np.ndarray, into: dict[str, Any]) -> None:
    """The index's filtered full-text top 10 (as recall asks it: the ids pushed in) against LanceDB's
    own prefiltered BM25 on the same rows: overlap@10, plain and tie-aware (see the docstring)."""
    import lance
    from lance.query import MatchQuery

    from worldgraph.memory.index.schema import table_name

    ds = lance.dataset(str(data / "lancedb" / f"{table_name(TENANT)}.lance"))
    plain, tied = [], []
    for text, _vec, topic in queries[:20]:
        role = ROLES[int(corpus.topic_role[topic])] if kind.startswith("role") else None
        passing = sorted(ids[i] for i in np.flatnonzero(keep & (roles == role) if role else keep))
        where = {"episode_ids": passing, **({"agent_role": role} if role else {})}
        got = [h["episode_id"] for h in wm.index.text_search(TENANT, text, k=10, where=where, columns=["episode_id"])]
        pred = "episode_id IN (" + ", ".join(f"'{e}'" for e in passing) + ")"
        tbl = ds.to_table(columns=["episode_id", "_score"], full_text_query=MatchQuery(text, "text"), filter=pred,
                          prefilter=True, limit=len(passing))
        scores = dict(zip(tbl.column("episode_id").to_pylist(), tbl.column("_score").to_pylist()))
        ref = tbl.column("episode_id").to_pylist()[:10]
        if not ref:
            continue
        tenth = scores[ref[-1]]
        plain.append(len(set(ref) & set(got)) / len(ref))
        tied.append(sum(1 for e in got[:len(ref)] if scores.get(e, -1.0) >= tenth - 1e-4) / len(ref))
    into["text_overlap_at_10"] = round(statistics.fmean(plain), 3) if plain else None
    into["text_tie_overlap_at_10"] = round(statistics.fmean(tied), 3) if tied else None


def index_shares(wm: Any, corpus: Any, queries: list[Any], out: dict[str, Any]) -> None:
    """The index alone with a random episode-id set of each share of the table (10 queries each,
    after 3 warm-up searches and a 3 s pause): vector_search k 100 and text_search k 50 p50 / p99."""
    n = int(wm.index.count(TENANT))
    rng = np.random.default_rng(7)
    for share in (0.001, 0.01, 0.05, 0.2, 0.5):
        some = frozenset(corpus.episode_id(int(i)) for i in rng.choice(n, int(n * share), replace=False))
        where = {"episode_ids": some}
        for text, vec, _ in queries[:3]:
            wm.index.vector_search(TENANT, vec, k=100, where=where, columns=["episode_id"])
            wm.index.text_search(TENANT, text, k=50, where=where, columns=["episode_id"])
        time.sleep(3)
        vs, ts = [], []
        for text, vec, _ in queries[3:13]:
            t1 = time.perf_counter()
            wm.index.vector_search(TENANT, vec, k=100, where=where, columns=["episode_id"])
            vs.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
            wm.index.text_search(TENANT, text, k=50, where=where, columns=["episode_id"])
            ts.append(time.perf_counter() - t1)
        row = {"vector_p50_ms": round(pct(vs, 50), 1), "vector_p99_ms": round(pct(vs, 99), 1),
               "text_p50_ms": round(pct(ts, 50), 1), "text_p99_ms": round(pct(ts, 99), 1)}
        out["kinds"][f"ids {share:.1%} (index)"] = row
        print(f"ids {share:6.1%} (index)       vector p50 {row['vector_p50_ms']:6.1f} / p99 {row['vector_p99_ms']:6.1f}"
              f"  text p50 {row['text_p50_ms']:6.1f} / p99 {row['text_p99_ms']:6.1f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data", type=Path)
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    from worldgraph import WorldModel

    corpus = Corpus(1, seed=args.seed)  # the centroids, topics and query texts only
    queries = corpus.queries(args.queries, seed=args.seed + 2)
    emb = PrecomputedEmbedder()
    for text, vec, _ in queries:
        emb.vectors[text] = vec
    means = rated(args.data)
    t0 = time.perf_counter()
    wm = WorldModel.open(args.data, embedder=emb)
    opened = time.perf_counter() - t0
    while not wm.index.warm_mirror(TENANT, timeout=600):
        pass
    warm = time.perf_counter() - t0
    ids = sorted(means)
    unit, roles = vectors_and_roles(wm, ids)
    scores = np.array([means[e] for e in ids])
    rng = np.random.default_rng(args.seed + 5)
    # plain and role: the same queries without a store filter, the baseline of the same process
    kinds: dict[str, float | None] = {"plain": None, "role": None, "feedback >= 0.5": 0.5, "feedback >= 0.9": 0.9,
                                      "role + feedback >= 0.5": 0.5}
    out: dict[str, Any] = {"open_s": round(opened, 2), "warm_s": round(warm, 2), "rated": len(ids),
                           "mirror": wm.index.mirror_stats(TENANT), "kinds": {}}
    for kind, floor in kinds.items():
        keep = (scores + 1.0) / 2.0 >= floor if floor is not None else np.ones(len(ids), bool)
        calls, at_k, results, samples, shares = [], [], [], [], []
        for text, vec, topic in queries:
            role = ROLES[int(corpus.topic_role[topic])] if kind.startswith("role") else None
            mask = keep & (roles == role) if role else keep
            passing = {ids[i] for i in np.flatnonzero(mask)}
            shares.append(len(passing))
            sims = unit[mask] @ (vec / np.linalg.norm(vec))
            truth = {ids[i] for i in np.flatnonzero(mask)[np.argsort(-sims)[:10]]}
            calls.append((text, role, {"hybrid": True, **({} if floor is None else {"min_feedback_score": floor})}))
            if floor is not None:  # (the plain kinds' recall@10 is bench_memory.py's)
                got = candidates(wm, vec, {"agent_role": role} if role else {}, passing, 10)
                at_k.append(len(truth & set(got)) / max(len(truth), 1))
        if floor is not None:
            text_overlap(wm, args.data, queries, corpus, kind, keep, ids, roles, out["kinds"].setdefault(kind, {}))
        t1 = time.perf_counter()
        wm.recall_experiences(TENANT, calls[0][1], calls[0][0], 5, calls[0][2])
        first = time.perf_counter() - t1
        for text, role, opts in calls[1:5]:
            wm.recall_experiences(TENANT, role, text, 5, opts)
        time.sleep(3)
        for text, role, opts in calls[5:10]:
            wm.recall_experiences(TENANT, role, text, 5, opts)
        for text, role, opts in calls:
            t1 = time.perf_counter()
            results.append(len(wm.recall_experiences(TENANT, role, text, 5, opts)))
            samples.append(time.perf_counter() - t1)
        share = statistics.fmean(shares) / max(int(wm.index.count(TENANT)), 1)
        out["kinds"].setdefault(kind, {}).update({
                              "first_ms": round(first * 1000, 1),
                              "p50_ms": round(pct(samples, 50), 1), "p99_ms": round(pct(samples, 99), 1),
                              "mean_results": round(statistics.fmean(results), 2),
                              "recall_at_10": round(statistics.fmean(at_k), 4) if at_k else None,
                              "min_at_10": round(min(at_k), 2) if at_k else None,
                              "share": round(share, 5) if floor is not None else None})
        got = out["kinds"][kind]
        print(f"{kind:<24} {share if floor is not None else 1:8.3%}  p50 {got['p50_ms']:6.1f} ms  p99 "
              f"{got['p99_ms']:6.1f}  first {got['first_ms']:6.1f}  results {got['mean_results']}  "
              f"recall@10 {got['recall_at_10']}  text overlap@10 {got.get('text_overlap_at_10')} "
              f"(tie-aware {got.get('text_tie_overlap_at_10')})", flush=True)
    index_shares(wm, corpus, queries, out)
    # an episode-id set of one session's size, in the index directly (versions with the filter)
    some = [corpus.episode_id(int(i)) for i in rng.choice(int(wm.index.count(TENANT)), 200, replace=False)]
    try:
        got_vecs, _ = vectors_and_roles(wm, some)
        samples, at_k = [], []
        for _text, vec, _ in queries:
            truth = {some[i] for i in np.argsort(-(got_vecs @ (vec / np.linalg.norm(vec))))[:10]}
            t1 = time.perf_counter()
            hits = wm.index.vector_search(TENANT, vec, k=100, where={"episode_ids": some}, columns=["episode_id"])
            samples.append(time.perf_counter() - t1)
            at_k.append(len(truth & {h["episode_id"] for h in hits[:10]}) / 10)
        out["kinds"]["200 ids (index)"] = {"p50_ms": round(pct(samples, 50), 1), "p99_ms": round(pct(samples, 99), 1),
                                           "recall_at_10": round(statistics.fmean(at_k), 4)}
        print(f"200 ids (index search)   p50 {pct(samples, 50):6.1f} ms  p99 {pct(samples, 99):6.1f}  "
              f"recall@10 {statistics.fmean(at_k)}", flush=True)
    except Exception as exc:  # noqa: BLE001 - a version without the filter
        print(f"200 ids (index search): not available ({type(exc).__name__})", flush=True)
    wm.close()
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    raise SystemExit(main())
