"""Semantic recall, all five steps of docs/architecture.md "Recall", plus the feedback-aware variant.

Order of work: candidates (top ``candidate_pool`` by vector, plus BM25 hits in
hybrid mode), metadata filters and the cosine floor (min_similarity), feedback filter, relevance
score, diversity penalty, top-k; one module per step, run in that order by ``recall`` here:

- prepare.py: 1. the options resolved, the query cleaned, parsed (query.py) and embedded
- candidates.py: 2. the candidates, the metadata filters, the cosine floor, the feedback filter
- assembly.py: 3. every candidate's relevance score, assembled from its parts
- results.py: 4. the diversity penalty, 5. the top k as ``RecallResult``s
- conversation.py: what conversation turns and the speakers a query names bring to steps 2 and 3

The relevance score's semantic term is the text relevance of
relevance.py (the cosine, or vector and BM25 evidence fused; when the query names a speaker, its
vector part is the cosine with the query without the name: ``speaker_free_vector``; a conversation
turn that asks passes its match to the turn that answers it: ``question_pairs``; with the optional
sentence stage, a turn whose best sentence matches better than the whole turn gains:
``sentence_gains``); the dates a
query names add a soft boost (assembly.py), never a filter. The optional LLM step
(rewrite.py) adds sub-queries, each searched beside the query. The tenant and the metadata filters are also pushed
down into the LanceDB search, so a narrow filter (one canvas, one week) still gets its full pool
of candidates instead of whatever of the global top 100 survives; they are checked again on the
episode records from the graph store, which is the system of record: an episode the store does
not hold is never returned.
"""

from __future__ import annotations

from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.gcpause import gc_paused
from worldgraph.kg.store import EpisodeStore
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.models import RecallOptions
from worldgraph.memory.recall.assembly import Scored, score_candidates
from worldgraph.memory.recall.blas_threads import one_blas_thread
from worldgraph.memory.recall.candidates import Candidates, find_candidates
from worldgraph.memory.recall.conversation import speaker_free_ahead
from worldgraph.memory.recall.prepare import PreparedQuery, prepare_query
from worldgraph.memory.recall.results import RecallResult, diversify, format_results

# the steps, for a caller that runs them itself (bench/recall_expansion.py)
__all__ = ["Candidates", "PreparedQuery", "RecallResult", "Scored", "diversify", "find_candidates", "format_results",
           "prepare_query", "recall", "score_candidates", "speaker_free_ahead"]


def recall(store: EpisodeStore, index: EpisodeIndex, embedder: Embedder, cfg: WorldGraphConfig, tenant_id: str,
           agent_role: str | None, query: str, limit: int | None = None,
           options: RecallOptions | dict[str, Any] | None = None, now: float | None = None) -> list[RecallResult]:
    """Past experiences relevant to ``query`` (the service's recall_experiences). While it runs,
    BLAS is held at one thread (memory/recall/blas_threads.py: its products are small, and spin-waiting
    threads stall on a busy machine) and the cyclic GC is paused (the candidates' records are
    acyclic; a full collection of a process that loaded LanceDB and a model took 230 ms)."""
    with one_blas_thread(), gc_paused():
        return _recall(store, index, embedder, cfg, tenant_id, agent_role, query, limit, options, now)


def _recall(
    store: EpisodeStore,
    index: EpisodeIndex,
    embedder: Embedder,
    cfg: WorldGraphConfig,
    tenant_id: str,
    agent_role: str | None,
    query: str,
    limit: int | None = None,
    options: RecallOptions | dict[str, Any] | None = None,
    now: float | None = None,
) -> list[RecallResult]:
    q = prepare_query(embedder, cfg, agent_role, query, limit, options, now,
                      ahead=lambda text, opts: speaker_free_ahead(store, embedder, cfg, tenant_id, text, opts))
    try:
        found = find_candidates(store, index, cfg, tenant_id, q, embedder)
        if found is None:
            return []
        scored = score_candidates(store, cfg, tenant_id, q, found, embedder)
        top = diversify(cfg, q.k, found, scored)
        return format_results(store, tenant_id, q.opts, found, scored, top)
    finally:
        if q.ahead is not None:
            q.ahead.settle()
