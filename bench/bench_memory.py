"""Episodic-memory benchmark: record throughput, recall latency, ANN recall, disk and memory.

    python bench/bench_memory.py --sizes 10000,100000 --queries 200 --batch 1000 \
        --out bench/results/memory.json

Everything is generated from fixed seeds (``--seed``, see corpus.py), so two runs store the same
episodes and ask the same queries. See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import measure  # noqa: E402
from corpus import (  # noqa: E402,F401  (re-exported: bench_neo4j imports them from here)
    DAY,
    DIM,
    ROLES,
    Corpus,
    PrecomputedEmbedder,
    _iso,
    episode_text,
    unit_rows,
)
from filtered import bench_filtered, filtered_table  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder, MiniLMEmbedder, minilm_available  # noqa: E402

TENANT = "bench"


# ------------------------------------------------------------------------------------- measures


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    k = (len(s) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def summary_ms(samples_s: list[float]) -> dict[str, float]:
    ms = [x * 1000 for x in samples_s]
    return {"p50_ms": round(pct(ms, 50), 3), "p99_ms": round(pct(ms, 99), 3),
            "mean_ms": round(statistics.fmean(ms), 3) if ms else float("nan"),
            "max_ms": round(max(ms), 3) if ms else float("nan"), "n": len(ms)}


def bench_record(wm: WorldModel, emb: PrecomputedEmbedder, corpus: Corpus, batch: int, log: Any,
                 data: Path | None = None, start: int = 0, batch_log: Path | None = None) -> dict[str, Any]:
    """record_experiences of the corpus from row ``start`` on, in batches; only the calls are timed
    (the batches are generated between them, a chunk at a time, so the corpus is never all in
    memory). Each batch is appended to ``batch_log`` (JSON lines), so a run resumed after a stop
    reports every batch of the store, not only its own. Every 50 batches, the data folder's size
    and the resident memory of this process and its children are sampled (their peaks)."""
    done = start
    t_all = time.perf_counter()
    peak_disk, peak_rss = 0.0, 0.0
    this_run: list[dict[str, Any]] = []
    fh = batch_log.open("a") if batch_log is not None else None
    try:
        for n_batch, (exps, vectors) in enumerate(corpus.batches(batch, start=start)):
            texts = emb.register(exps, vectors)
            t0, c0 = time.perf_counter(), time.process_time()
            wm.record_experiences(TENANT, exps)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            emb.forget(texts)
            done += len(exps)
            entry = {"done": done, "n": len(exps), "s": round(dt, 5), "cpu_s": round(cpu, 5)}
            this_run.append(entry)
            if data is not None and (n_batch % 50 == 0 or done == corpus.n):
                peak_disk = max(peak_disk, measure.du(data) / 1e6)
                peak_rss = max(peak_rss, measure.tree_rss_mb())
                entry.update(disk_mb=round(peak_disk, 1), tree_rss_mb=peak_rss, load=measure.load_average())
            if fh is not None:
                fh.write(json.dumps(entry) + "\n")
                fh.flush()
            if done % max(batch * 10, 1) == 0 or done == corpus.n:
                log(f"    recorded {done:>8}/{corpus.n}  last batch {len(exps) / dt:8.0f} eps/s  "
                    f"disk {peak_disk / 1e3:.1f} GB  RSS (with children) {peak_rss:.0f} MB")
    finally:
        if fh is not None:
            fh.close()
    entries = [json.loads(line) for line in batch_log.read_text().splitlines()] if batch_log is not None else \
        list(this_run)
    if not entries:
        return {"episodes": corpus.n, "batches": 0}
    per_batch = [e["n"] / e["s"] for e in entries]
    per_cpu = [e["n"] / max(e["cpu_s"], 1e-6) for e in entries]
    total = sum(e["s"] for e in entries)
    sampled = [e for e in entries if "disk_mb" in e]
    return {"episodes": corpus.n, "batch": batch, "batches": len(per_batch),
            "resumed_at": start or None,
            "median_eps": round(statistics.median(per_batch), 1),
            # episodes per CPU-second of this process (all its threads): what the machine's load
            # does not change much; background maintenance runs in child processes, not counted
            "median_eps_per_cpu_s": round(statistics.median(per_cpu), 1),
            "overall_eps": round(sum(e["n"] for e in entries) / total, 1),
            "min_batch_eps": round(min(per_batch), 1), "max_batch_eps": round(max(per_batch), 1),
            "batches_below_2500_eps": sum(1 for x in per_batch if x < 2500),
            "slowest_batch_s": round(max(e["s"] for e in entries), 3), "total_s": round(total, 3),
            "peak_disk_mb": max((e["disk_mb"] for e in sampled), default=None),
            "peak_tree_rss_mb": max((e["tree_rss_mb"] for e in sampled), default=None),
            "wall_s_this_run_incl_generation": round(time.perf_counter() - t_all, 3)}


def bench_record_with(embedder: Any, exps: list[dict[str, Any]], batch: int) -> dict[str, Any] | None:
    """Record throughput with a real embedder (embedding included), in a fresh store (None: no sample)."""
    if not exps:
        return None
    tmp = Path(tempfile.mkdtemp(prefix="wg-bench-emb-"))
    try:
        with WorldModel.open(tmp, embedder=embedder) as wm:
            embedder.embed(["warm up the model"])  # model load is not throughput
            t0 = time.perf_counter()
            per_batch = []
            for start in range(0, len(exps), batch):
                chunk = exps[start:start + batch]
                t1 = time.perf_counter()
                wm.record_experiences(TENANT, chunk)
                per_batch.append(len(chunk) / (time.perf_counter() - t1))
            total = time.perf_counter() - t0
            return {"episodes": len(exps), "overall_eps": round(len(exps) / total, 1),
                    "median_eps": round(statistics.median(per_batch), 1), "total_s": round(total, 3)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_recall(wm: WorldModel, emb: PrecomputedEmbedder, queries: list[tuple[str, np.ndarray, int]],
                 corpus: Corpus, filtered: bool, warmup: int = 10) -> dict[str, Any]:
    for text, vec, _ in queries:
        emb.vectors[text] = vec
    rng = np.random.default_rng(7 if filtered else 3)
    calls = []
    for text, _, t in queries:
        opts: dict[str, Any] = {"hybrid": True}
        role = None
        if filtered:
            role = ROLES[int(corpus.topic_role[t])]
            end = corpus.anchor - float(rng.uniform(0, 30)) * DAY
            opts["date_range"] = {"start": _iso(end - 30 * DAY), "end": _iso(end)}
        calls.append((text, role, opts))
    for text, role, opts in calls[:warmup]:
        wm.recall_experiences(TENANT, role, text, 5, opts)
    samples, cpu, hits = [], [], []
    for text, role, opts in calls:
        t0, c0 = time.perf_counter(), time.process_time()
        res = wm.recall_experiences(TENANT, role, text, 5, opts)
        samples.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        hits.append(len(res))
    out = summary_ms(samples)
    out["mean_results"] = round(statistics.fmean(hits), 2)
    # CPU time of the process (all threads) per recall: what a recall costs the machine, which
    # the load of other jobs changes much less than the wall time
    out["cpu_p50_ms"] = round(pct([c * 1000 for c in cpu], 50), 3)
    return out


def bench_parts(wm: WorldModel, queries: list[tuple[str, np.ndarray, int]], corpus: Corpus,
                n: int = 50) -> dict[str, Any]:
    """Where a recall's time goes: the LanceDB vector and BM25 searches (the columns recall reads;
    also with the filtered variant's role and 30-day window) and the store reads."""
    parts: dict[str, list[float]] = {k: [] for k in ("vector_search", "text_search", "get_episodes",
                                                     "feedback_stats", "vector_search_filtered",
                                                     "text_search_filtered")}
    cols = ["episode_id"]
    for text, vec, t in queries[:n]:
        where = {"agent_role": ROLES[int(corpus.topic_role[t])], "start": corpus.anchor - 30 * DAY,
                 "end": corpus.anchor}
        t0 = time.perf_counter()
        hits = wm.index.vector_search(TENANT, vec, k=wm.config.candidate_pool, columns=cols)
        t1 = time.perf_counter()
        wm.index.text_search(TENANT, text, k=wm.config.fulltext_pool, columns=cols)
        t2 = time.perf_counter()
        ids = [h["episode_id"] for h in hits]
        wm.store.get_episodes(TENANT, ids)
        t3 = time.perf_counter()
        wm.store.feedback_stats(TENANT, ids)
        t4 = time.perf_counter()
        wm.index.vector_search(TENANT, vec, k=wm.config.candidate_pool, columns=cols, where=where)
        t5 = time.perf_counter()
        wm.index.text_search(TENANT, text, k=wm.config.fulltext_pool, columns=cols, where=where)
        t6 = time.perf_counter()
        for key, dt in zip(parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5)):
            parts[key].append(dt)
    return {k: summary_ms(v) for k, v in parts.items()}


