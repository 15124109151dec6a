"""Relevance scoring and the diversity penalty (recall steps 4 and 5), every weight from config.

Pure functions over plain numbers and arrays, so tests can pin exact scores.

Feedback scale (docs/architecture.md, "Feedback scale"): scores are stored in [-1, 1]; scoring uses the normalised
average ``(mean + 1) / 2`` in [0, 1], and an episode with no feedback counts as neutral (0.5).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.cosine import cosine_matrix

SECONDS_PER_DAY = 86400.0
NEUTRAL_FEEDBACK = 0.5


def normalise_feedback(mean_score: float | None) -> float | None:
    """Mean of raw scores in [-1, 1] -> [0, 1]; None stays None (never rated)."""
    return None if mean_score is None else (mean_score + 1.0) / 2.0


def recency_boost(timestamp: float, now: float, cfg: WorldGraphConfig) -> float:
    """+0.1 under 7 days old, +0.05 under 30 days, else 0 (the recency term of step 4)."""
    days = (now - timestamp) / SECONDS_PER_DAY
    if days < cfg.recency_boost_days:
        return cfg.recency_boost_amount
    if days < cfg.recency_secondary_days:
        return cfg.recency_secondary_amount
    return 0.0


def feedback_adjustment(avg_feedback: float | None, cfg: WorldGraphConfig) -> float:
    """The feedback term of step 4, on the normalised average: above 0.5 up to +0.2, below 0.5 down to -0.3."""
    f = NEUTRAL_FEEDBACK if avg_feedback is None else avg_feedback
    if f > NEUTRAL_FEEDBACK:
        return (f - NEUTRAL_FEEDBACK) * (cfg.feedback_boost_max / NEUTRAL_FEEDBACK)
    if f < NEUTRAL_FEEDBACK:
        return -(NEUTRAL_FEEDBACK - f) * (abs(cfg.feedback_penalty_max) / NEUTRAL_FEEDBACK)
    return 0.0


def feedback_aware_adjustment(avg_feedback: float | None, cfg: WorldGraphConfig) -> float:
    """The feedback-aware recall's extra step: +0.2 above 0.7, -0.3 below 0.3."""
    if avg_feedback is None:
        return 0.0
    if avg_feedback > cfg.feedback_high_threshold:
        return cfg.feedback_high_boost
    if avg_feedback < cfg.feedback_low_threshold:
        return cfg.feedback_low_penalty
    return 0.0


@dataclass
class ScoreParts:
    """Why an episode scored what it did (shown by `worldgraph recall --explain`)."""

    semantic: float  # semantic similarity x semantic_weight
    recency: float
    feedback: float
    confidence: float
    clamped: float
    feedback_aware: float = 0.0
    diversity_penalty: float = 0.0
    date: float = 0.0  # the query's date window matched (a soft signal; inside the clamp)
    text: dict[str, float] = field(default_factory=dict)  # the parts of the text relevance (relevance.py)
    notes: list[str] = field(default_factory=list)

    @property
    def final(self) -> float:
        """The ranking value: the clamped score plus the feedback-aware boost (which can lift it
        over 1) minus the diversity penalty (which can push it under 0). Results are ordered by it."""
        return self.clamped + self.feedback_aware - self.diversity_penalty

    @property
    def score(self) -> float:
        """What callers get as ``relevance_score``: ``final`` clamped to [0, 1]. Clamping is
        monotone, so the reported scores keep the order ``final`` gave (ties at 0 or 1 included)."""
        return min(1.0, max(0.0, self.final))

    def as_dict(self) -> dict[str, float]:
        return {
            "semantic_weighted": round(self.semantic, 6),
            "recency_boost": round(self.recency, 6),
            "feedback_adjustment": round(self.feedback, 6),
            "confidence_factor": round(self.confidence, 6),
            "date_match": round(self.date, 6),
            **{k: round(v, 6) for k, v in self.text.items()},
            "clamped": round(self.clamped, 6),
            "feedback_aware": round(self.feedback_aware, 6),
            "diversity_penalty": round(self.diversity_penalty, 6),
            "final": round(self.final, 6),
        }


def relevance(
    semantic: float,
    timestamp: float,
    confidence: float,
    avg_feedback: float | None,
    now: float,
    cfg: WorldGraphConfig,
    feedback_aware: bool = False,
    date: float = 0.0,
) -> ScoreParts:
    """Recall step 4: semantic x 0.6 + recency + feedback + confidence x 0.1, clamped to [0, 1].

    ``semantic`` is the text relevance (the cosine, or the hybrid fusion of relevance.py);
    ``date`` is the query's date-window boost (0 when the query names no date).
    With ``feedback_aware`` (min_feedback_score set) the +0.2 / -0.3 boosts are added on top of
    the clamped score, as feedback-aware recall adds them to the final score.
    """
    sem = semantic * cfg.semantic_weight
    rec = recency_boost(timestamp, now, cfg)
    fb = feedback_adjustment(avg_feedback, cfg)
    conf = confidence * cfg.confidence_weight
    clamped = min(1.0, max(0.0, sem + rec + fb + conf + date))
    parts = ScoreParts(semantic=sem, recency=rec, feedback=fb, confidence=conf, clamped=clamped, date=date)
    if feedback_aware:
        parts.feedback_aware = feedback_aware_adjustment(avg_feedback, cfg)
    return parts


def diversity_order(scores: list[float], vectors: np.ndarray, cfg: WorldGraphConfig) -> tuple[list[int], list[float]]:
    """Recall step 5: sort by score; each memory loses (sim - 0.9) x 0.5 for every higher-ranked
    memory it is more than 0.9 similar to; re-sort. Returns (order of indices, penalties by index).

    Penalties are computed against the order before re-sorting (so one pass decides them); ties keep the
    original order (stable sort), so the result is deterministic.
    """
    n = len(scores)
    penalties = [0.0] * n
    if n == 0:
        return [], penalties
    order = sorted(range(n), key=lambda i: -scores[i])
    sims = cosine_matrix(vectors)
    for pos, i in enumerate(order):
        for j in order[:pos]:
            s = float(sims[i, j])
            if s > cfg.diversity_penalty_threshold:
                penalties[i] += (s - cfg.diversity_penalty_threshold) * cfg.diversity_penalty_factor
    adjusted = [scores[i] - penalties[i] for i in range(n)]
    final_order = sorted(order, key=lambda i: -adjusted[i])
    return final_order, penalties
