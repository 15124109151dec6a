"""Episodic-memory benchmark: record throughput and recall latency at 10k / 100k episodes.

    python bench/bench_memory.py --sizes 10000,100000 --queries 200 --batch 1000 \
        --out bench/results/memory.json

Everything is generated from fixed seeds (``--seed``), so two runs store the same episodes and
ask the same queries; only the timestamps are anchored to today (so "last 30 days" means the
same thing whenever it runs). See bench/README.md for what each number means.
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

from worldgraph import WorldModel  # noqa: E402
from worldgraph.memory.embeddings import HashingEmbedder, MiniLMEmbedder, minilm_available  # noqa: E402
from worldgraph.memory.record import searchable_text, summarize  # noqa: E402

DIM = 384
TENANT = "bench"
DAY = 86400.0

ROLES = ["Finance", "Developer", "Support", "Sales", "Ops", "Analyst", "Legal", "Marketing"]
VERBS = ["reconcile", "migrate", "debug", "summarise", "forecast", "audit", "deploy", "triage", "draft",
         "classify", "optimise", "review", "escalate", "refactor", "visualise", "invoice"]
OBJECTS = ["inventory discrepancies", "quarterly revenue", "customer churn report", "payment gateway",
           "shipping delays", "database schema", "login failures", "marketing funnel", "vendor contracts",
           "support backlog", "pricing model", "cache invalidation", "sales pipeline", "tax filings",
           "onboarding flow", "data warehouse", "API rate limits", "refund requests", "ledger entries",
           "dashboard widgets", "SKU catalogue", "incident postmortem", "release notes", "cloud costs"]
DETAILS = ["for the EMEA region", "after the weekend outage", "with partial data", "under a tight deadline",
           "for a key account", "using last month's baseline", "across three systems", "for the audit committee",
           "with conflicting sources", "before the board meeting", "from the CSV export", "in the staging env"]
LEARNINGS = ["weighted average minimises variance", "check the timezone of every timestamp first",
             "ask for the raw export, not the summary", "retry idempotent calls with backoff",
             "small batches surface errors sooner", "validate totals against the ledger",
             "the physical count is the source of truth", "pin dependency versions before migrating",
             "write the rollback plan before deploying", "a chart with fewer series reads better"]


# ------------------------------------------------------------------------------------- data


class PrecomputedEmbedder:
    """Returns the vector prepared for each text: a dict lookup, so embedding costs ~nothing."""

    name = "bench-precomputed-384"
    dimensions = DIM

    def __init__(self) -> None:
        self.vectors: dict[str, np.ndarray] = {}
        self.fallback = np.zeros(DIM, dtype=np.float32)
        self.fallback[0] = 1.0
        self.misses = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            v = self.vectors.get(t)
            if v is None:
                self.misses += 1
                v = self.fallback
            out[i] = v
        return out


def unit_rows(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


class Corpus:
    """N synthetic experiences whose vectors cluster around a few hundred topic centroids."""

    def __init__(self, n: int, seed: int, topics: int = 300, anchor: float | None = None) -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        self.anchor = anchor if anchor is not None else _today_anchor()
        self.centroids = unit_rows(rng.standard_normal((topics, DIM)))
        # each topic has a fixed task type / object so texts and vectors agree (BM25 has signal too)
        self.topic_verb = rng.integers(0, len(VERBS), topics)
        self.topic_obj = rng.integers(0, len(OBJECTS), topics)
        self.topic_role = rng.integers(0, len(ROLES), topics)
        topic = rng.integers(0, topics, n)
        # cosine to the centroid ~0.8, between two episodes of one topic ~0.64
        noise = rng.standard_normal((n, DIM)).astype(np.float32) * np.float32(0.75 / np.sqrt(DIM))
        self.vectors = unit_rows(self.centroids[topic] + noise)
        self.topic = topic
        agents_per_role = 8
        ages = rng.uniform(0, 90 * DAY, n)
        self.experiences: list[dict[str, Any]] = []
        for i in range(n):
            t = int(topic[i])
            role_i = int(self.topic_role[t]) if rng.random() < 0.8 else int(rng.integers(0, len(ROLES)))
            role = ROLES[role_i]
            ok = bool(rng.random() < 0.75)
            verb, obj = VERBS[int(self.topic_verb[t])], OBJECTS[int(self.topic_obj[t])]
            exp: dict[str, Any] = {
                "episode_id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"bench/{seed}/{i}")),
                "agent_id": f"{role.lower()}-{int(rng.integers(0, agents_per_role))}",
                "agent_role": role,
                "task_type": f"{verb}_{obj.split()[0].lower()}",
                "task_description": f"{verb.capitalize()} {obj} {DETAILS[int(rng.integers(0, len(DETAILS)))]} (#{i})",
                "input_summary": f"Ticket {int(rng.integers(1000, 99999))}: {obj} flagged by "
                                 f"{ROLES[int(rng.integers(0, len(ROLES)))]} team",
                "approach_taken": f"{verb} step by step, then cross-check",
                "actions_taken": ["query source system", f"{verb} records", "write summary"][: int(rng.integers(1, 4))],
                "reasoning_chain": [{"step": "plan", "thought": f"start with the {obj}"},
                                    {"step": "act", "thought": f"{verb} and verify"}],
                "outcome": "success" if ok else "failure",
                "error_message": None if ok else "validation failed on 3 rows",
                "confidence_score": round(float(rng.beta(5, 2)), 3),
                "constitutional_violations": [] if rng.random() < 0.97 else ["data_privacy"],
                "human_intervention_required": bool(rng.random() < 0.1),
                "learnings": [LEARNINGS[int(j)] for j in rng.choice(len(LEARNINGS), int(rng.integers(1, 3)),
                                                                     replace=False)],
                "metacognitive_insights": {"what_worked": ["cross-checking"], "uncertainty": "low"},
                "maturity_level": ["student", "intern", "supervised", "autonomous"][int(rng.integers(0, 4))],
                "timestamp": _iso(self.anchor - float(ages[i])),
            }
            if rng.random() < 0.4:
                exp["canvas_id"] = f"canvas-{int(rng.integers(0, 500))}"
                exp["canvas_action_ids"] = [f"action-{i}-{k}" for k in range(int(rng.integers(0, 3)))]
            self.experiences.append(exp)

    def embedder(self) -> PrecomputedEmbedder:
        emb = PrecomputedEmbedder()
        for exp, vec in zip(self.experiences, self.vectors):
            emb.vectors[episode_text(exp)] = vec
        return emb

    def queries(self, count: int, seed: int) -> list[tuple[str, np.ndarray, int]]:
        rng = np.random.default_rng(seed)
        out = []
        for q in range(count):
            t = int(rng.integers(0, len(self.centroids)))
            vec = unit_rows((self.centroids[t] + rng.standard_normal(DIM).astype(np.float32)
                             * np.float32(0.5 / np.sqrt(DIM)))[None, :])[0]
            text = f"how to {VERBS[int(self.topic_verb[t])]} {OBJECTS[int(self.topic_obj[t])]} q{q}"
            out.append((text, vec, t))
        return out


def episode_text(exp: dict[str, Any]) -> str:
    """The text the service embeds for this experience (record.searchable_text of its episode)."""
    ep = dict(exp)
    ep["input_summary"] = summarize(exp.get("input_summary", ""))
    return searchable_text(ep)


def _today_anchor() -> float:
    now = datetime.now(timezone.utc)
    return datetime(now.year, now.month, now.day, tzinfo=timezone.utc).timestamp()


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat()


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


def bench_record(wm: WorldModel, exps: list[dict[str, Any]], batch: int, log: Any) -> dict[str, Any]:
    per_batch: list[float] = []
    times: list[float] = []
    t_all = time.perf_counter()
    for start in range(0, len(exps), batch):
        chunk = exps[start:start + batch]
        t0 = time.perf_counter()
        wm.record_experiences(TENANT, chunk)
        dt = time.perf_counter() - t0
        times.append(dt)
        per_batch.append(len(chunk) / dt)
        done = start + len(chunk)
        if done % max(batch * 10, 1) == 0 or done == len(exps):
            log(f"    recorded {done:>7}/{len(exps)}  last batch {len(chunk) / dt:8.0f} eps/s")
    total = time.perf_counter() - t_all
    return {"episodes": len(exps), "batch": batch, "batches": len(per_batch),
            "median_eps": round(statistics.median(per_batch), 1),
            "overall_eps": round(len(exps) / total, 1),
            "min_batch_eps": round(min(per_batch), 1), "max_batch_eps": round(max(per_batch), 1),
            "slowest_batch_s": round(max(times), 3), "total_s": round(total, 3)}


def bench_record_with(embedder: Any, exps: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """Record throughput with a real embedder (embedding included), in a fresh store."""
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
    samples, hits = [], []
    for text, role, opts in calls:
        t0 = time.perf_counter()
        res = wm.recall_experiences(TENANT, role, text, 5, opts)
        samples.append(time.perf_counter() - t0)
        hits.append(len(res))
    out = summary_ms(samples)
    out["mean_results"] = round(statistics.fmean(hits), 2)
    return out


def bench_parts(wm: WorldModel, queries: list[tuple[str, np.ndarray, int]], n: int = 50) -> dict[str, Any]:
    """Where a recall's time goes: the LanceDB vector and BM25 searches and the store reads."""
    vs, ts, ge, fs = [], [], [], []
    for text, vec, _ in queries[:n]:
        t0 = time.perf_counter()
        hits = wm.index.vector_search(TENANT, vec, k=wm.config.candidate_pool)
        t1 = time.perf_counter()
        wm.index.text_search(TENANT, text, k=wm.config.fulltext_pool)
        t2 = time.perf_counter()
        ids = [h["episode_id"] for h in hits]
        wm.store.get_episodes(TENANT, ids)
        t3 = time.perf_counter()
        wm.store.feedback_stats(TENANT, ids)
        t4 = time.perf_counter()
        vs.append(t1 - t0), ts.append(t2 - t1), ge.append(t3 - t2), fs.append(t4 - t3)
    return {"vector_search": summary_ms(vs), "text_search": summary_ms(ts), "get_episodes": summary_ms(ge),
            "feedback_stats": summary_ms(fs)}


