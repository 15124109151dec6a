"""Semantic recall, all five steps of docs/architecture.md "Recall", plus the feedback-aware variant.

Order of work: candidates (top ``candidate_pool`` by vector, plus BM25 hits in
hybrid mode), metadata filters and the cosine floor (min_similarity), feedback filter, relevance
score, diversity penalty, top-k. The relevance score's semantic term is the text relevance of
relevance.py (the cosine, or vector and BM25 evidence fused; when the query names a speaker, its
vector part is the cosine with the query without the name: ``speaker_free_vector``; a conversation
turn that asks passes its match to the turn that answers it: ``_questions``; with the optional
sentence stage, a turn whose best sentence matches better than the whole turn gains:
``_sentence_part``); the dates a
query names add a soft boost (``_date_boosts``), never a filter. The optional LLM step
(rewrite.py) adds sub-queries, each searched beside the query. The tenant and the metadata filters are also pushed
down into the LanceDB search, so a narrow filter (one canvas, one week) still gets its full pool
of candidates instead of whatever of the global top 100 survives; they are checked again on the
episode records from the graph store, which is the system of record: an episode the store does
not hold is never returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.gcpause import gc_paused
from worldgraph.kg.store import EpisodeStore
from worldgraph.memory.cosine import cosine_to
from worldgraph.memory.embeddings import Embedder, check_embeddings, embed_query
from worldgraph.memory.episode import Episode
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.models import DateRange, RecallOptions
from worldgraph.memory.recall import rewrite
from worldgraph.memory.recall.blas_threads import one_blas_thread
from worldgraph.memory.recall.query import ParsedQuery, parse_query
from worldgraph.memory.recall.relevance import (
    TextRelevance,
    in_window,
    named_speakers,
    question_share,
    reply_gains,
    text_relevance,
    with_sentences,
    without_speakers,
)
from worldgraph.memory.recall.scoring import (
    Relevances,
    ScoreParts,
    diversity_order,
    normalise_feedback,
    relevances,
)
from worldgraph.memory.recall.sentences import best_sentence_cosines, sentence_texts
from worldgraph.memory.record import CONVERSATION_TASK_TYPE, parse_model

_SEARCH_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="worldgraph-recall")
# The speaker-free query's embedding, run beside the query's own (speaker_free_ahead); its own
# pool, so that a full-text search never waits behind a model run.
_AHEAD_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="worldgraph-recall-embed")
AHEAD_MAX_AGENTS = 64  # a tenant with more agents is not guessed at (the guess reads them all)


class RecallResult(Episode):
    """A recalled episode: its fields plus relevance_score, semantic_score and score_breakdown
    (a dict whose keys also read as attributes)."""


@dataclass
class Filters:
    agent_role: str | None
    agent_id: str | None
    canvas_ids: list[str] | None
    start: datetime | None
    end: datetime | None
    success_only: bool

    def where(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.agent_role:
            out["agent_role"] = self.agent_role
        if self.agent_id:
            out["agent_id"] = self.agent_id
        if self.canvas_ids:
            out["canvas_ids"] = self.canvas_ids
        if self.start is not None:
            out["start"] = self.start.timestamp()
        if self.end is not None:
            out["end"] = self.end.timestamp()
        if self.success_only:
            out["success_only"] = True
        return out

    def keeps(self, ep: dict[str, Any]) -> bool:
        if self.agent_role and ep.get("agent_role") != self.agent_role:
            return False
        if self.agent_id and ep.get("agent_id") != self.agent_id:
            return False
        if self.canvas_ids and ep.get("canvas_id") not in self.canvas_ids:
            return False
        if self.start is not None and ep["ts"] < self.start.timestamp():
            return False
        if self.end is not None and ep["ts"] > self.end.timestamp():
            return False
        if self.success_only and ep.get("outcome") != "success":
            return False
        return True


def parse_options(options: RecallOptions | dict[str, Any] | None) -> RecallOptions:
    return RecallOptions() if options is None else parse_model(RecallOptions, options, "options")


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


@dataclass
class PreparedQuery:
    """Step 1's output: the options resolved, the query cleaned, parsed and embedded."""

    opts: RecallOptions
    query: str
    k: int
    now_s: float
    min_sim: float
    parsed: ParsedQuery
    text: str
    window: ParsedQuery | None  # the query's own dates, a soft signal (None: none, or an explicit date_range)
    filters: Filters
    qvec: np.ndarray
    subqueries: list[str] = field(default_factory=list)  # the LLM step's (rewrite.py), searched beside the query
    subvecs: np.ndarray | None = None  # their embeddings, one row each
    ahead: Ahead | None = None  # the speaker-free query's embedding, started beside the query's own