def ann_recall(wm: WorldModel, corpus: Corpus, queries: list[tuple[str, np.ndarray, int]],
               k: int = 10) -> dict[str, Any]:
    """Recall@k of the index against exact search over every vector (numpy, by the bench).

    ``recall_at_k``: ``index.vector_search(k)``; ``recall_at_k_of_pool``: the top k of the
    ``candidate_pool`` rows recall takes from it (what recall's vector stage sees).
    """
    qvecs = np.stack([v for _, v, _ in queries])
    t0 = time.perf_counter()
    truth = corpus.exact_top(qvecs, k)
    exact_s = time.perf_counter() - t0
    at_k, pool = [], []
    for vec, true_ids in zip(qvecs, truth):
        want = set(true_ids)
        got = [h["episode_id"] for h in wm.index.vector_search(TENANT, vec, k=k, columns=["episode_id"])]
        at_k.append(len(want & set(got)) / k)
        hits = wm.index.vector_search(TENANT, vec, k=wm.config.candidate_pool, columns=["episode_id"])
        pool.append(len(want & {h["episode_id"] for h in hits[:k]}) / k)
    return {"k": k, "queries": len(qvecs), "recall_at_k": round(statistics.fmean(at_k), 4),
            "min_at_k": round(min(at_k), 2), "recall_at_k_of_pool": round(statistics.fmean(pool), 4),
            "exact_search_s": round(exact_s, 2)}


