"""Recall quality on LoCoMo: worldgraph's default recall against dense, BM25 and RRF baselines.

    python bench/recall_quality.py                      # the five dev conversations, default embedder
    python bench/recall_quality.py --embedder hashing   # or local, or a factory: pkg.module:make
    python bench/recall_quality.py --data other.json --out bench/results/recall_quality.json
    python bench/recall_quality.py --split-turns         # each turn's sentences as turns of their own

Each conversation goes into its own tenant of a fresh store through the public API: all its
sessions in one ``wm.record_conversations(tenant, {session: turns})`` call (one
``record_conversation`` call per session with a worldgraph that lacks it), one episode per
turn, timestamped with the session's date. Every category 1-4 question is then asked with
``wm.recall_experiences(tenant, None, question, limit=10, options)`` (default options unless
``--options`` is given), and R@5 / R@10 is the share of its evidence turns among the first 5 /
10 results, averaged over questions. The baselines rank the same turns in the same run from the
same vectors: dense = cosine of the question's and the turn's embedding; BM25 = ``locomo.BM25``
over the turn texts; RRF = reciprocal rank fusion (k = 60) of those two rankings.

Latency: each recall call is timed whole (query parsing and the query's embedding included:
the embedding cache is off while recall is timed), first on a quiet machine, then again beside
``--load`` processes that burn a CPU each. ``rec eps/s`` records one conversation into a fresh
store with the uncached embedder (model load excluded), session by session and then in one call. See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import multiprocessing as mp
import os
import platform
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from locomo import BM25, CATEGORIES, CachedEmbedder, Conversation, Turn, load, recall_at, rrf  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.config import WorldGraphConfig  # noqa: E402
from worldgraph.memory.embeddings import LOCAL_MODELS, make_embedder  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# ../shared/datasets beside the checkout (or beside the folder of a git worktree of it)
_CANDIDATES = [base / "shared" / "datasets" / "locomo-dev.json" for base in (ROOT.parent, ROOT.parent.parent)]
DEFAULT_DATA = next((p for p in _CANDIDATES if p.exists()), _CANDIDATES[0])
KS = (5, 10)


def make(spec: str) -> Any:
    """``default`` (the config's choice), ``local``, ``hashing``, ``openai``, a local model key
    (``LOCAL_MODELS``) or ``module:callable``."""
    if ":" in spec:
        mod, attr = spec.split(":", 1)
        return getattr(importlib.import_module(mod), attr)()
    if spec in {m.key for m in LOCAL_MODELS}:
        return make_embedder(WorldGraphConfig(embedding_provider="local", embedding_local_model=spec))
    provider = "auto" if spec == "default" else spec
    return make_embedder(WorldGraphConfig(embedding_provider=provider))


def turn_payload(turns: list[Any]) -> list[dict[str, Any]]:
    return [{"speaker": t.speaker, "text": t.text, "timestamp": t.timestamp.isoformat()} for t in turns]


def record(wm: WorldModel, tenant: str, conv: Conversation, bulk: bool = True) -> dict[str, str]:
    """Record every session of ``conv`` (all sessions in one ``record_conversations`` call when
    the API has it, else one ``record_conversation`` call per session); returns episode_id -> dia_id."""
    out: dict[str, str] = {}
    if bulk and hasattr(wm, "record_conversations"):
        ids_by = wm.record_conversations(tenant, {name: turn_payload(turns) for name, turns in conv.sessions.items()})
        for name, turns in conv.sessions.items():
            out.update(zip(ids_by[name], (t.dia_id for t in turns)))
        return out
    for name, turns in conv.sessions.items():
        if hasattr(wm, "record_conversation"):
            ids = wm.record_conversation(tenant, name, turn_payload(turns))
        else:  # before record_conversation existed: one experience per turn, said by its speaker
            ids = wm.record_experiences(tenant, [
                {"agent_id": t.speaker, "task_type": "conversation", "task_description": said(t),
                 "outcome": "success", "timestamp": t.timestamp.isoformat()} for t in turns])
        out.update(zip(ids, (t.dia_id for t in turns)))
    return out


SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_turns(conv: Conversation) -> Conversation:
    """``conv`` as a chat app sends it (``--split-turns``): each turn's sentences as turns of their
    own, one after another by the same speaker, each keeping the turn's dia_id, so a question's
    evidence is found when any piece of its turn is."""
    sessions = {name: [Turn(t.dia_id, t.speaker, piece, t.session, t.timestamp) for t in turns
                       for piece in ([p for p in SENTENCE_END.split(t.text) if p.strip()] or [t.text])]
                for name, turns in conv.sessions.items()}
    return Conversation(conv.sample_id, sessions, conv.questions)


def said(turn: Any) -> str:
    """A turn as the baselines see it: "Caroline: I went to the support group yesterday"."""
    return f"{turn.speaker}: {turn.text}"


def baselines(emb: CachedEmbedder, conv: Conversation) -> dict[str, list[list[str]]]:
    turns = conv.turns
    dia = [t.dia_id for t in turns]
    vecs = emb.embed([said(t) for t in turns])
    qvecs = emb.embed_query([q.question for q in conv.questions])
    bm25 = BM25([said(t) for t in turns])
    out: dict[str, list[list[str]]] = {"dense": [], "bm25": [], "rrf": []}
    for q, qv in zip(conv.questions, qvecs):
        dense = list(np.argsort(-(vecs @ qv), kind="stable"))
        lexical = list(np.argsort(-bm25.scores(q.question), kind="stable"))
        # dict.fromkeys: with --split-turns several pieces of one turn count once, at the first
        out["dense"].append(list(dict.fromkeys(dia[i] for i in dense[:10])))
        out["bm25"].append(list(dict.fromkeys(dia[i] for i in lexical[:10])))
        out["rrf"].append(list(dict.fromkeys(dia[i] for i in rrf([dense, lexical])[:10])))
    return out


CPU_MS: list[float] = []  # CPU time of each quiet recall (the process's: load-independent, unlike latency)


def ask(wm: WorldModel, tenant: str, conv: Conversation, dia_of: dict[str, str], options: dict[str, Any] | None,
        times: list[float], every: int = 1, cpu: list[float] | None = None) -> list[list[str]]:
    ranked = []
    for q in conv.questions[::every]:
        t0, c0 = time.perf_counter(), time.process_time()
        res = wm.recall_experiences(tenant, None, q.question, limit=10, options=options)
        times.append((time.perf_counter() - t0) * 1000)
        if cpu is not None:
            cpu.append((time.process_time() - c0) * 1000)
        ranked.append(list(dict.fromkeys(dia_of.get(r["episode_id"], "?") for r in res)))
    return ranked


def _burn() -> None:  # pragma: no cover - a background load process
    while True:
        pass


def under_load(n: int, fn: Callable[[], Any]) -> None:
    procs = [mp.get_context("spawn").Process(target=_burn, daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        time.sleep(0.5)
        fn()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()


def score(convs: list[Conversation], ranked: list[list[list[str]]]) -> dict[str, Any]:
    """R@5 / R@10 overall and per category, averaged over questions."""
    rows: dict[str, list[float]] = {}
    for conv, lists in zip(convs, ranked):
        for q, got in zip(conv.questions, lists):
            for k in KS:
                r = recall_at(got, q.evidence, k)
                rows.setdefault(f"R@{k}", []).append(r)
                rows.setdefault(f"{CATEGORIES[q.category]} R@{k}", []).append(r)
    return {key: round(float(np.mean(v)), 3) for key, v in rows.items()} | {"questions": len(rows["R@5"])}


def pct(values: list[float], p: float) -> float:
    return round(float(np.percentile(values, p)), 1) if values else float("nan")


def record_rate(inner: Any, conv: Conversation, graph: str, overrides: dict[str, Any]) -> tuple[float, float, float | None]:
    """Episodes/s recording ``conv`` session by session (one ``record_conversation`` call each),
    texts/s of the embedder alone on the same texts in the same calls, measured right after
    (what bounds the first), and episodes/s recording all sessions in one
    ``record_conversations`` call (None when the API has none)."""
    inner.embed(["warm up the model"])

    def timed(bulk: bool) -> float:
        with tempfile.TemporaryDirectory(prefix="wg-rate-") as tmp:
            wm = WorldModel.open(tmp, embedder=inner, graph=graph, **overrides)
            try:
                t0 = time.perf_counter()
                n = len(record(wm, f"rate-{uuid.uuid4().hex[:8]}", conv, bulk=bulk))
                return n / (time.perf_counter() - t0)
            finally:
                wm.close()

    eps = timed(bulk=False)
    t0 = time.perf_counter()
    for turns in conv.sessions.values():
        inner.embed([said(t) for t in turns])
    embed_rate = len(conv.turns) / (time.perf_counter() - t0)
    return eps, embed_rate, timed(bulk=True) if hasattr(WorldModel, "record_conversations") else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=str(DEFAULT_DATA))
    ap.add_argument("--conversations", default="all", help="comma-separated sample ids (default: all)")
    ap.add_argument("--split-turns", action="store_true",
                    help="record each turn's sentences as turns of their own, as chat apps send them "
                         "(the evidence is found when any piece of its turn is among the results)")
    ap.add_argument("--embedder", default="default",
                    help="default | local | hashing | openai | a LOCAL_MODELS key | module:callable")
    ap.add_argument("--cache", default=str(ROOT / "bench" / ".cache" / "embeddings.sqlite"))
    ap.add_argument("--options", default=None, help="recall options as JSON (default: none, i.e. defaults)")
    ap.add_argument("--config", default="{}", help="WorldModel.open keyword overrides as JSON")
    ap.add_argument("--graph", default="embedded", choices=["embedded", "neo4j"])
    ap.add_argument("--load", type=int, default=2, help="CPU-burning processes for the loaded latency pass (0: skip)")
    ap.add_argument("--load-every", type=int, default=4, help="the loaded pass asks every n-th question (default 4)")
    ap.add_argument("--no-rate", action="store_true", help="skip the record episodes/s measurement")
    ap.add_argument("--optimize", action="store_true",
                    help="compact the index tables (wm.index.optimize()) before asking: the maintained state")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)

    convs = load(args.data)
    if args.conversations != "all":
        wanted = args.conversations.split(",")
        convs = [c for c in convs if c.sample_id in wanted]
    if args.split_turns:
        convs = [split_turns(c) for c in convs]
    options = json.loads(args.options) if args.options else None
    overrides = json.loads(args.config)
    inner = make(args.embedder)
    emb = CachedEmbedder(inner, args.cache)

    ranked: dict[str, list[list[list[str]]]] = {"dense": [], "bm25": [], "rrf": [], "worldgraph": []}
    quiet: list[float] = []
    loaded: list[float] = []
    with tempfile.TemporaryDirectory(prefix="wg-locomo-") as tmp:
        wm = WorldModel.open(tmp, embedder=emb, graph=args.graph, **overrides)
        try:
            run = uuid.uuid4().hex[:8]
            tenants = []
            for conv in convs:
                tenant = f"locomo-{conv.sample_id}-{run}"
                emb.caching = True
                dia_of = record(wm, tenant, conv)
                for name, lists in baselines(emb, conv).items():
                    ranked[name].append(lists)
                tenants.append((tenant, dia_of))
            wm.index.wait_for_maintenance()
            if args.optimize:
                wm.index.optimize()
            emb.caching = False
            for tenant, _ in tenants:
                wm.recall_experiences(tenant, None, "warm up", limit=10, options=options)
            for conv, (tenant, dia_of) in zip(convs, tenants):
                ranked["worldgraph"].append(ask(wm, tenant, conv, dia_of, options, quiet, cpu=CPU_MS))
            if args.load > 0:
                under_load(args.load, lambda: [ask(wm, t, c, d, options, loaded, args.load_every)
                                               for c, (t, d) in zip(convs, tenants)])
        finally:
            wm.close()
    rate, embed_rate, bulk_rate = (None, None, None) if args.no_rate else record_rate(inner, convs[0], args.graph,
                                                                                       overrides)

    results = {name: score(convs, lists) for name, lists in ranked.items()}
    labels = {"dense": "dense cosine", "bm25": "BM25", "rrf": "RRF(dense, BM25)", "worldgraph": "worldgraph recall"}
    cats = [CATEGORIES[c] for c in sorted(CATEGORIES)]
    print(f"LoCoMo {', '.join(c.sample_id for c in convs)}: {results['dense']['questions']} questions, "
          f"{sum(len(c.turns) for c in convs)} turns; embedder {emb.name}; options {json.dumps(options)}; "
          f"config {json.dumps(overrides)}; {args.graph} store{', optimized' if args.optimize else ''}"
          f"{'; turns split into sentences' if args.split_turns else ''}")
    print(f"| method | R@5 | R@10 | {' | '.join(f'{c} R@5 / R@10' for c in cats)} |")
    print("|---|---|---|" + "---|" * len(cats))
    for name, res in results.items():
        # a category the conversations asked no question of (conv-30 has no open-domain one) shows "-"
        per = " | ".join(f"{res[f'{c} R@5']:.3f} / {res[f'{c} R@10']:.3f}" if f"{c} R@5" in res else "-"
                         for c in cats)
        print(f"| {labels[name]} | {res['R@5']:.3f} | {res['R@10']:.3f} | {per} |")
    lat = {"quiet_p50_ms": pct(quiet, 50), "quiet_p99_ms": pct(quiet, 99),
           "loaded_p50_ms": pct(loaded, 50), "loaded_p99_ms": pct(loaded, 99), "load_processes": args.load,
           "quiet_n": len(quiet), "loaded_n": len(loaded), "quiet_cpu_p50_ms": pct(CPU_MS, 50)}
    print(f"recall ms (query embedding included): p50 {lat['quiet_p50_ms']} / p99 {lat['quiet_p99_ms']} "
          f"({len(quiet)} calls); beside {args.load} busy processes p50 {lat['loaded_p50_ms']} / p99 "
          f"{lat['loaded_p99_ms']} ({len(loaded)} calls); CPU per quiet recall p50 {lat['quiet_cpu_p50_ms']} ms; "
          f"load average {os.getloadavg()[0]:.1f}")
    if rate is not None:
        print(f"record: {rate:.1f} episodes/s ({convs[0].sample_id}, {len(convs[0].turns)} turns, "
              f"uncached {emb.name}, embedding included); the embedder alone on the same calls: "
              f"{embed_rate:.1f} texts/s"
              + (f"; all sessions in one record_conversations call: {bulk_rate:.1f} episodes/s" if bulk_rate else ""))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "results": results, "latency": lat, "record_eps": rate, "record_bulk_eps": bulk_rate, "embed_texts_per_s": embed_rate, "embedder": emb.name, "options": options,  # noqa: E501
            "config": overrides, "conversations": [c.sample_id for c in convs], "graph": args.graph,
            "optimized": args.optimize,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "loadavg": os.getloadavg() if hasattr(os, "getloadavg") else None},
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