@dataclass
class Ahead:
    """A query embedding started on another thread (``speaker_free_ahead``): ``text`` and its run."""

    text: str
    run: Future[np.ndarray]

    def vector(self, embedder: Embedder) -> np.ndarray | None:
        """Its vector (None if it had not started: cancelled, the caller embeds it itself)."""
        if self.run.cancel():
            return None
        vec: np.ndarray = check_embeddings(self.run.result(), 1, embedder.dimensions)[0]
        return vec

    def settle(self) -> None:
        """Not left running past the recall: cancelled, or waited for (its error is not this
        recall's: the text was never used, or its error was raised where it was)."""
        if not self.run.cancel():
            try:
                self.run.result()
            except Exception:  # see above: not this recall's error
                pass


@dataclass
class Candidates:
    """Step 2's output: the candidates that passed the filters, with what scoring needs."""

    ids: list[str]
    matrix: np.ndarray  # the vectors of every candidate fetched, one row each (float32)
    row: dict[str, int]  # a candidate's row in ``matrix``
    semantic: dict[str, float]  # cosine with the query
    bm25: dict[str, float]  # BM25 of the full-text hits
    searched_text: bool
    episodes: dict[str, dict[str, Any]]  # records from the graph store
    stats: dict[str, Any]  # feedback aggregates
    avg: dict[str, float | None]  # normalised feedback
    subquery: dict[str, float] | None = None  # the best cosine with any of the LLM's sub-queries
    named: set[str] = field(default_factory=set)  # the speakers the query names (speaker_names)
    floor: float = 0.0  # the cosine floor the candidates passed (min_similarity, or speaker_min_similarity)
    free: np.ndarray | None = None  # the speaker-free query vector, when the candidates were searched with it


def prepare_query(embedder: Embedder, cfg: WorldGraphConfig, agent_role: str | None, query: str,
                  limit: int | None, options: RecallOptions | dict[str, Any] | None,
                  now: float | None, ahead: Callable[[str, RecallOptions], Ahead | None] | None = None
                  ) -> PreparedQuery:
    """1. query preprocessing, entity extraction, embedding. ``ahead(text, options)``: called with
    the cleaned text just before it is embedded, to start other work beside the embedding."""
    opts = parse_options(options)
    if not isinstance(query, str) or not query.strip():
        raise InvalidInputError("query", "must be a non-empty string (say what experience to recall)", query)
    if agent_role is not None and not isinstance(agent_role, str):
        raise InvalidInputError("agent_role", "must be a string or None", agent_role)
    k = opts.limit if opts.limit is not None else limit if limit is not None else cfg.default_recall_limit
    if not isinstance(k, int) or isinstance(k, bool) or k <= 0:
        raise InvalidInputError("limit", "must be a positive integer", k)
    now_s = opts.now.timestamp() if opts.now is not None else time.time() if now is None else now
    min_sim = opts.min_similarity if opts.min_similarity is not None else cfg.min_similarity
    parsed = parse_query(query, datetime.fromtimestamp(now_s, timezone.utc))
    text = parsed.text if opts.extract_filters else " ".join(query.split())
    if not any(ch.isalnum() for ch in text):
        raise InvalidInputError("query", "has nothing to search for once cleaned (no letters or digits left): "
                                "say what experience to recall", query)
    dr: DateRange | None = opts.date_range
    # An explicit date_range is the caller's filter; the query's own dates are only a soft signal.
    window = parsed if opts.extract_filters and dr is None and parsed.date_phrases else None
    filters = Filters(
        agent_role=opts.agent_role or agent_role or None,
        agent_id=opts.agent_id or (parsed.agent_ids[0] if opts.extract_filters and parsed.agent_ids else None),
        canvas_ids=opts.canvas_ids or (parsed.canvas_ids if opts.extract_filters and parsed.canvas_ids else None),
        start=dr.start if dr else None, end=dr.end if dr else None, success_only=opts.success_only,
    )
    early = ahead(text, opts) if ahead is not None else None
    try:
        qvec = check_embeddings(embed_query(embedder, [text]), 1, embedder.dimensions)[0]
        q = PreparedQuery(opts, query, k, now_s, min_sim, parsed, text, window, filters, qvec, ahead=early)
        if rewrite.enabled(cfg) and (subs := rewrite.subqueries(cfg, text)):
            q.subqueries = subs
            q.subvecs = check_embeddings(embed_query(embedder, subs), len(subs), embedder.dimensions)
    except BaseException:
        if early is not None:
            early.settle()
        raise
    return q


