"""Text-side expansion from the first-stage hits (RM3-style), measured on LoCoMo: a negative result.

    python bench/recall_expansion.py                                   # the variants of bench/README.md
    python bench/recall_expansion.py 'base={}' 'k4m4={"k": 4, "m": 4, "lam": 0.3}'   # chosen ones

Not a recall stage of worldgraph: this script adds one on top of the pipeline's own steps
(memory/recall/pipeline.py: prepare_query, find_candidates, score_candidates, diversify,
format_results) to measure it, and recall itself is unchanged. Per query:

1. the first stage as shipped ranks the candidates; its top ``k`` are the feedback memories;
2. their full-text terms (LanceDB's tokenizer: stemmed, stop words dropped) that the query lacks
   are scored RM3-style, sum over the feedback memories of ``weight x tf / length x idf`` (weight:
   the memory's relevance, or 1 with ``"unweighted": true``; idf over the tenant's rows, as its
   BM25 has it; a term in fewer than 2 rows cannot link two memories and is skipped), and the best
   ``m`` are kept: only statistics, no word list;
3. ONE extra full-text search, the query's words plus those terms (``"with_query": false``: the
   terms alone, the "bridge" memories that share rare terms with the top hits), ``pool`` hits;
4. its hits join the candidates (the same filters and cosine floor) and each candidate's BM25
   share becomes, by ``mode``: ``interp`` (1 - lam) x query's + lam x expanded (RM3's
   interpolation), ``sum`` query's + lam x expanded, ``max`` the larger of query's and lam x
   expanded, ``add`` the query's, and lam x expanded only for a memory the query's search did not
   return; ``"exclude_feedback": true`` leaves the feedback memories' own share as it was;
5. scoring, diversity and the top 10 as shipped.

The document frequencies come from the in-process copy of a small table (memory/index/small.py:
every LoCoMo tenant is one); a larger tenant's LanceDB full-text index does not hand them out.
Each conversation goes into its own tenant of one fresh embedded store (recall_quality.record),
every category 1-4 question is asked with limit 10; R@10 per category overall, on the tuning half
(conv-26, conv-30) and on the checked half (conv-41, conv-42, conv-43), and per variant the
questions gained and lost against the first variant. ``pick`` and ``search`` are the CPU
milliseconds (p50) of steps 2 and 3; ``cpu`` (per recall, every step) includes a second candidate
search that a built-in stage would not repeat.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import recall_quality as rq  # noqa: E402
from locomo import CATEGORIES, CachedEmbedder, load, recall_at  # noqa: E402

from worldgraph import WorldModel  # noqa: E402
from worldgraph.memory.index.small import SmallTable, terms  # noqa: E402
from worldgraph.memory.recall import pipeline as P  # noqa: E402

TUNE = ("conv-26", "conv-30")
DEFAULTS: dict[str, Any] = {"k": 5, "m": 5, "lam": 0.3, "mode": "interp", "with_query": True, "pool": 50,
                            "unweighted": False, "exclude_feedback": False}
VARIANTS = [
    "base={}",
    *(f'interp k{k} m{m} lam{lam}={{"k": {k}, "m": {m}, "lam": {lam}}}'
      for k in (3, 5, 10) for m in (3, 5, 10) for lam in (0.15, 0.3)),
    'interp k5 m3 lam0.4={"m": 3, "lam": 0.4}',
    'interp k5 m3 lam0.5={"m": 3, "lam": 0.5}',
    'interp k4 m4 lam0.3={"k": 4, "m": 4}',
    'interp k5 m3 unweighted={"m": 3, "unweighted": true}',
    'interp k5 m3 pool25={"m": 3, "pool": 25}',
    'interp k5 m3 pool100={"m": 3, "pool": 100}',
    'interp k5 m5 terms alone={"with_query": false}',
    'add k5 m3 lam0.3={"mode": "add", "m": 3}',
    'max k5 m5 lam0.7={"mode": "max", "lam": 0.7}',
    'sum k5 m5 lam0.3 terms alone={"mode": "sum", "with_query": false}',
    'sum k5 m5 lam0.3 terms alone, feedback left={"mode": "sum", "with_query": false, "exclude_feedback": true}',
]


class Expansion:
    """The stage's settings for the next recalls (None: recall as shipped) and what it saw."""

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, on: dict[str, Any] | None) -> None:
        self.on = on
        self.pick_ms: list[float] = []
        self.search_ms: list[float] = []
        self.first: set[str] = set()  # the first stage's candidates (after the floor)
        self.expanded: set[str] = set()  # the extra search's hits


