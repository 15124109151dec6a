"""Step 2 of recall (docs/architecture.md "Recall"): the candidates (the vector top-N, BM25 hits,
the LLM's sub-queries' and the speaker-free query's top-N), the metadata filters and the cosine floor
on the system of record, then the feedback filter."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.kg.store import EpisodeStore
from worldgraph.memory.cosine import cosine_to
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.recall.conversation import speaker_free_vector, speaker_names
from worldgraph.memory.recall.prepare import PreparedQuery
from worldgraph.memory.recall.scoring import normalise_feedback

_SEARCH_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="worldgraph-recall")


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
    q.filters.episode_ids = scope(store, tenant_id, q)
    if q.filters.episode_ids is not None and not q.filters.episode_ids:
        return None
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
        # at least as many candidates as results asked for: a page deep into a ranking (limit 300) is whole
        hits = index.vector_search(tenant_id, q.qvec, k=max(cfg.candidate_pool, q.k), where=where, columns=["episode_id"])
    except BaseException:
        if text_hits is not None:
            text_hits.cancel()  # read-only: if it already started, let it finish unobserved
        raise
    # While the BM25 search still runs (at 10M rows it takes longer than the vector search), the
    # vector hits' records are read from the store: the main thread would only wait for it
    # (bench/README.md, "Plain recall at 10M: where the time goes").
    early = None
    if text_hits is not None and hits and not text_hits.done():
        asked = list(dict.fromkeys(h["episode_id"] for h in hits))
        early = asked, store.episodes_with_feedback(tenant_id, asked, category=opts.feedback_category)
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

    # 2b. metadata filters, on the system of record (with the feedback aggregates: one read, or
    # the vector hits' read above and one of the rest)
    episodes, stats = _records(store, tenant_id, ids, opts.feedback_category, early)
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


def _records(store: EpisodeStore, tenant_id: str, ids: list[str], category: str | None,
             early: tuple[list[str], tuple[dict[str, Any], dict[str, Any]]] | None
             ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The records and feedback aggregates of ``ids`` (``episodes_with_feedback``); ``early``: a
    read made already (the ids it asked, its answer), whose ids are not asked again."""
    if early is None:
        return store.episodes_with_feedback(tenant_id, ids, category=category)
    asked, (episodes, stats) = early
    done = set(asked)
    rest = [i for i in ids if i not in done]
    if not rest:
        return episodes, stats
    more, more_stats = store.episodes_with_feedback(tenant_id, rest, category=category)
    return {**episodes, **more}, {**stats, **more_stats}


def scope(store: EpisodeStore, tenant_id: str, q: PreparedQuery) -> frozenset[str] | None:
    """The episodes that pass the filters only the store holds the values of (the session, the
    feedback floor and category), read from the store at each recall, so a rating another process
    just wrote counts at once; pushed into the index's search as ``episode_ids``, so the vector and
    full-text top N are the best of the episodes that pass, not the passing few of the overall best.
    None: no such filter."""
    opts, sets = q.opts, []
    if q.filters.session_id is not None:
        sets.append(frozenset(store.session_episode_ids(tenant_id, q.filters.session_id)))
    if opts.feedback_category is not None or opts.min_feedback_score is not None:
        sets.append(_passing(store.feedback_means(tenant_id, opts.feedback_category), opts.min_feedback_score))
    if not sets:
        return None
    return sets[0] if len(sets) == 1 else frozenset.intersection(*sets)


_PASSING: dict[float | None, tuple[dict[str, float], frozenset[str]]] = {}  # by floor: (means, passing)
_PASSING_LOCK = threading.Lock()


def _passing(means: dict[str, float], floor: float | None) -> frozenset[str]:
    """The rated episodes of ``means`` whose normalised mean passes ``floor`` (None: every one),
    kept while the store hands out the same means (it reads them again after any write)."""
    with _PASSING_LOCK:
        held = _PASSING.get(floor)
    if held is not None and held[0] is means:
        return held[1]
    out = frozenset(e for e, mean in means.items()
                    if floor is None or (f := normalise_feedback(mean)) is not None and f >= floor)
    with _PASSING_LOCK:
        if len(_PASSING) >= 16:
            _PASSING.clear()
        _PASSING[floor] = (means, out)
    return out


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