def find_candidates(store: EpisodeStore, index: EpisodeIndex, cfg: WorldGraphConfig, tenant_id: str,
                    q: PreparedQuery, embedder: Embedder | None = None) -> Candidates | None:
    """2. candidates (vector top-N plus full-text hits), then the metadata filters and the cosine
    floor on the system of record, then the feedback filter. None: nothing is left.

    When the query names some of the candidates' speakers and the speaker floor applies
    (``speaker_min_similarity``), the vector top-N is also searched with the query without the
    names (``speaker_free_vector``, needs ``embedder``): every memory of the named person carries
    the name, so the first search ranks that person's memories by the name they share with the
    query, and one that says what the query asks in other words can miss the top N. A memory it
    adds must pass the floor by its speaker-free cosine, the cosine its relevance is made of."""
    opts = q.opts
    # 2a. candidates: vector top-N plus full-text hits
    where = q.filters.where()
    # The BM25 search runs beside the vector search (LanceDB releases the GIL while it searches).
    # Only episode_id, vector and the BM25 score of a hit are used below (the rest comes from the store).
    # The words of the query's dates stay in the full-text query: the index holds each memory's date as words.
    words = " ".join([q.text, *q.parsed.date_phrases]) if opts.extract_filters else q.text
    searched_text = opts.hybrid and cfg.fulltext_pool > 0

    def search_text() -> list[dict[str, Any]]:
        return index.text_search(tenant_id, words, k=cfg.fulltext_pool, where=where, columns=["episode_id"])

    # A small table is searched in process (index_small.py) in well under a millisecond: less
    # than the hop to the pool thread and back.
    text_hits = _SEARCH_POOL.submit(search_text) if searched_text and not index.in_process(tenant_id) else None
    try:
        hits = index.vector_search(tenant_id, q.qvec, k=cfg.candidate_pool, where=where, columns=["episode_id"])
    except BaseException:
        if text_hits is not None:
            text_hits.cancel()  # read-only: if it already started, let it finish unobserved
        raise
    extra_hits = text_hits.result() if text_hits is not None else search_text() if searched_text else []
    by_id: dict[str, dict[str, Any]] = {h["episode_id"]: h for h in hits}
    for vec in q.subvecs if q.subvecs is not None else []:  # the LLM's sub-queries: their own vector top-N
        for h in index.vector_search(tenant_id, vec, k=cfg.candidate_pool, where=where, columns=["episode_id"]):
            by_id.setdefault(h["episode_id"], h)
    bm25: dict[str, float] = {}
    for h in extra_hits:
        by_id.setdefault(h["episode_id"], h)
        bm25[h["episode_id"]] = float(h.get("bm25") or 0.0)
    if not by_id:
        return None
    ids = list(by_id)
    row = {i: n for n, i in enumerate(ids)}
    # cosine with the query, all candidates at once (vector hits and BM25-only hits alike)
    matrix = np.stack([np.asarray(by_id[i]["vector"], dtype=np.float32) for i in ids])
    sims = cosine_to(matrix, q.qvec)
    semantic = {i: float(sim) for i, sim in zip(ids, sims)}
    subquery = None
    if q.subvecs is not None:
        subquery = dict(zip(ids, _best_cosines(matrix, q.subvecs)))
    # the cosine floor: the query's cosine, or a sub-query's (the LLM vouches for what it asked)
    near = semantic if subquery is None else {i: max(semantic[i], subquery[i]) for i in ids}

    # 2b. metadata filters, on the system of record (with the feedback aggregates: one read)
    episodes, stats = store.episodes_with_feedback(tenant_id, ids, category=opts.feedback_category)
    ids = [i for i in ids if i in episodes and q.filters.keeps(episodes[i])]
    # the floor: lower while the query names some of the candidates' speakers (speaker_min_similarity)
    named = speaker_names(cfg, q.text, searched_text, ids, episodes)
    floor = q.min_sim
    speaker_floor = cfg.speaker_min_similarity \
        if named and opts.min_similarity is None and cfg.min_similarity_threshold is None else None
    if speaker_floor is not None:
        floor = speaker_floor
    ids = [i for i in ids if near[i] >= floor]
    free = None
    if speaker_floor is not None and cfg.speaker_free_vector and cfg.speaker_free_candidates and embedder is not None:
        free = speaker_free_vector(embedder, q.text, named, q.ahead)
    if free is not None:
        pool = Pool(ids, matrix, row, semantic, subquery, episodes, stats)
        _speaker_free_candidates(store, index, cfg, tenant_id, q, where, free, floor, pool)
        ids, matrix = pool.ids, pool.matrix

    # 2c. feedback filter
    if opts.feedback_category is not None:
        ids = [i for i in ids if i in stats]
    avg: dict[str, float | None] = {i: normalise_feedback(stats[i][0]) if i in stats else None for i in ids}
    if opts.min_feedback_score is not None:
        floor = opts.min_feedback_score
        ids = [i for i in ids if (f := avg[i]) is not None and f >= floor]
    if not ids:
        return None
    return Candidates(ids, matrix, row, semantic, bm25, searched_text, episodes, stats, avg, subquery, named, floor,
                      free)