STATE = Expansion()
_SHIPPED = P._recall


def salient_terms(table: SmallTable, query_terms: set[str], rows: list[int], weights: list[float], m: int) -> list[str]:
    n = table.rows
    score: dict[str, float] = {}
    for row, weight in zip(rows, weights):
        words = terms(table.columns["text"][row] or "")
        for term, tf in Counter(words).items():
            df = len(table.postings.get(term, ()))
            if term in query_terms or df < 2:
                continue
            score[term] = score.get(term, 0.0) + weight * tf / len(words) * math.log(1 + (n - df + 0.5) / (df + 0.5))
    return sorted(score, key=lambda t: (-score[t], t))[:m]


def _recall(store: Any, index: Any, embedder: Any, cfg: Any, tenant_id: str, agent_role: str | None, query: str,
            limit: int | None = None, options: Any = None, now: float | None = None) -> list[P.RecallResult]:
    x = STATE.on
    if x is None:
        return _SHIPPED(store, index, embedder, cfg, tenant_id, agent_role, query, limit, options, now)
    q = P.prepare_query(embedder, cfg, agent_role, query, limit, options, now,
                        ahead=lambda text, opts: P.speaker_free_ahead(store, embedder, cfg, tenant_id, text, opts))
    try:
        found = P.find_candidates(store, index, cfg, tenant_id, q)
        if found is None:
            return []
        first = P.score_candidates(store, cfg, tenant_id, q, found, embedder)
        rank = first.scores.ranking
        feedback = sorted(found.ids, key=lambda i: -float(rank[first.text.pos[i]]))[:x["k"]]
        table = index._small_table(index._part(tenant_id), ["episode_id"])  # the tenant's rows, in process
        row_of = {e: r for r, e in enumerate(table.columns["episode_id"])}
        words = " ".join([q.text, *q.parsed.date_phrases])
        t0 = time.process_time()
        extra = salient_terms(table, set(terms(words)), [row_of[i] for i in feedback],
                              [1.0 if x["unweighted"] else float(rank[first.text.pos[i]]) for i in feedback], x["m"])
        STATE.pick_ms.append((time.process_time() - t0) * 1000)
        STATE.first, STATE.expanded = set(found.ids), set()
        if extra:
            t0 = time.process_time()
            hits = index.text_search(tenant_id, " ".join([words, *extra]) if x["with_query"] else " ".join(extra),
                                     k=x["pool"], where=q.filters.where(), columns=["episode_id"])
            STATE.search_ms.append((time.process_time() - t0) * 1000)
            STATE.expanded = {h["episode_id"] for h in hits}
            skip = set(feedback) if x["exclude_feedback"] else set()
            expanded = {h["episode_id"]: h for h in hits if h["episode_id"] not in skip}
            shipped_search = index.text_search

            def merged(tenant: str, text: str, **kw: Any) -> list[dict[str, Any]]:
                own = shipped_search(tenant, text, **kw)
                best = max((h["bm25"] for h in own), default=0.0) or 1.0
                best_x = max((h["bm25"] for h in hits), default=0.0) or 1.0
                out: dict[str, dict[str, Any]] = {}
                for h in own:
                    e = expanded[h["episode_id"]]["bm25"] / best_x if h["episode_id"] in expanded else 0.0
                    mine = h["bm25"] / best
                    share = {"interp": (1 - x["lam"]) * mine + x["lam"] * e, "sum": mine + x["lam"] * e,
                             "max": max(mine, x["lam"] * e), "add": mine}[x["mode"]]
                    out[h["episode_id"]] = {**h, "bm25": best * share}
                for i, h in expanded.items():
                    out.setdefault(i, {**h, "bm25": best * x["lam"] * h["bm25"] / best_x})
                return list(out.values())

            index.text_search = merged  # this recall's second candidate search only
            try:
                found = P.find_candidates(store, index, cfg, tenant_id, q) or found
            finally:
                del index.text_search
        scored = P.score_candidates(store, cfg, tenant_id, q, found, embedder)
        return P.format_results(store, tenant_id, q.opts, found, scored, P.diversify(cfg, q.k, found, scored))
    finally:
        if q.ahead is not None:
            q.ahead.settle()


