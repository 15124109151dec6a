"""Filtered recall in bench_memory.py: one filter kind at a time, from 50 % of the episodes down to 0.1 %.

For each kind, every query gets its own filter (the role of the query's topic, one agent of it, a
canvas, a date window that moves with the query, ...). The bench times
``recall_experiences`` with the filter as a caller passes it, and measures the index's filtered
vector search (``index.vector_search(k=10, where=...)``) against the exact filtered top 10: numpy,
brute-force cosine over every vector that passes the filter, computed from the corpus (the library
is not involved) and cached beside a kept store, so a resumed run does not compute it again.
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from corpus import DAY, ROLES, Corpus, _iso, unit_rows

TRUTH_VERSION = 1  # bump when a filter below changes: the cached truth is keyed by it


@dataclass
class Filter:
    """One query's filter, three ways: the recall options, the index's ``where`` and a row mask."""

    role: str | None
    options: dict[str, Any]
    where: dict[str, Any]
    mask: Callable[[dict[str, np.ndarray]], np.ndarray]


def _window(anchor: float, end_days: float, length_s: float) -> tuple[float, float]:
    end = anchor - end_days * DAY
    return end - length_s, end


def make_filter(kind: str, corpus: Corpus, q: int, topic: int) -> Filter:
    """Query ``q``'s filter of ``kind`` (``KINDS``); ``topic`` is the query's topic."""
    r = int(corpus.topic_role[topic])
    role = ROLES[r]
    if kind == "role":  # ~13 %
        return Filter(role, {}, {"agent_role": role}, lambda m: m["role"] == r)
    if kind == "agent":  # ~1.6 %
        a = q % 8
        return Filter(None, {"agent_id": f"{role.lower()}-{a}"}, {"agent_id": f"{role.lower()}-{a}"},
                      lambda m: (m["role"] == r) & (m["agent"] == a))
    if kind in ("canvas", "canvas x10"):  # ~0.08 % / ~0.8 %
        cs = [(q * 37 + j * 50) % 500 for j in range(1 if kind == "canvas" else 10)]
        names = [f"canvas-{c}" for c in cs]
        return Filter(None, {"canvas_ids": names}, {"canvas_ids": names}, lambda m: np.isin(m["canvas"], cs))
    if kind == "success":  # ~75 %
        return Filter(None, {"success_only": True}, {"success_only": True}, lambda m: m["success"])
    lengths = {"45 days": 45 * DAY, "role + 30 days": 30 * DAY, "1 day": DAY, "2 hours": 2 * 3600.0}
    if kind in lengths:  # ~50 %, ~4 %, ~1.1 %, ~0.09 %
        start, end = _window(corpus.anchor, (q * 7) % (90 - lengths[kind] / DAY), lengths[kind])
        opts = {"date_range": {"start": _iso(start), "end": _iso(end)}}
        where: dict[str, Any] = {"start": start, "end": end}
        if kind.startswith("role"):
            return Filter(role, opts, {"agent_role": role, **where},
                          lambda m: (m["role"] == r) & (m["ts"] >= start) & (m["ts"] <= end))
        return Filter(None, opts, where, lambda m: (m["ts"] >= start) & (m["ts"] <= end))
    raise ValueError(f"unknown filter kind {kind!r}; known: {KINDS}")


KINDS = ("success", "45 days", "role", "role + 30 days", "agent", "1 day", "canvas x10", "2 hours", "canvas")


def exact_truth(corpus: Corpus, queries: list[tuple[str, np.ndarray, int]], kinds: tuple[str, ...], k: int,
                cache_dir: Path | None) -> dict[str, Any]:
    """For each kind: the exact filtered top ``k`` row numbers of each query (-1: fewer rows pass)
    and the share of rows passing each query's filter. Cached in ``cache_dir`` (keyed by the corpus,
    the queries and ``TRUTH_VERSION``)."""
    key = hashlib.sha256(json.dumps([TRUTH_VERSION, corpus.n, corpus.seed, corpus.anchor, k, list(kinds),
                                     [t for t, _, _ in queries]]).encode()).hexdigest()[:16]
    path = cache_dir / f"filtered-truth-{key}.npz" if cache_dir is not None else None
    if path is not None and path.exists():
        data = np.load(path)
        return {kind: {"rows": data[f"{kind}/rows"], "share": data[f"{kind}/share"]} for kind in kinds} | {
            "seconds": 0.0, "cached": True}
    t0 = time.perf_counter()
    qv = unit_rows(np.stack([v for _, v, _ in queries]))
    filters = {kind: [make_filter(kind, corpus, i, t) for i, (_, _, t) in enumerate(queries)] for kind in kinds}
    best = {kind: (np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64))
            for kind in kinds}
    passing = {kind: np.zeros(len(queries), np.int64) for kind in kinds}
    for first, vectors, meta in corpus.meta_chunks():
        sims = qv @ vectors.T
        rows = np.arange(first, first + len(vectors))
        for kind in kinds:
            bs, br = best[kind]
            for i, f in enumerate(filters[kind]):
                keep = f.mask(meta)
                passing[kind][i] += int(keep.sum())
                if not keep.any():
                    continue
                s = np.concatenate([bs[i], sims[i][keep]])
                rr = np.concatenate([br[i], rows[keep]])
                top = np.argpartition(-s, k - 1)[:k] if len(s) > k else np.arange(len(s))
                bs[i], br[i] = s[top], rr[top]
    out: dict[str, Any] = {}
    for kind in kinds:
        bs, br = best[kind]
        order = np.argsort(-bs, axis=1, kind="stable")
        out[kind] = {"rows": np.take_along_axis(br, order, axis=1), "share": passing[kind] / corpus.n}
    if path is not None:
        np.savez(path, **{f"{kind}/{part}": out[kind][part] for kind in kinds for part in ("rows", "share")})
    return out | {"seconds": round(time.perf_counter() - t0, 1), "cached": False}


def bench_filtered(wm: Any, tenant: str, emb: Any, corpus: Corpus, queries: list[tuple[str, np.ndarray, int]],
                   cache_dir: Path | None, log: Callable[[str], None], kinds: tuple[str, ...] = KINDS,
                   k: int = 10) -> dict[str, Any]:
    """Per filter kind: recall latency (p50 / p99, after 5 warm-up calls), mean results, the share of
    episodes passing, and the index's filtered recall@k against the exact filtered top k."""
    from bench_memory import summary_ms  # the bench's percentiles (imported late: bench_memory imports this)

    truth = exact_truth(corpus, queries, kinds, k, cache_dir)
    how = "cached" if truth["cached"] else f"computed in {truth['seconds']} s"
    log(f"  filtered truth: {how}")
    for text, vec, _ in queries:
        emb.vectors[text] = vec
    out: dict[str, Any] = {}
    for kind in kinds:
        filters = [make_filter(kind, corpus, i, t) for i, (_, _, t) in enumerate(queries)]
        calls = [(text, f.role, {"hybrid": True, **f.options}) for (text, _, _), f in zip(queries, filters)]
        for text, role, opts in calls[:5]:
            wm.recall_experiences(tenant, role, text, 5, opts)
        samples, results = [], []
        for text, role, opts in calls:
            t0 = time.perf_counter()
            results.append(len(wm.recall_experiences(tenant, role, text, 5, opts)))
            samples.append(time.perf_counter() - t0)
        at_k = []
        for (_, vec, _), f, want_rows in zip(queries, filters, truth[kind]["rows"]):
            want = {corpus.episode_id(int(r)) for r in want_rows if r >= 0}
            if not want:
                continue
            got = [h["episode_id"] for h in wm.index.vector_search(tenant, vec, k=k, where=f.where,
                                                                   columns=["episode_id"])]
            at_k.append(len(want & set(got)) / len(want))
        share = truth[kind]["share"]
        out[kind] = {**summary_ms(samples), "mean_results": round(statistics.fmean(results), 2),
                     "share_median": round(float(np.median(share)), 5),
                     "share_min": round(float(share.min()), 5), "share_max": round(float(share.max()), 5),
                     "ann_recall_at_k": round(statistics.fmean(at_k), 4) if at_k else None,
                     "ann_min_at_k": round(min(at_k), 2) if at_k else None}
        log(f"    {kind:<15} {out[kind]['share_median']:8.3%} of episodes  recall p50 {out[kind]['p50_ms']:6.1f} ms "
            f"p99 {out[kind]['p99_ms']:6.1f}  ANN recall@{k} {out[kind]['ann_recall_at_k']}")
    return {"truth_seconds": truth["seconds"], "truth_cached": truth["cached"], "kinds": out}


def filtered_table(results: list[dict[str, Any]]) -> str:
    """One line per size and filter kind."""
    lines = ["size       | filter          | episodes passing | recall p50 / p99 ms | ANN recall@10 vs exact filtered"]
    for r in results:
        for kind, f in (r.get("recall_by_filter") or {}).get("kinds", {}).items():
            lines.append(f"{r['size']:<10,} | {kind:<15} | {f['share_median']:>15.3%} | "
                         f"{f['p50_ms']:>8.1f} / {f['p99_ms']:<8.1f} | {f['ann_recall_at_k']} (min {f['ann_min_at_k']})")
    return "\n".join(lines)