@dataclass
class Pool:
    """The candidates being gathered in step 2 (``find_candidates``): extended in place."""

    ids: list[str]  # the ones that passed the filters so far
    matrix: np.ndarray
    row: dict[str, int]  # every memory fetched, by episode id: its row in matrix
    semantic: dict[str, float]
    subquery: dict[str, float] | None
    episodes: dict[str, dict[str, Any]]
    stats: dict[str, Any]


def _speaker_free_candidates(store: EpisodeStore, index: EpisodeIndex, cfg: WorldGraphConfig, tenant_id: str,
                             q: PreparedQuery, where: dict[str, Any], free: np.ndarray, floor: float,
                             pool: Pool) -> None:
    """The vector top-N of the speaker-free query ``free`` added to ``pool`` (see find_candidates):
    the memories not fetched yet, read from the store, kept if they pass the filters and their
    speaker-free cosine passes ``floor``."""
    more = [h for h in index.vector_search(tenant_id, free, k=cfg.candidate_pool, where=where, columns=["episode_id"])
            if h["episode_id"] not in pool.row]
    if not more:
        return
    new_ids = [h["episode_id"] for h in more]
    new = np.stack([np.asarray(h["vector"], dtype=np.float32) for h in more])
    for n, i in enumerate(new_ids):
        pool.row[i] = pool.matrix.shape[0] + n
    pool.matrix = np.concatenate([pool.matrix, new])
    pool.semantic.update(zip(new_ids, (float(x) for x in cosine_to(new, q.qvec))))
    if pool.subquery is not None and q.subvecs is not None:
        pool.subquery.update(zip(new_ids, _best_cosines(new, q.subvecs)))
    cos_free = cosine_to(new, free)
    episodes, stats = store.episodes_with_feedback(tenant_id, new_ids, category=q.opts.feedback_category)
    pool.episodes.update(episodes)
    pool.stats.update(stats)
    pool.ids += [i for i, c in zip(new_ids, cos_free) if i in episodes and q.filters.keeps(episodes[i]) and c >= floor]


def _best_cosines(matrix: np.ndarray, vectors: np.ndarray) -> list[float]:
    """Per row of ``matrix``: its best cosine with any of ``vectors`` (the LLM's sub-queries)."""
    return [float(x) for x in np.max(np.stack([cosine_to(matrix, vec) for vec in vectors]), axis=0)]


def speaker_names(cfg: WorldGraphConfig, text: str, searched_text: bool, ids: list[str],
                  episodes: dict[str, dict[str, Any]]) -> set[str]:
    """The speakers (agent ids) of the candidates ``ids`` that the query names, when the speaker
    match applies: hybrid relevance with a full-text search, ``speaker_match_weight`` > 0, and
    the query names some of the candidates' speakers and not others (naming every speaker, or
    none, tells no memory apart). Empty otherwise."""
    if cfg.relevance_signal != "hybrid" or not searched_text or cfg.speaker_match_weight <= 0:
        return set()
    agents = {str(episodes[i].get("agent_id") or "") for i in ids}
    named = named_speakers(text, agents)
    return named if len(named) < len(agents) else set()