@contextmanager
def installed() -> Iterator[None]:
    """The stage in recall (``recall()`` calls the module's ``_recall``) until the block ends."""
    P._recall = _recall
    try:
        yield
    finally:
        P._recall = _SHIPPED


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variants", nargs="*", default=VARIANTS, help='name=JSON settings ({} = recall as shipped)')
    ap.add_argument("--data", default=str(rq.DEFAULT_DATA))
    ap.add_argument("--cache", default=str(rq.ROOT / "bench" / ".cache" / "embeddings.sqlite"))
    args = ap.parse_args(argv)
    convs = {c.sample_id: c for c in load(args.data)}
    questions = [q for c in convs.values() for q in c.questions]
    emb = CachedEmbedder(rq.make("default"), args.cache)
    per_question: list[list[float]] = []
    with installed(), tempfile.TemporaryDirectory(prefix="wg-expansion-") as tmp:
        wm = WorldModel.open(tmp, embedder=emb)
        try:
            run = uuid.uuid4().hex[:6]
            tenants = {cid: (f"exp-{cid}-{run}", rq.record(wm, f"exp-{cid}-{run}", c)) for cid, c in convs.items()}
            wm.index.wait_for_maintenance()
            for spec in args.variants:
                name, settings = spec.split("=", 1)
                extra = json.loads(settings)
                STATE.reset({**DEFAULTS, **extra} if extra else None)
                rows: dict[tuple[str, str], list[float]] = {}
                mine: list[float] = []
                evidence: Counter[str] = Counter()
                cpu0 = time.process_time()
                for cid, conv in convs.items():
                    tenant, dia = tenants[cid]
                    ids = {d: e for e, d in dia.items()}
                    for question in conv.questions:
                        got = [dia.get(r["episode_id"], "?") for r in wm.recall_experiences(tenant, None, question.question,
                                                                                            limit=10)]
                        r10 = recall_at(got, question.evidence, 10)
                        mine.append(r10)
                        half = "tuned" if cid in TUNE else "checked"
                        for key in ("dev", half):
                            rows.setdefault((key, "R@10"), []).append(r10)
                            rows.setdefault((key, CATEGORIES[question.category]), []).append(r10)
                        if STATE.on is not None and question.category == 1:  # where multi-hop evidence was
                            for ev in (ids.get(d.strip()) for d in question.evidence):
                                if ev is not None and ev not in STATE.first:
                                    evidence["outside first"] += 1
                                    evidence["of those, in extra search"] += ev in STATE.expanded
                                    evidence["of those, in top 10"] += dia[ev] in got
                cpu = (time.process_time() - cpu0) * 1000 / len(mine)
                per_question.append(mine)

                def r(key: tuple[str, str]) -> str:
                    return f"{np.mean(rows[key]):.3f}"
                cats = " ".join(f"{c} {r(('dev', c))}" for c in CATEGORIES.values())
                halves = " | ".join(f"{h} {r((h, 'R@10'))} (multi-hop {r((h, 'multi-hop'))})" for h in ("tuned", "checked"))
                moved = ""
                if len(per_question) > 1:  # question by question, against the first variant
                    pairs = list(zip(questions, per_question[0], mine))
                    gained = Counter(CATEGORIES[q.category] for q, a, b in pairs if b > a)
                    lost = Counter(CATEGORIES[q.category] for q, a, b in pairs if b < a)
                    moved = f" | gained {dict(gained)} lost {dict(lost)}"
                timing = (f" | pick {np.median(STATE.pick_ms):.2f} search {np.median(STATE.search_ms):.2f}"
                          if STATE.pick_ms and STATE.search_ms else "")
                print(f"{name}: dev R@10 {r(('dev', 'R@10'))} {cats} | {halves} | cpu {cpu:.2f} ms{timing}{moved}"
                      + (f" | multi-hop evidence {dict(evidence)}" if evidence else ""), flush=True)
        finally:
            wm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
