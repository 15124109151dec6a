"""Step 3 of recall (docs/architecture.md "Recall"): every candidate's relevance score, assembled
from its parts: the text relevance (relevance.py: the cosine, or the hybrid fusion, with the
speaker, question, answer, reply and sentence parts), the query's date window, recency, feedback
and confidence (scoring.py); the parts shown in ``score_breakdown``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.kg.store import EpisodeStore
from worldgraph.memory.cosine import cosine_to
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.recall.candidates import Candidates
from worldgraph.memory.recall.conversation import question_pairs, sentence_gains, speaker_free_vector
from worldgraph.memory.recall.prepare import PreparedQuery
from worldgraph.memory.recall.query import ParsedQuery, parse_query
from worldgraph.memory.recall.relevance import TextRelevance, in_window, reply_gains, text_relevance, with_sentences
from worldgraph.memory.recall.scoring import Relevances, ScoreParts, relevances
from worldgraph.memory.record import CONVERSATION_TASK_TYPE


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
        gain = sentence_gains(embedder, cfg, tenant_id, ids, episodes, text.parts.relevance, text.cosine, qvec)
        text.parts = with_sentences(text.parts, gain, cfg)
    dates = _date_boosts(q.window, q.query, q.opts.now is not None, ids, episodes, cfg)
    recs = [episodes[i] for i in ids]
    scores = relevances(text.parts.relevance, np.array([float(e["ts"]) for e in recs]),
                        np.array([float(e["confidence_score"]) for e in recs]),
                        np.array([np.nan if (f := found.avg[i]) is None else f for i in ids], dtype=np.float64),
                        q.now_s, cfg, feedback_aware=q.opts.min_feedback_score is not None,
                        date=np.array([dates.get(i, 0.0) for i in ids]) if dates else None)
    return Scored(ids, scores, text, found.subquery)


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
        asks, answers = question_pairs(store, tenant_id, cfg, ids, pos, episodes, links)
    cosine = np.array([semantic[i] for i in ids], dtype=np.float64)
    gain = None
    if turns and links is not None and vectors is not None and qvec is not None:
        reply_rows = [pos.get(links.get(i, (None, None))[1] or "") if i in turns else None for i in ids]
        gain = reply_gains(vectors, qvec, reply_rows, cfg.reply_context)
    rel = text_relevance(cosine, np.array([bm25.get(i, 0.0) for i in ids], dtype=np.float64),
                         max(bm25.values(), default=0.0), neighbors, cfg, searched_text, hit, asks, answers, gain)
    return TextParts(pos, cosine, rel)


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