@dataclass
class Scored:
    """Step 3's output: every candidate's score (arrays aligned with ``Candidates.ids``), their
    parts for ``score_breakdown`` made only for the results shown (``parts``), and the diversity
    penalties of the ranking's head (step 4)."""

    ids: list[str]
    scores: Relevances
    text: TextParts
    subquery: dict[str, float] | None = None
    penalties: dict[str, float] = field(default_factory=dict)

    def parts(self, i: str) -> ScoreParts:
        n = self.text.pos[i]
        out = self.scores.parts(n)
        out.text = self.text.breakdown(n)
        if self.subquery is not None:
            out.text["subquery_cosine"] = self.subquery[i]
        out.diversity_penalty = self.penalties.get(i, 0.0)
        return out


def score_candidates(store: EpisodeStore, cfg: WorldGraphConfig, tenant_id: str, q: PreparedQuery,
                     found: Candidates, embedder: Embedder | None = None) -> Scored:
    """3. relevance scoring: the text relevance (the relevance formula's first term: the cosine, or
    the hybrid fusion), + the query's date window, + feedback-aware boosts when min_feedback_score is set.
    ``embedder``: for the speaker-free cosine (``speaker_free_vector``) and the optional sentence
    stage (None leaves them out)."""
    ids, episodes = found.ids, found.episodes
    named = found.named
    cosine = found.semantic
    qvec = q.qvec  # the query vector the cosine is taken with
    if named and embedder is not None and cfg.speaker_free_vector:
        free = found.free if found.free is not None else speaker_free_vector(embedder, q.text, named, q.ahead)
        if free is not None:
            qvec, cosine = free, _cosines(found, free)
    if found.subquery is not None:  # a memory matches the question if it matches one of its parts
        sub = found.subquery
        cosine = {i: max(cosine[i], sub[i]) for i in ids}
    text = _text_relevance(store, tenant_id, ids, cosine, found.bm25, cfg,
                           searched_text=found.searched_text, named=named, episodes=episodes,
                           vectors=found.matrix[[found.row[i] for i in ids]], qvec=qvec)
    if cfg.sentence_head > 0 and embedder is not None and found.searched_text and cfg.relevance_signal == "hybrid":
        _sentence_part(embedder, cfg, tenant_id, ids, episodes, text, qvec)
    dates = _date_boosts(q.window, q.query, q.opts.now is not None, ids, episodes, cfg)
    recs = [episodes[i] for i in ids]
    scores = relevances(text.parts.relevance, np.array([float(e["ts"]) for e in recs]),
                        np.array([float(e["confidence_score"]) for e in recs]),
                        np.array([np.nan if (f := found.avg[i]) is None else f for i in ids], dtype=np.float64),
                        q.now_s, cfg, feedback_aware=q.opts.min_feedback_score is not None,
                        date=np.array([dates.get(i, 0.0) for i in ids]) if dates else None)
    return Scored(ids, scores, text, found.subquery)


def diversify(cfg: WorldGraphConfig, k: int, found: Candidates, scored: Scored) -> list[str]:
    """4. diversity penalty and re-sort (ties broken by id so results are deterministic); returns
    the ids of the top ``k``, best first, and records each head candidate's penalty in ``scored``."""
    ids = sorted(found.ids)
    ranking, pos = scored.scores.ranking, scored.text.pos
    scores = [float(ranking[pos[i]]) for i in ids]
    # Only the head of the ranking can reach the top k, so the penalty is computed on a prefix
    # (exactly: a memory's penalty depends only on the memories ranked above it, and an adjusted
    # score is never above the score, so once the k-th best adjusted score of the prefix is >= the
    # next score, nothing further down can enter). Besides saving work, this keeps the pairwise
    # cosine matrix small: multi-threaded BLAS on a 100 x 100 product costs ~20 ms on a loaded
    # 2-core machine, a 16 x 16 one ~0.05 ms.
    by_score = sorted(range(len(ids)), key=lambda p: -scores[p])  # stable: same order as diversity_order
    m = min(len(ids), max(2 * k, 16))
    while True:
        head = by_score[:m]
        rows = [found.row[ids[p]] for p in head]
        order, penalties = diversity_order([scores[p] for p in head], found.matrix[rows], cfg)
        if m == len(ids):
            break
        adjusted = sorted((scores[p] - penalties[j] for j, p in enumerate(head)), reverse=True)
        if len(adjusted) >= k and adjusted[k - 1] >= scores[by_score[m]]:
            break
        m = min(len(ids), m * 2)
    for j, p in enumerate(head):
        scored.penalties[ids[p]] = penalties[j]
    return [ids[head[o]] for o in order[:k]]