def memory_probe(data: Path, corpus: Corpus, queries: list[tuple[str, np.ndarray, int]]) -> dict[str, Any]:
    """recall_memory.py on the data directory: RSS of each read path in a fresh process."""
    qfile = data.parent / f"{data.name}-queries.npz"
    np.savez(qfile, texts=np.array([t for t, _, _ in queries]), vectors=np.stack([v for _, v, _ in queries]),
             roles=np.array([ROLES[int(corpus.topic_role[t])] for _, _, t in queries]), anchor=corpus.anchor)
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).with_name("recall_memory.py")), str(data), str(qfile)],
                              capture_output=True, text=True, check=True)
    finally:
        qfile.unlink(missing_ok=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_size(n: int, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    log(f"== N = {n:,}  (load average {measure.load_average()})")
    corpus = Corpus(n, seed=args.seed)
    emb = PrecomputedEmbedder()
    kept = Path(args.keep) / f"wg-bench-{n}" if args.keep else None
    tmp = kept or Path(tempfile.mkdtemp(prefix=f"wg-bench-{n}-", dir=args.tmp))
    result: dict[str, Any] = {"size": n, "load_before": measure.load_average()}
    state_file = kept / "bench-state.json" if kept is not None else None
    state = json.loads(state_file.read_text()) if state_file is not None and state_file.exists() else {}
    rss = measure.TreeRssSampler().__enter__()  # every phase's peak, all processes together
    try:
        rss.phase("open")
        t_open = time.perf_counter()
        wm = WorldModel.open(tmp, embedder=emb)
        result["open_s"] = round(time.perf_counter() - t_open, 3)
        try:
            gc.collect()
            stored = wm.store.stats(TENANT)["episodes"]
            if stored > n or (stored and kept is None):
                raise SystemExit(f"{tmp} holds {stored} episodes, more than {n}: remove it or pass another --keep")
            if stored == n and state.get("feedback"):  # --keep, a finished store: re-measured with the code as it is now
                log(f"  reusing the {n:,} episodes kept in {kept} (recording not re-measured)")
                result["record_excl_embedding"] = None
                result["rss_after_record"] = measure.rss_mb()
            else:
                log("  record (embedding excluded)" + (f", resumed at {stored:,}" if stored else ""))
                rss.phase("record")
                batch_log = kept / "record-batches.jsonl" if kept is not None else tmp.parent / f"{tmp.name}-batches.jsonl"
                if not stored:
                    batch_log.unlink(missing_ok=True)
                result["record_excl_embedding"] = bench_record(wm, emb, corpus, args.batch, log, tmp, stored,
                                                               batch_log)
                if kept is None:
                    batch_log.unlink(missing_ok=True)
                result["rss_after_record"] = measure.rss_mb()
                if emb.misses:
                    log(f"  WARNING: {emb.misses} texts had no precomputed vector")
                # some feedback, so feedback_stats has rows to aggregate (1% of episodes)
                rss.phase("feedback")
                rng = np.random.default_rng(args.seed + 1)
                fb_ids = rng.choice(n, max(1, n // 100), replace=False)
                t1 = time.perf_counter()
                for j in fb_ids:
                    wm.submit_feedback(TENANT, corpus.episode_id(int(j)), float(rng.uniform(-1, 1)))
                result["feedback_per_s"] = round(len(fb_ids) / (time.perf_counter() - t1), 1)
                if state_file is not None:
                    state_file.write_text(json.dumps({"feedback": True, "record": result["record_excl_embedding"]}))
            log("  background maintenance, ensure_indexes + optimize")
            rss.phase("maintenance tail")
            t1 = time.perf_counter()
            wm.index.wait_for_maintenance()  # background builds started by the writes finish first
            result["maintenance_tail_s"] = round(time.perf_counter() - t1, 3)
            t1 = time.perf_counter()
            result["indexes_created"] = wm.index.ensure_indexes()
            result["ensure_indexes_s"] = round(time.perf_counter() - t1, 3)
            t1 = time.perf_counter()
            wm.index.optimize()
            wm.index.wait_for_maintenance()  # nothing runs beside the timed recalls
            result["optimize_s"] = round(time.perf_counter() - t1, 3)
            rss.phase("mirror warm")
            t1 = time.perf_counter()
            wm.index.warm_mirror(TENANT)  # the in-process index, built from the table or opened from its files,
            wm.index.wait_for_maintenance()  # and its lists (ivf.py: built in the background once it is searched)
            result["mirror_warm_s"] = round(time.perf_counter() - t1, 3)
            result["maintenance_runs"] = list(wm.index.maintenance_runs)
            result["children_peak_rss_mb"] = measure.children_peak_rss_mb()  # background maintenance
            queries = corpus.queries(args.queries, seed=args.seed + 2)
            if args.memory_probe:
                log("  memory of each read path, in a fresh process (then an ANN build at full size, timed)")
                wm.close()
                result["memory_probe"] = memory_probe(tmp, corpus, queries)
                wm = WorldModel.open(tmp, embedder=emb)
                result["ann_build_s"] = result["memory_probe"]["ann_build"]["seconds"]
            result["ann_index"] = wm.index.has_vector_index(TENANT)
            result["index_type"] = (f"{wm.config.ann_index_type} + exact re-rank" if result["ann_index"]
                                    else "exact (flat scan)")
            result["ann_config"] = {k: v for k, v in wm.config.model_dump().items() if k.startswith("ann_")}
            result["indexed_rows"] = wm.index.count(TENANT)
            result["stored"] = wm.store.stats(TENANT)["episodes"]
            result["disk"] = measure.disk_breakdown(tmp)
            log(f"  ANN recall@10 against exact search ({len(queries)} queries)")
            rss.phase("ann recall")
            t1 = time.perf_counter()
            result["ann_recall"] = ann_recall(wm, corpus, queries)
            result["ann_recall_s"] = round(time.perf_counter() - t1, 3)  # the first search builds or opens the mirror
            result["mirror"] = wm.index.mirror_stats(TENANT)
            log(f"  the in-process index (mirror): {result['mirror']}; made ready in {result['mirror_warm_s']} s")
            gc.collect()
            result["rss_before_recall"] = measure.rss_mb()
            result["peak_rss_window_reset"] = measure.reset_peak_rss()
            result["load_recall"] = measure.load_average()
            log(f"  recall x{args.queries} (index: {result['index_type']}, load {result['load_recall']})")
            rss.phase("recall")
            result["recall"] = bench_recall(wm, emb, queries, corpus, filtered=False)
            result["recall_filtered"] = bench_recall(wm, emb, queries, corpus, filtered=True)
            result["recall_parts"] = bench_parts(wm, queries, corpus)
            if args.filter_queries:
                log(f"  filtered recall by filter kind (x{args.filter_queries} each)")
                result["recall_by_filter"] = bench_filtered(wm, TENANT, emb, corpus, queries[:args.filter_queries],
                                                            kept, log)  # the exact truth is cached beside a kept store
            result["rss_during_recall"] = measure.rss_mb()  # peak_rss_mb: the peak since the reset
            result["load_after"] = measure.load_average()
            # what is left once versions older than the retention are gone (the background
            # does this itself index_version_retention_seconds after each optimize)
            wm.index.table_for(TENANT).to_lance().cleanup_old_versions(older_than=timedelta(0))
            result["disk_after_cleanup"] = measure.disk_breakdown(tmp)
        finally:
            wm.close()
        log("  cold start: a new process opens the folder and answers one recall")
        rss.phase("cold start")
        result["cold_start"] = cold_start(tmp, queries[0])
    finally:
        rss.__exit__(None, None, None)
        result["peak_tree_rss_by_phase_mb"] = dict(rss.peaks)
        result["peak_tree_rss_mb"] = rss.peak
        log(f"  peak RSS of this process and its children, by phase (MB): {rss.peaks}")
        if kept is None:
            shutil.rmtree(tmp, ignore_errors=True)

    if result.get("record_excl_embedding") is None and state.get("record"):
        result["record_excl_embedding_when_built"] = state["record"]
    sample = corpus.head(min(args.embed_sample, n))
    sample = [dict(e, episode_id=str(uuid.uuid5(uuid.NAMESPACE_URL, "emb/" + e["episode_id"]))) for e in sample]
    log(f"  record (embedding included) on {len(sample)} episodes")
    incl: dict[str, Any] = {"hashing": bench_record_with(HashingEmbedder(DIM), sample, min(args.batch, 256))}
    if minilm_available() and not args.no_minilm:
        m = MiniLMEmbedder()
        incl["minilm"] = bench_record_with(m, sample, min(args.batch, 256))
        incl["minilm"]["backend"] = m.backend
    else:
        incl["minilm"] = None
    result["record_incl_embedding"] = incl
    return result


COLD_START = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, sys.argv[3])
from corpus import PrecomputedEmbedder
import numpy as np
from worldgraph import WorldModel
emb = PrecomputedEmbedder()
emb.vectors[sys.argv[2]] = np.load(sys.argv[4])
t1 = time.perf_counter()
wm = WorldModel.open(sys.argv[1], embedder=emb)
t2 = time.perf_counter()
hits = wm.recall_experiences("bench", None, sys.argv[2], 5, {"hybrid": True})
t3 = time.perf_counter()
print(json.dumps({"imports_s": round(t1 - t0, 3), "open_s": round(t2 - t1, 3), "first_recall_s": round(t3 - t2, 3),
                  "total_s": round(t3 - t0, 3), "results": len(hits)}))
wm.close()
"""


def cold_start(data: Path, query: tuple[str, np.ndarray, int]) -> dict[str, Any]:
    """A new process (the file cache as the bench left it) opens the data folder and answers one
    recall: imports, open and the first recall, timed in that process."""
    qfile = data.parent / f"{data.name}-cold-query.npy"
    np.save(qfile, query[1])
    try:
        proc = subprocess.run([sys.executable, "-c", COLD_START, str(data), query[0], str(Path(__file__).parent),
                               str(qfile)], capture_output=True, text=True, check=True)
    finally:
        qfile.unlink(missing_ok=True)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def table(results: list[dict[str, Any]]) -> str:
    head = ("size", "rec eps/s excl emb (median/overall, per CPU-s)", "incl emb hash", "incl emb MiniLM",
            "recall p50/p99 ms (CPU p50)", "filtered p50/p99 ms", "index")
    rows = [head]
    for r in results:
        rec = r["record_excl_embedding"]
        inc = r["record_incl_embedding"]
        mini = inc.get("minilm")
        hashing = inc.get("hashing")
        rows.append((
            f"{r['size']:,}",
            "(kept store: not re-measured)" if rec is None else
            f"{rec['median_eps']:,.0f} / {rec['overall_eps']:,.0f} ({rec.get('median_eps_per_cpu_s', float('nan')):,.0f}/cpu-s)",
            f"{hashing['overall_eps']:,.0f}" if hashing else "n/a",
            f"{mini['overall_eps']:,.1f}" if mini else "n/a",
            f"{r['recall']['p50_ms']:.1f} / {r['recall']['p99_ms']:.1f} (cpu {r['recall'].get('cpu_p50_ms', float('nan')):.1f})",
            f"{r['recall_filtered']['p50_ms']:.1f} / {r['recall_filtered']['p99_ms']:.1f}",
            r["index_type"],
        ))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def parts_table(results: list[dict[str, Any]]) -> str:
    lines = ["size      | vector_search p50 | text_search p50 | get_episodes p50 | feedback_stats p50 | "
             "filtered: vector / text p50  (ms)"]
    for r in results:
        p = r["recall_parts"]
        lines.append(f"{r['size']:<9,} | {p['vector_search']['p50_ms']:>17.2f} | {p['text_search']['p50_ms']:>15.2f} | "
                     f"{p['get_episodes']['p50_ms']:>16.2f} | {p['feedback_stats']['p50_ms']:>18.2f} | "
                     f"{p['vector_search_filtered']['p50_ms']:.2f} / {p['text_search_filtered']['p50_ms']:.2f}")
    return "\n".join(lines)


def scale_table(results: list[dict[str, Any]]) -> str:
    """ANN quality, build time, disk and memory of each size."""
    lines = ["size      | ANN recall@10 (k=10 / of pool) | ANN build s | LanceDB MB: now / after cleanup (data, indexes) "
             "| SQLite MB | peak RSS MB: recording / maintenance child | load during recall"]
    for r in results:
        a, d, c = r["ann_recall"], r["disk"], r.get("disk_after_cleanup", r["disk"])
        tables = list(c["lancedb"].values())
        data = sum(t.get("data", 0) for t in tables)
        idx = sum(t.get("indices", 0) for t in tables)
        build = r.get("ann_build_s")
        lines.append(
            f"{r['size']:<9,} | {a['recall_at_k']:.3f} / {a['recall_at_k_of_pool']:.3f}{'':<16} | "
            f"{'n/a' if build is None else f'{build:.0f}':>11} | {d['lancedb_mb']:,.0f} / {c['lancedb_mb']:,.0f} "
            f"({data:,.0f}, {idx:,.0f}) | {c['sqlite_mb']:>9,.0f} | {r['rss_after_record']['peak_rss_mb']} / "
            f"{r['children_peak_rss_mb']} | {r['load_recall']}")
    probes = [(r["size"], r["memory_probe"]) for r in results if r.get("memory_probe")]
    if probes:
        steps = ("open", "recall", "recall_filtered", "vector_search", "vector_search_filtered", "text_search",
                 "ann_build")
        lines += ["", "RSS MB in a fresh process, after each path (peak during it): " + ", ".join(steps)]
        for size, p in probes:
            lines.append(f"{size:<9,} | " + " | ".join(
                f"{p[s]['rss_mb']} ({p[s]['peak_rss_mb']})" for s in steps if s in p))
    return "\n".join(lines)


def size_targets(r: dict[str, Any]) -> dict[str, bool]:
    """Whether one size meets the issue's targets (a recording not measured in this run: nan, False)."""
    rec = r["record_excl_embedding"] or r.get("record_excl_embedding_when_built") or {}
    filt = (r.get("recall_by_filter") or {}).get("kinds", {})
    out = {
        "record_median_ge_5000_eps": rec.get("median_eps", float("nan")) >= 5000,
        "no_batch_below_2500_eps": rec.get("batches_below_2500_eps", 1) == 0,
        "recall_p50_le_20ms": r["recall"]["p50_ms"] <= 20.0,
        "recall_p99_le_50ms": r["recall"]["p99_ms"] <= 50.0,
        "filtered_p50_le_20ms": all(f["p50_ms"] <= 20.0 for f in filt.values()) if filt else False,
        "filtered_p99_le_50ms": all(f["p99_ms"] <= 50.0 for f in filt.values()) if filt else False,
        "ann_recall_at_10_ge_0.95": r["ann_recall"]["recall_at_k"] >= 0.95,
        "filtered_ann_recall_at_10_ge_0.95": all((f["ann_recall_at_k"] or 0) >= 0.95 for f in filt.values())
        if filt else False,
        "cold_start_le_5s": (r.get("cold_start") or {}).get("total_s", float("inf")) <= 5.0,
    }
    peak = peak_rss(r)
    if r["size"] >= 1_000_000 and peak is not None:
        out["peak_rss_with_children_le_6gb"] = peak <= 6000
    return out


def peak_rss(r: dict[str, Any]) -> float | None:
    """The run's peak RSS of all processes together: every phase sampled (``TreeRssSampler``),
    and the ingest's samples of a run resumed across processes (its batch log)."""
    rec = r["record_excl_embedding"] or r.get("record_excl_embedding_when_built") or {}
    peaks = [p for p in (rec.get("peak_tree_rss_mb"), r.get("peak_tree_rss_mb")) if p is not None]
    return max(peaks, default=None)


def run_table(results: list[dict[str, Any]]) -> str:
    """Disk and memory during the ingest, and the cold start, of each size."""
    lines = ["size       | peak disk during ingest GB / final GB (ratio) | peak RSS with children MB (any phase) "
             "| batches < 2,500 eps/s | cold start s (open / first recall)"]
    for r in results:
        rec = r["record_excl_embedding"] or r.get("record_excl_embedding_when_built") or {}
        final = r.get("disk_after_cleanup", r["disk"])
        final_mb = final["lancedb_mb"] + final["sqlite_mb"] + final.get("other_mb", 0)
        peak = rec.get("peak_disk_mb")
        cs = r.get("cold_start") or {}
        lines.append(f"{r['size']:<10,} | {'n/a' if peak is None else f'{peak / 1e3:.1f}'} / {final_mb / 1e3:.1f} "
                     f"({'n/a' if peak is None else f'{peak / final_mb:.2f}'}){'':<18} | {peak_rss(r)} "
                     f"| {rec.get('batches_below_2500_eps')} | {cs.get('total_s')} ({cs.get('open_s')} / "
                     f"{cs.get('first_recall_s')})")
    for r in results:
        if r.get("peak_tree_rss_by_phase_mb"):
            lines.append(f"{r['size']:,}: peak RSS with children by phase, MB: "
                         + ", ".join(f"{k} {v:,.0f}" for k, v in r["peak_tree_rss_by_phase_mb"].items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000", help="comma-separated episode counts")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch", type=int, default=1000, help="episodes per record_experiences call")
    ap.add_argument("--embed-sample", type=int, default=1000, help="episodes recorded with a real embedder")
    ap.add_argument("--no-minilm", action="store_true", help="skip the MiniLM (embedding included) run")
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--tmp", default=None, help="where the temporary stores go (default: system temp)")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="build each size's store in DIR/wg-bench-N and keep it; a later run with the same "
                         "DIR re-measures everything but recording on it")
    ap.add_argument("--out", default="bench/results/memory.json")
    ap.add_argument("--filter-queries", type=int, default=50,
                    help="queries per filter kind in the filtered-recall table (0: skip it)")
    ap.add_argument("--memory-probe", action="store_true",
                    help="after loading, measure each read path's RSS in a fresh process, then time an "
                         "ANN index build at full size there")
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in re.split(r"[,\s]+", args.sizes) if s]

    def log(msg: str) -> None:
        print(msg, flush=True)

    results = [run_size(n, args, log) for n in sizes]
    print()
    print(table(results))
    print()
    print(parts_table(results))
    print()
    print(scale_table(results))
    print()
    print(filtered_table(results))
    print()
    print(run_table(results))
    targets = {str(r["size"]): size_targets(r) for r in results}
    print("\ntargets (every size: record >= 5,000 eps/s median and no batch below 2,500; recall p50 <= 20 / "
          "p99 <= 50 ms plain and for every filter kind; ANN recall@10 >= 0.95 plain and filtered; cold start "
          "<= 5 s; from 1M: peak RSS with children <= 6 GB):", json.dumps(targets))
    out = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "args": vars(args),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "processor": platform.processor()},
        "results": results,
        "targets": targets,
    }
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
