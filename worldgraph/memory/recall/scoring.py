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
    return float(recency_boosts(np.array([timestamp], dtype=np.float64), now, cfg)[0])


def recency_boosts(timestamps: np.ndarray, now: float, cfg: WorldGraphConfig) -> np.ndarray:
    """``recency_boost`` of each timestamp (float64 array)."""
    days = (now - np.asarray(timestamps, dtype=np.float64)) / SECONDS_PER_DAY
    out: np.ndarray = np.where(days < cfg.recency_boost_days, cfg.recency_boost_amount,
                               np.where(days < cfg.recency_secondary_days, cfg.recency_secondary_amount, 0.0))
    return out


def feedback_adjustment(avg_feedback: float | None, cfg: WorldGraphConfig) -> float:
    """The feedback term of step 4, on the normalised average: above 0.5 up to +0.2, below 0.5 down to -0.3."""
    return float(feedback_adjustments(_averages([avg_feedback]), cfg)[0])


def feedback_adjustments(avg_feedback: np.ndarray, cfg: WorldGraphConfig) -> np.ndarray:
    """``feedback_adjustment`` of each normalised average (NaN: never rated, neutral)."""
    f = np.asarray(avg_feedback, dtype=np.float64)
    f = np.where(np.isnan(f), NEUTRAL_FEEDBACK, f)
    out: np.ndarray = np.where(
        f > NEUTRAL_FEEDBACK, (f - NEUTRAL_FEEDBACK) * (cfg.feedback_boost_max / NEUTRAL_FEEDBACK),
        np.where(f < NEUTRAL_FEEDBACK, -(NEUTRAL_FEEDBACK - f) * (abs(cfg.feedback_penalty_max) / NEUTRAL_FEEDBACK),
                 0.0))
    return out


def feedback_aware_adjustment(avg_feedback: float | None, cfg: WorldGraphConfig) -> float:
    """The feedback-aware recall's extra step: +0.2 above 0.7, -0.3 below 0.3."""
    return float(feedback_aware_adjustments(_averages([avg_feedback]), cfg)[0])


def feedback_aware_adjustments(avg_feedback: np.ndarray, cfg: WorldGraphConfig) -> np.ndarray:
    """``feedback_aware_adjustment`` of each normalised average (NaN: never rated, 0)."""
    f = np.asarray(avg_feedback, dtype=np.float64)
    rated = ~np.isnan(f)
    out: np.ndarray = np.where(rated & (f > cfg.feedback_high_threshold), cfg.feedback_high_boost,
                               np.where(rated & (f < cfg.feedback_low_threshold), cfg.feedback_low_penalty, 0.0))
    return out


def _averages(avg_feedback: list[float | None]) -> np.ndarray:
    """Normalised averages as a float64 array, NaN for never rated."""
    return np.array([np.nan if f is None else f for f in avg_feedback], dtype=np.float64)


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
    return relevances(np.array([semantic], dtype=np.float64), np.array([timestamp], dtype=np.float64),
                      np.array([confidence], dtype=np.float64), _averages([avg_feedback]), now, cfg,
                      feedback_aware, np.array([date], dtype=np.float64)).parts(0)


@dataclass
class Relevances:
    """``relevance`` of many candidates at once (aligned float64 arrays): what a recall computes
    for every candidate; ``parts(n)`` is candidate n's ScoreParts (made only for those shown)."""

    semantic: np.ndarray
    recency: np.ndarray
    feedback: np.ndarray
    confidence: np.ndarray
    date: np.ndarray
    clamped: np.ndarray
    feedback_aware: np.ndarray

    @property
    def ranking(self) -> np.ndarray:
        """The score the diversity step ranks by: clamped plus the feedback-aware boost."""
        out: np.ndarray = self.clamped + self.feedback_aware
        return out

    def parts(self, n: int) -> ScoreParts:
        return ScoreParts(semantic=float(self.semantic[n]), recency=float(self.recency[n]),
                          feedback=float(self.feedback[n]), confidence=float(self.confidence[n]),
                          clamped=float(self.clamped[n]), feedback_aware=float(self.feedback_aware[n]),
                          date=float(self.date[n]))


def relevances(semantic: np.ndarray, timestamps: np.ndarray, confidence: np.ndarray, avg_feedback: np.ndarray,
               now: float, cfg: WorldGraphConfig, feedback_aware: bool = False,
               date: np.ndarray | None = None) -> Relevances:
    """``relevance`` of each candidate (float64 arrays; ``avg_feedback`` NaN: never rated; ``date``
    None: no date boost). The same sums in the same order as the scalar formula, so the same floats."""
    n = len(semantic)
    sem = np.asarray(semantic, dtype=np.float64) * cfg.semantic_weight
    rec = recency_boosts(timestamps, now, cfg)
    fb = feedback_adjustments(avg_feedback, cfg)
    conf = np.asarray(confidence, dtype=np.float64) * cfg.confidence_weight
    dt = np.zeros(n) if date is None else np.asarray(date, dtype=np.float64)
    clamped = np.minimum(1.0, np.maximum(0.0, sem + rec + fb + conf + dt))
    aware = feedback_aware_adjustments(avg_feedback, cfg) if feedback_aware else np.zeros(n)
    return Relevances(semantic=sem, recency=rec, feedback=fb, confidence=conf, date=dt, clamped=clamped,
                      feedback_aware=aware)


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
    # the pairs over the threshold, found at once (few: near-copies); each memory's penalties are
    # then added in rank order of the memories above it, as one pass down the ranking adds them
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    close = np.argwhere((sims > cfg.diversity_penalty_threshold) & (rank[None, :] < rank[:, None]))
    for i, j in sorted(close.tolist(), key=lambda pair: (rank[pair[0]], rank[pair[1]])):
        penalties[i] += (float(sims[i, j]) - cfg.diversity_penalty_threshold) * cfg.diversity_penalty_factor
    adjusted = [scores[i] - penalties[i] for i in range(n)]
    final_order = sorted(order, key=lambda i: -adjusted[i])
    return final_order, penalties