def format_results(store: EpisodeStore, tenant_id: str, opts: RecallOptions, found: Candidates,
                   scored: Scored, top: list[str]) -> list[RecallResult]:
    """5. top-k and formatting."""
    episodes, stats, avg = found.episodes, found.stats, found.avg
    parts = {i: scored.parts(i) for i in top}
    extra = store.neighborhood(tenant_id, top) if opts.include_neighborhood else {}
    adjacent = _adjacent(store, tenant_id, top) if opts.include_neighborhood else {}
    results = []
    for i in top:
        ep = episodes[i]
        res = RecallResult(
            episode_id=i,
            task_type=ep["task_type"],
            task_description=ep["task_description"],
            input_summary=ep.get("input_summary", ""),
            outcome=ep["outcome"],
            learnings=ep.get("learnings", []),
            confidence=ep["confidence_score"],
            timestamp=ep["timestamp"],
            relevance_score=round(parts[i].score, 6),
            canvas_id=ep.get("canvas_id"),
            canvas_name=ep.get("canvas_name"),
            canvas_actions=ep.get("canvas_action_ids", []),
            feedback_score=None if (f := avg[i]) is None else round(f, 6),
            feedback_count=stats[i][1] if i in stats else 0,
            semantic_score=round(found.semantic[i], 6),
            agent_id=ep["agent_id"],
            agent_role=ep.get("agent_role", ""),
            success=ep["success"],
            approach_taken=ep.get("approach_taken", ""),
            session_id=ep.get("session_id"),
            score_breakdown=parts[i].as_dict(),
        )
        if opts.include_canvas_context:
            res["canvas_snapshot"] = ep.get("canvas_snapshot")
            res["canvas_action_details"] = store.canvas_audits(tenant_id, i)
        if opts.include_neighborhood:
            res["neighborhood"] = {**(extra.get(i) or {}), **adjacent.get(i, {"previous": None, "next": None})}
        results.append(res)
    return results


def speaker_free_vector(embedder: Embedder, text: str, named: set[str], ahead: Ahead | None = None
                        ) -> np.ndarray | None:
    """The embedding of ``text`` without the names of the ``named`` speakers (relevance.without_speakers),
    for the vector part of the text relevance (and the speaker-free candidates); None when nothing
    but the names is left. One more query embedding (``ahead``'s, when it embedded this same text)."""
    rest = _speaker_free_text(text, named)
    if rest is None:
        return None
    vec = ahead.vector(embedder) if ahead is not None and ahead.text == rest else None
    if vec is None:
        vec = check_embeddings(embed_query(embedder, [rest]), 1, embedder.dimensions)[0]
    return vec


def _cosines(found: Candidates, vec: np.ndarray) -> dict[str, float]:
    sims = cosine_to(found.matrix, vec)  # every row fetched: cheaper than gathering the candidates' rows
    row = found.row
    return {i: float(sims[row[i]]) for i in found.ids}


@dataclass
class TextParts:
    """The text relevance of every candidate (relevance.py's arrays, aligned with ``ids``) and the
    cosine its vector part is made of; ``breakdown(n)``: candidate n's parts for score_breakdown."""

    pos: dict[str, int]
    cosine: np.ndarray
    parts: TextRelevance

    def breakdown(self, n: int) -> dict[str, float]:
        p = self.parts
        return {"text_relevance": float(p.relevance[n]), "vector_cosine": float(self.cosine[n]),
                "vector_part": float(p.vector[n]), "bm25_part": float(p.bm25[n]),
                "speaker_part": float(p.speaker[n]), "question_part": float(p.question[n]),
                "answer_part": float(p.answer[n]), "neighbor_part": float(p.neighbor[n]),
                "reply_part": float(p.reply[n]),
                "sentence_part": float(p.sentence[n]) if p.sentence is not None else 0.0}


