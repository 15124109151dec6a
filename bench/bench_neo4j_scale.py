"""Neo4j at scale: N episodes recorded into Neo4j in batches, then recall with and without the
neighbourhood, on a WorldModel whose graph store is Neo4j (the LanceDB sidecar holds the vectors).

The corpus is ``bench/corpus.py``'s (precomputed vectors: embedding excluded, as
``bench_memory.py --no-minilm``), generated a chunk at a time; 40 % of the episodes are on
canvases with 0-2 actions each, as in ``bench_neo4j.py``. Recording is timed per
``record_experiences`` batch (store write + index append) and, separately, the Neo4j
``add_episodes`` call inside it (the graph store's own rate). ``--max-record-minutes`` stops
recording early (the report then says how many episodes were recorded); every later number is
measured at that size. Then 1 % of the episodes get feedback, ``--scenes`` scenes (8 world nodes,
4 edges, 2 rules each) are linked to episodes, half of them to episodes the queries recall, and
``recall_experiences`` is timed over ``--queries`` queries, with and without ``include_neighborhood``.

Use a private server, not the shared one (it grows by ~4 GB per million episodes):

    WORLDGRAPH_NEO4J_PAGECACHE=3g WORLDGRAPH_NEO4J_HOME=/work/neo4j-scale \\
        .venv/bin/python -m worldgraph.neo4j_local start --port 7690 --json
    .venv/bin/python bench/bench_neo4j_scale.py --uri bolt://127.0.0.1:7690 --episodes 1000000 \\
        --json bench/results/neo4j_scale.json
    WORLDGRAPH_NEO4J_HOME=/work/neo4j-scale .venv/bin/python -m worldgraph.neo4j_local stop

Target (issue 13): recall with neighbourhood p50 <= 30 ms at 1M episodes on Neo4j.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import measure  # noqa: E402
from bench_neo4j import NEIGHBOURHOOD_OPTS, RECALL_OPTS, _canvas, scene_plans, time_parts, time_recall  # noqa: E402
from corpus import Corpus, PrecomputedEmbedder  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.kg.neo4j.store import Neo4jGraphStore  # noqa: E402


def record(wm: WorldModel, tenant: str, corpus: Corpus, emb: PrecomputedEmbedder, batch: int,
           budget_s: float, log: Callable[[str], None]) -> dict[str, Any]:
    """record_experiences of the corpus in batches until it is done or ``budget_s`` is spent."""
    store_s: list[float] = []
    add = wm.store.add_episodes

    def timed_add(*a: Any, **kw: Any) -> None:  # the graph store's share of each batch
        t0 = time.perf_counter()
        add(*a, **kw)
        store_s.append(time.perf_counter() - t0)
    wm.store.add_episodes = timed_add  # type: ignore[method-assign]
    rates, store_rates, times, done, progress = [], [], [], 0, []
    started = time.perf_counter()
    try:
        for exps, vectors in corpus.batches(batch):
            texts = emb.register(exps, vectors)
            t0 = time.perf_counter()
            wm.record_experiences(tenant, exps, canvases=[_canvas(e) for e in exps])
            dt = time.perf_counter() - t0
            emb.forget(texts)
            times.append(dt)
            rates.append(len(exps) / dt)
            store_rates.append(len(exps) / store_s[-1])
            done += len(exps)
            if done % (batch * 50) == 0:
                recent = rates[-50:]
                progress.append({"episodes": done, "median_eps_last_50": round(statistics.median(recent), 1),
                                 "store_median_eps_last_50": round(statistics.median(store_rates[-50:]), 1),
                                 "elapsed_s": round(time.perf_counter() - started, 1), "load": measure.load_average()})
                log(f"  recorded {done:>9,}  last 50 batches: {statistics.median(recent):7.0f} eps/s "
                    f"(neo4j add_episodes {statistics.median(store_rates[-50:]):7.0f})  load {measure.load_average()}")
            if time.perf_counter() - started > budget_s:
                log(f"  record budget spent after {done:,} episodes")
                break
    finally:
        wm.store.add_episodes = add  # type: ignore[method-assign]
    return {"episodes": done, "batch": batch, "median_eps": round(statistics.median(rates), 1),
            "overall_eps": round(done / sum(times), 1),
            "store_median_eps": round(statistics.median(store_rates), 1),
            "store_overall_eps": round(done / sum(store_s), 1),
            "total_s": round(sum(times), 1), "store_s": round(sum(store_s), 1), "progress": progress}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default=os.environ.get("NEO4J_URI", "bolt://127.0.0.1:7690"))
    ap.add_argument("--user", default=os.environ.get("NEO4J_USER", "neo4j"))
    ap.add_argument("--password", default=os.environ.get("NEO4J_PASSWORD", "worldgraph-dev"))
    ap.add_argument("--episodes", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000, help="episodes per record_experiences call")
    ap.add_argument("--max-record-minutes", type=float, default=1e9, help="stop recording after this long")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--scenes", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20260101)
    ap.add_argument("--tmp", default=None, help="where the LanceDB sidecar goes (default: the system temp dir)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", type=Path, metavar="DATA_DIR",
                    help="put the WorldModel folder (its LanceDB index) here and keep it, for --recall-only")
    ap.add_argument("--recall-only", type=Path, metavar="DATA_DIR",
                    help="only time recall, on a copy of an earlier run's WorldModel folder (its LanceDB "
                         "index) and its tenant (--tenant) on the same Neo4j")
    ap.add_argument("--tenant", help="with --recall-only: the earlier run's tenant")
    args = ap.parse_args()
    if args.recall_only:
        return recall_only(args)

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    out: dict[str, Any] = {"uri": args.uri, "episodes_asked": args.episodes, "load_before": measure.load_average()}
    corpus = Corpus(args.episodes, seed=args.seed)
    emb = PrecomputedEmbedder()
    tenant = f"scale-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        store = Neo4jGraphStore(args.uri, args.user, args.password)
        folder = args.keep if args.keep is not None else Path(tmp) / "wm"
        out["tenant"] = tenant
        wm = WorldModel.open(folder, embedder=emb, graph=store)
        try:
            log(f"recording up to {args.episodes:,} episodes into {args.uri}, tenant {tenant}")
            out["record"] = rec = record(wm, tenant, corpus, emb, args.batch, args.max_record_minutes * 60, log)
            n = rec["episodes"]
            _save(args.json, out)
            rng = random.Random(11)
            rated = rng.sample(range(n), max(1, n // 100))
            t0 = time.perf_counter()
            for i in rated:
                wm.submit_feedback(tenant, corpus.episode_id(i), rng.uniform(-1, 1),
                                   category=rng.choice(["quality", None]))
            out["feedback"] = {"count": len(rated), "per_s": round(len(rated) / (time.perf_counter() - t0), 1)}
            log(f"  {len(rated):,} feedback at {out['feedback']['per_s']}/s; building the vector index")
            t0 = time.perf_counter()
            wm.index.wait_for_maintenance()
            wm.index.ensure_indexes()
            wm.index.optimize()
            wm.index.wait_for_maintenance()
            out["index_build_s"] = round(time.perf_counter() - t0, 1)
            queries = corpus.queries(args.queries, seed=args.seed + 2)
            for text, vec, _ in queries:
                emb.vectors[text] = vec
            texts = [t for t, _, _ in queries]
            top = [r[0]["episode_id"] for r in (wm.recall_experiences(tenant, None, t, 1, RECALL_OPTS)
                                                for t in texts[::2]) if r]
            others = [corpus.episode_id(i) for i in rng.sample(range(n), max(0, args.scenes - len(top)))]
            chosen = list(dict.fromkeys(top + others))[: args.scenes]
            for plan in scene_plans(tenant, chosen):
                wm.store.apply_plan(plan)
            out["stats"] = wm.store.stats(tenant)
            out["load_recall"] = measure.load_average()
            log(f"  recall x{len(texts)} at {n:,} episodes (load {out['load_recall']})")
            out["plain"] = time_recall(wm, tenant, texts, RECALL_OPTS)
            out["neighbourhood"] = time_recall(wm, tenant, texts, NEIGHBOURHOOD_OPTS)
            out["parts"] = time_parts(wm, tenant, [v for _, v, _ in queries[:50]])
            out["load_after"] = measure.load_average()
            out["rss_mb"] = measure.rss_mb()
        finally:
            wm.close()
    _save(args.json, out)
    _print(out)
    return 0


def recall_only(args: argparse.Namespace) -> int:
    """Recall timings again, with the code as it is now, on data an earlier run left behind."""
    corpus = Corpus(args.episodes, seed=args.seed)
    emb = PrecomputedEmbedder()
    queries = corpus.queries(args.queries, seed=args.seed + 2)
    for text, vec, _ in queries:
        emb.vectors[text] = vec
    texts = [t for t, _, _ in queries]
    wm = WorldModel.open(args.recall_only, embedder=emb, graph=Neo4jGraphStore(args.uri, args.user, args.password))
    try:
        out: dict[str, Any] = {"tenant": args.tenant, "stats": wm.store.stats(args.tenant),
                               "load_recall": measure.load_average()}
        out["plain"] = time_recall(wm, args.tenant, texts, RECALL_OPTS)
        out["neighbourhood"] = time_recall(wm, args.tenant, texts, NEIGHBOURHOOD_OPTS)
        out["parts"] = time_parts(wm, args.tenant, [v for _, v, _ in queries[:50]])
        out["load_after"] = measure.load_average()
    finally:
        wm.close()
    _save(args.json, out)
    n, pl, nb = out["stats"]["episodes"], out["plain"], out["neighbourhood"]
    print(f"recall only, at {n:,} episodes (load {out['load_recall']} -> {out['load_after']})")
    print(f"recall p50/p99 ms       {pl['p50_ms']:.1f} / {pl['p99_ms']:.1f}")
    print(f"+neighbourhood p50/p99  {nb['p50_ms']:.1f} / {nb['p99_ms']:.1f}  ({nb['neighbourhood_nodes']} nodes found)")
    print("parts p50 ms            " + ", ".join(f"{k} {v:.2f}" for k, v in out["parts"].items()))
    return 0


def _save(path: Path | None, out: dict[str, Any]) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=2, default=str))


def _print(out: dict[str, Any]) -> None:
    rec, n = out["record"], out["record"]["episodes"]
    print(f"\nNeo4j at {n:,} episodes (asked {out['episodes_asked']:,}), batches of {rec['batch']:,}")
    print(f"record_experiences  median {rec['median_eps']:,.0f} eps/s, overall {rec['overall_eps']:,.0f} "
          f"({rec['total_s']:,.0f} s); Neo4j add_episodes alone median {rec['store_median_eps']:,.0f}, "
          f"overall {rec['store_overall_eps']:,.0f} eps/s")
    for p in rec["progress"]:
        print(f"  at {p['episodes']:>9,}: {p['median_eps_last_50']:>7,.0f} eps/s "
              f"(add_episodes {p['store_median_eps_last_50']:>7,.0f})  load {p['load']}")
    pl, nb, parts = out["plain"], out["neighbourhood"], out["parts"]
    print(f"recall p50/p99 ms       {pl['p50_ms']:.1f} / {pl['p99_ms']:.1f}")
    print(f"+neighbourhood p50/p99  {nb['p50_ms']:.1f} / {nb['p99_ms']:.1f}  ({nb['neighbourhood_nodes']} nodes found)")
    print("parts p50 ms            " + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()))
    print(f"index build {out['index_build_s']} s; load before / recall / after: {out['load_before']} / "
          f"{out['load_recall']} / {out['load_after']}")
    met = nb["p50_ms"] <= 30
    print(f"target recall with neighbourhood p50 <= 30 ms at 1M: {'met' if met and n >= 1_000_000 else 'NOT met'}"
          f" ({nb['p50_ms']:.1f} ms at {n:,})")


if __name__ == "__main__":
    raise SystemExit(main())
