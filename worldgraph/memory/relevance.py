"""Text relevance: how well a memory matches the query's words and meaning, in [0, 1].

The seed's formula (scoring.py) takes one semantic term. With ``relevance_signal="vector"`` it
is the cosine similarity, as the seed has it. With ``"hybrid"`` it fuses everything recall
fetched (ARCHITECTURE.md):

    relevance = (1 - w) x vector + w x bm25 + neighbour lift, at most 1

- ``vector`` = the cosine similarity, floored at 0 (an absolute scale: it does not depend on
  the other candidates);
- ``bm25`` = the memory's BM25 score over the best BM25 score of the query's full-text hits
  (0 for a memory the full-text search did not return), so the best word match is 1 (BM25
  scores have no fixed scale: they grow with the query's length and the words' rarity);
- ``w`` = ``hybrid_text_weight``;
- neighbour lift = ``neighbor_weight`` x the fused relevance of the memory's best session
  neighbour (the turn before or after it) among the candidates: an answer that follows a
  question matching the query well is lifted with it.

Pure functions over arrays, so tests can pin the numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from worldgraph.config import WorldGraphConfig


@dataclass
class TextRelevance:
    """Per candidate (aligned arrays): the relevance and its parts."""

    relevance: np.ndarray
    vector: np.ndarray  # (1 - w) x vector evidence
    bm25: np.ndarray  # w x normalised BM25
    neighbor: np.ndarray  # the neighbour lift


def text_relevance(
    cosine: np.ndarray,
    bm25: np.ndarray,
    bm25_top: float,
    neighbors: list[tuple[int | None, int | None]] | None,
    cfg: WorldGraphConfig,
    searched_text: bool = True,
) -> TextRelevance:
    """``cosine`` and ``bm25`` (0 where there is no full-text hit) per candidate; ``bm25_top``:
    the best BM25 score of the query's hits (whether or not that memory is still a candidate);
    ``neighbors[i]``: the candidate indices of i's previous / next session episode (or None).
    ``searched_text=False`` (no full-text search ran: ``hybrid=False``) leaves the cosine alone,
    as with ``"vector"``; a search that matched nothing is evidence, and weighs in as 0."""
    cos = np.asarray(cosine, dtype=np.float64)
    n = cos.shape[0]
    if cfg.relevance_signal == "vector" or not searched_text:
        zeros = np.zeros(n)
        return TextRelevance(relevance=cos, vector=cos.copy(), bm25=zeros, neighbor=zeros.copy())
    raw = np.asarray(bm25, dtype=np.float64)
    top = max(float(bm25_top), float(raw.max()) if n else 0.0)
    w = cfg.hybrid_text_weight
    vector = (1.0 - w) * np.clip(cos, 0.0, 1.0)
    lexical = w * (raw / top if top > 0 else np.zeros(n))
    fused = vector + lexical
    lift = np.zeros(n)
    if neighbors is not None and cfg.neighbor_weight > 0:
        for i, (prev, nxt) in enumerate(neighbors):
            best = max((fused[j] for j in (prev, nxt) if j is not None), default=0.0)
            lift[i] = cfg.neighbor_weight * best
    relevance = np.minimum(1.0, fused + lift)
    return TextRelevance(relevance=relevance, vector=vector, bm25=lexical, neighbor=relevance - fused)


def in_window(timestamps: np.ndarray, start: float | None, end: float | None) -> np.ndarray:
    """Which memories fall inside the query's date window (bounds inclusive; None is open)."""
    ts = np.asarray(timestamps, dtype=np.float64)
    inside = np.ones(ts.shape[0], dtype=bool)
    if start is not None:
        inside &= ts >= start
    if end is not None:
        inside &= ts <= end
    return inside