def _speaker_free_text(text: str, named: set[str]) -> str | None:
    """The query without the names of the ``named`` speakers; None when nothing but them is left."""
    rest = without_speakers(text, named)
    return rest if any(ch.isalnum() for ch in rest) else None


def speaker_free_ahead(store: EpisodeStore, embedder: Embedder, cfg: WorldGraphConfig, tenant_id: str, text: str,
                       opts: RecallOptions) -> Ahead | None:
    """The speaker-free query's embedding, started on another thread before the candidates are
    known, so that it runs beside the query's own embedding (on a machine with a free core the
    recall then waits for one model run instead of two; the CPU is the same). Which speakers the
    query names is only known from the candidates (``speaker_names``), so it is guessed from the
    tenant's agents (at most ``AHEAD_MAX_AGENTS``): the vector is used only when the candidates
    name the same speakers (``speaker_free_vector`` compares the texts), else it is embedded
    again as before. None: the speaker match cannot apply, or the query names none or every one."""
    if not (cfg.speaker_free_vector and cfg.relevance_signal == "hybrid" and opts.hybrid
            and cfg.fulltext_pool > 0 and cfg.speaker_match_weight > 0):
        return None
    agents = store.agent_ids(tenant_id, AHEAD_MAX_AGENTS + 1)
    if len(agents) > AHEAD_MAX_AGENTS:
        return None
    named = named_speakers(text, agents)
    if not named or len(named) == len(agents):
        return None
    rest = _speaker_free_text(text, named)
    if rest is None:
        return None
    return Ahead(rest, _AHEAD_POOL.submit(embed_query, embedder, [rest]))


def _text_relevance(store: EpisodeStore, tenant_id: str, ids: list[str], semantic: dict[str, float],
                    bm25: dict[str, float], cfg: WorldGraphConfig, searched_text: bool, named: set[str] | None = None,
                    episodes: dict[str, dict[str, Any]] | None = None, vectors: np.ndarray | None = None,
                    qvec: np.ndarray | None = None) -> TextParts:
    """Per candidate: the text relevance and its parts (relevance.py), for score_breakdown; BM25
    relative to the query's best hit, whether or not that one is still a candidate; the speaker
    match for the candidates whose speaker (agent_id) is among ``named``; ``vector_cosine``: the
    cosine the vector part is made of (the query's, or the speaker-free one); the reply part from
    the candidates' ``vectors`` (aligned with ``ids``) and ``qvec``, the vector that cosine is
    taken with."""
    pos = {i: n for n, i in enumerate(ids)}
    neighbors: list[tuple[int | None, int | None]] | None = None
    links: dict[str, tuple[str | None, str | None]] | None = None
    hybrid = bool(ids) and cfg.relevance_signal == "hybrid"
    replies = hybrid and searched_text and cfg.reply_context > 0 and vectors is not None and qvec is not None \
        and episodes is not None
    turns = {i for i in ids if episodes[i].get("task_type") == CONVERSATION_TASK_TYPE} \
        if replies and episodes is not None else set()
    # one read of the session order, shared by the steps that need it (none for a recall over
    # agent runs alone: no turn, no reply)
    if hybrid and cfg.neighbor_weight > 0:
        links = store.session_neighbors(tenant_id, ids)
    elif turns:
        links = store.session_neighbors(tenant_id, [i for i in ids if i in turns])
    if links is not None and cfg.neighbor_weight > 0:
        neighbors = []
        for i in ids:
            prev, nxt = links.get(i, (None, None))
            neighbors.append((pos.get(prev) if prev else None, pos.get(nxt) if nxt else None))
    hit = None
    if episodes is not None and named:
        hit = np.array([str(episodes[i].get("agent_id") or "") in named for i in ids], dtype=bool)
    asks, answers = None, None
    if episodes is not None and ids and cfg.relevance_signal == "hybrid" and searched_text:
        asks, answers = _questions(store, tenant_id, cfg, ids, pos, episodes, links)
    cosine = np.array([semantic[i] for i in ids], dtype=np.float64)
    gain = None
    if turns and links is not None and vectors is not None and qvec is not None:
        reply_rows = [pos.get(links.get(i, (None, None))[1] or "") if i in turns else None for i in ids]
        gain = reply_gains(vectors, qvec, reply_rows, cfg.reply_context)
    rel = text_relevance(cosine, np.array([bm25.get(i, 0.0) for i in ids], dtype=np.float64),
                         max(bm25.values(), default=0.0), neighbors, cfg, searched_text, hit, asks, answers, gain)
    return TextParts(pos, cosine, rel)