def run_size(n: int, args: argparse.Namespace, log: Any) -> dict[str, Any]:
    log(f"== N = {n:,}")
    t0 = time.perf_counter()
    corpus = Corpus(n, seed=args.seed)
    emb = corpus.embedder()
    log(f"  generated {n:,} experiences + vectors in {time.perf_counter() - t0:.1f}s")
    tmp = Path(tempfile.mkdtemp(prefix=f"wg-bench-{n}-", dir=args.tmp))
    result: dict[str, Any] = {"size": n}
    try:
        wm = WorldModel.open(tmp, embedder=emb)
        try:
            gc.collect()
            log("  record (embedding excluded)")
            result["record_excl_embedding"] = bench_record(wm, corpus.experiences, args.batch, log)
            if emb.misses:
                log(f"  WARNING: {emb.misses} texts had no precomputed vector")
            # some feedback, so feedback_stats has rows to aggregate (1% of episodes)
            rng = np.random.default_rng(args.seed + 1)
            fb_ids = rng.choice(n, max(1, n // 100), replace=False)
            t1 = time.perf_counter()
            for j in fb_ids:
                wm.submit_feedback(TENANT, corpus.experiences[int(j)]["episode_id"], float(rng.uniform(-1, 1)))
            result["feedback_per_s"] = round(len(fb_ids) / (time.perf_counter() - t1), 1)
            log("  ensure_indexes + optimize")
            t1 = time.perf_counter()
            wm.index.wait_for_maintenance()  # background builds started by the writes finish first
            created = wm.index.ensure_indexes()
            result["ensure_indexes_s"] = round(time.perf_counter() - t1, 3)
            result["indexes_created"] = created
            t1 = time.perf_counter()
            wm.index.optimize()
            wm.index.wait_for_maintenance()  # nothing runs beside the timed recalls
            result["optimize_s"] = round(time.perf_counter() - t1, 3)
            result["ann_index"] = wm.index.has_vector_index(TENANT)
            result["index_type"] = "IVF_HNSW_SQ + exact re-score" if result["ann_index"] else "exact (flat scan)"
            result["indexed_rows"] = wm.index.count(TENANT)
            result["stored"] = wm.store.stats(TENANT)["episodes"]
            queries = corpus.queries(args.queries, seed=args.seed + 2)
            log(f"  recall x{args.queries} (index: {result['index_type']})")
            result["recall"] = bench_recall(wm, emb, queries, corpus, filtered=False)
            result["recall_filtered"] = bench_recall(wm, emb, queries, corpus, filtered=True)
            result["recall_parts"] = bench_parts(wm, queries)
            # what the data look like on disk
            result["disk_mb"] = {p.name: round(_du(p) / 1e6, 1) for p in tmp.iterdir()}
        finally:
            wm.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    sample = corpus.experiences[: min(args.embed_sample, n)]
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


def _du(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def table(results: list[dict[str, Any]]) -> str:
    head = ("size", "rec eps/s excl emb (median/overall)", "incl emb hash", "incl emb MiniLM",
            "recall p50/p99 ms", "filtered p50/p99 ms", "index")
    rows = [head]
    for r in results:
        rec = r["record_excl_embedding"]
        inc = r["record_incl_embedding"]
        mini = inc.get("minilm")
        rows.append((
            f"{r['size']:,}",
            f"{rec['median_eps']:,.0f} / {rec['overall_eps']:,.0f}",
            f"{inc['hashing']['overall_eps']:,.0f}",
            f"{mini['overall_eps']:,.1f}" if mini else "n/a",
            f"{r['recall']['p50_ms']:.1f} / {r['recall']['p99_ms']:.1f}",
            f"{r['recall_filtered']['p50_ms']:.1f} / {r['recall_filtered']['p99_ms']:.1f}",
            r["index_type"],
        ))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    lines = [" | ".join(str(c).ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def parts_table(results: list[dict[str, Any]]) -> str:
    lines = ["size     | vector_search p50 | text_search p50 | get_episodes p50 | feedback_stats p50  (ms)"]
    for r in results:
        p = r["recall_parts"]
        lines.append(f"{r['size']:<8,} | {p['vector_search']['p50_ms']:>17.2f} | {p['text_search']['p50_ms']:>15.2f} | "
                     f"{p['get_episodes']['p50_ms']:>16.2f} | {p['feedback_stats']['p50_ms']:>18.2f}")
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
    ap.add_argument("--out", default="bench/results/memory.json")
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in re.split(r"[,\s]+", args.sizes) if s]

    def log(msg: str) -> None:
        print(msg, flush=True)

    results = [run_size(n, args, log) for n in sizes]
    print()
    print(table(results))
    print()
    print(parts_table(results))
    targets = {}
    for r in results:
        targets[str(r["size"])] = {
            "record_ge_2000_eps": r["record_excl_embedding"]["median_eps"] >= 2000,
            "recall_p50_le_20ms": r["recall"]["p50_ms"] <= 20.0,
        }
    print("\ntargets (record >= 2,000 eps/s median, recall p50 <= 20 ms):", json.dumps(targets))
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