def _sentence_part(embedder: Embedder, cfg: WorldGraphConfig, tenant_id: str, ids: list[str],
                   episodes: dict[str, dict[str, Any]], text: TextParts, qvec: np.ndarray) -> None:
    """The optional sentence stage (sentences.py): the ``sentence_head`` candidates of highest text
    relevance that are conversation turns of several sentences gain the sentence part."""
    head = [int(n) for n in np.argsort(-text.parts.relevance, kind="stable")[:cfg.sentence_head]]
    turns = []
    for n in head:
        ep = episodes[ids[n]]
        turns.append(sentence_texts(str(ep.get("agent_id") or ""), str(ep.get("task_description") or ""))
                     if ep.get("task_type") == CONVERSATION_TASK_TYPE else [])
    gain = np.zeros(len(ids))
    for n, best in zip(head, best_sentence_cosines(embedder, tenant_id, qvec, turns)):
        if best is not None:
            gain[n] = max(0.0, best - float(text.cosine[n]))
    text.parts = with_sentences(text.parts, gain, cfg)


def _questions(store: EpisodeStore, tenant_id: str, cfg: WorldGraphConfig, ids: list[str], pos: dict[str, int],
               episodes: dict[str, dict[str, Any]], links: dict[str, tuple[str | None, str | None]] | None = None
               ) -> tuple[np.ndarray | None, list[tuple[int, int]] | None]:
    """For the question and answer parts (relevance.py): the share of each candidate conversation
    turn's text that asks (0 for other memories), and the (question, answer) pairs among the
    candidates: the next turn of a question's session, said by another speaker. ``links``: the
    session neighbours the neighbour lift (every candidate's) or the reply part (every candidate
    turn's) already read; else only the questions' are read (one store query), and only when
    answer_weight > 0."""
    if cfg.question_weight <= 0 and cfg.answer_weight <= 0:
        return None, None
    asks = np.array([question_share(str(episodes[i].get("task_description") or ""))
                     if episodes[i].get("task_type") == CONVERSATION_TASK_TYPE else 0.0 for i in ids])
    asking = [i for i, share in zip(ids, asks) if share > 0]
    if not asking or cfg.answer_weight <= 0:
        return asks, None
    if links is None:
        links = store.session_neighbors(tenant_id, asking)
    answers = []
    for q in asking:
        nxt = links.get(q, (None, None))[1]
        if nxt is not None and nxt in pos and episodes[nxt].get("agent_id") != episodes[q].get("agent_id"):
            answers.append((pos[q], pos[nxt]))
    return asks, answers


def _date_boosts(window: ParsedQuery | None, query: str, explicit_now: bool, ids: list[str],
                 episodes: dict[str, dict[str, Any]], cfg: WorldGraphConfig) -> dict[str, float]:
    """The soft date signal: ``date_match_boost`` for the memories inside the query's window.

    A relative phrase ("last week") is read against ``now``; when no ``now`` was given and every
    memory found is older than the phrase's window, it is read against the newest of them
    instead (a question about an old conversation means that conversation's last week)."""
    if window is None or not ids or cfg.date_match_boost == 0:
        return {}
    ts = np.array([float(episodes[i]["ts"]) for i in ids])
    if window.relative and not explicit_now and window.start is not None and ts.max() < window.start.timestamp():
        window = parse_query(query, datetime.fromtimestamp(float(ts.max()), timezone.utc))
    inside = in_window(ts, window.start.timestamp() if window.start else None,
                       window.end.timestamp() if window.end else None)
    return {i: cfg.date_match_boost for i, hit in zip(ids, inside) if hit}


def _adjacent(store: EpisodeStore, tenant_id: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per episode of a session: its previous and next episode in the session (records or None)."""
    links = store.session_neighbors(tenant_id, ids)
    found = store.get_episodes(tenant_id, [x for pair in links.values() for x in pair if x is not None])
    return {i: {"previous": found.get(p) if p else None, "next": found.get(n) if n else None}
            for i, (p, n) in links.items()}
