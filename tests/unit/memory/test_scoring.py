"""The recall scoring formulas of docs/architecture.md ("Recall", step 4), pinned to exact values
(pure functions and end-to-end recall)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.recall.scoring import (
    diversity_order,
    feedback_adjustment,
    feedback_aware_adjustment,
    normalise_feedback,
    recency_boost,
    relevance,
    relevances,
)

CFG = WorldGraphConfig()
DAY = 86400.0
NOW = 1_800_000_000.0

# Cosines come from the index's vectors, stored as float16 (memory/index/schema.py): within ~1e-4
# of the float32 value, so the seed's exact numbers are checked to 1e-3.
STORED = 1e-3


def test_recency_bands() -> None:
    assert recency_boost(NOW - 0.5 * DAY, NOW, CFG) == 0.1
    assert recency_boost(NOW - 6.99 * DAY, NOW, CFG) == 0.1
    assert recency_boost(NOW - 7 * DAY, NOW, CFG) == 0.05  # "< 7 days" is strict
    assert recency_boost(NOW - 29.9 * DAY, NOW, CFG) == 0.05
    assert recency_boost(NOW - 30 * DAY, NOW, CFG) == 0.0
    assert recency_boost(NOW - 400 * DAY, NOW, CFG) == 0.0


def test_feedback_scale_and_adjustment() -> None:
    assert normalise_feedback(None) is None
    assert normalise_feedback(1.0) == 1.0 and normalise_feedback(-1.0) == 0.0 and normalise_feedback(0.0) == 0.5
    assert feedback_adjustment(None, CFG) == 0.0  # never rated: neutral
    assert feedback_adjustment(0.5, CFG) == 0.0
    assert feedback_adjustment(1.0, CFG) == pytest.approx(0.2)  # max boost
    assert feedback_adjustment(0.75, CFG) == pytest.approx(0.1)  # (0.75 - 0.5) x 0.4
    assert feedback_adjustment(0.0, CFG) == pytest.approx(-0.3)  # max penalty
    assert feedback_adjustment(0.25, CFG) == pytest.approx(-0.15)  # (0.5 - 0.25) x 0.6
    assert feedback_aware_adjustment(0.71, CFG) == 0.2
    assert feedback_aware_adjustment(0.7, CFG) == 0.0
    assert feedback_aware_adjustment(0.29, CFG) == -0.3
    assert feedback_aware_adjustment(None, CFG) == 0.0


def test_relevance_sum_and_clamp() -> None:
    p = relevance(0.9, NOW - DAY, 0.8, None, NOW, CFG)
    assert p.clamped == pytest.approx(0.9 * 0.6 + 0.1 + 0.0 + 0.08)
    low = relevance(0.3, NOW - 100 * DAY, 0.0, 0.0, NOW, CFG)  # 0.18 - 0.3 < 0
    assert low.clamped == 0.0
    hot = WorldGraphConfig(semantic_weight=0.9)
    high = relevance(1.0, NOW - DAY, 1.0, 1.0, NOW, hot)  # 0.9 + 0.1 + 0.2 + 0.1 = 1.3
    assert high.clamped == 1.0
    aware = relevance(1.0, NOW - DAY, 1.0, 1.0, NOW, CFG, feedback_aware=True)
    assert aware.clamped == pytest.approx(1.0) and aware.final == pytest.approx(1.2)


def test_diversity_penalty_against_every_higher_ranked_copy() -> None:
    v = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    order, penalties = diversity_order([0.9, 0.89, 0.88, 0.80], v, CFG)
    # copies 2 and 3 are identical to 1 (sim 1.0): each higher copy costs (1.0 - 0.9) x 0.5 = 0.05
    assert penalties == pytest.approx([0.0, 0.05, 0.10, 0.0])
    assert order == [0, 1, 3, 2]  # 0.88 - 0.10 = 0.78 falls below the distinct 0.80


def test_diversity_threshold_is_strict() -> None:
    angle = math.acos(0.9)
    v = np.array([[1.0, 0.0], [math.cos(angle), math.sin(angle)]])
    _, penalties = diversity_order([0.9, 0.8], v, CFG)
    assert penalties[1] == pytest.approx(0.0, abs=1e-9)


class VectorEmbedder:
    """Hand-made vectors: a text gets the vector of the first key it contains."""

    name = "test-vectors"

    def __init__(self, vectors: dict[str, list[float]]) -> None:
        self.vectors = {k: np.asarray(v, dtype=np.float32) for k, v in vectors.items()}
        self.dimensions = len(next(iter(vectors.values())))

    def embed(self, texts: list[str]) -> np.ndarray:
        out = []
        for t in texts:
            key = next((k for k in self.vectors if k in t), None)
            if key is None:
                raise AssertionError(f"no test vector for {t!r}")
            out.append(self.vectors[key])
        return np.stack(out)


def unit(cos: float, axis: int = 1, dims: int = 4) -> list[float]:
    """A unit vector whose cosine with e0 is ``cos`` (the rest on ``axis``)."""
    v = [0.0] * dims
    v[0] = cos
    v[axis] = math.sqrt(max(0.0, 1 - cos * cos))
    return v


def _exp(key: str, days: float, conf: float, role: str = "Finance") -> dict[str, object]:
    return {"agent_id": "fin-1", "agent_role": role, "task_type": "reconcile", "task_description": key,
            "outcome": "success", "confidence_score": conf,
            "timestamp": (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()}


@pytest.fixture
def scored(tmp_path):  # type: ignore[no-untyped-def]
    emb = VectorEmbedder({
        "qqq": [1.0, 0.0, 0.0, 0.0],
        "alpha": unit(0.9, 1),
        "bravo": unit(0.8, 2),
        "charlie": unit(0.7, 3),
        "delta": unit(0.3, 1),
    })
    wm = WorldModel.open(tmp_path, embedder=emb, relevance_signal="vector")  # the original formula's exact numbers
    ids = wm.record_experiences("t1", [
        _exp("alpha", 1, 0.8),  # 0.54 + 0.1 + 0 + 0.08 = 0.72
        _exp("bravo", 10, 0.5),  # 0.48 + 0.05 + 0.2 (rated +1) + 0.05 = 0.78
        _exp("charlie", 40, 1.0),  # 0.42 + 0 - 0.3 (rated -1) + 0.1 = 0.22
        _exp("delta", 2, 0.0),  # 0.18 + 0.1 - 0.3 (rated -1) + 0 < 0 -> 0
    ])
    wm.submit_feedback("t1", ids[1], 1.0)
    wm.submit_feedback("t1", ids[2], -1.0)
    wm.submit_feedback("t1", ids[3], -1.0)
    yield wm, ids
    wm.close()


def test_recall_exact_scores_and_order(scored) -> None:  # type: ignore[no-untyped-def]
    wm, ids = scored
    res = wm.recall_experiences("t1", "Finance", "qqq", limit=5, options={"min_similarity": 0.0, "hybrid": False})
    got = [(r["episode_id"], r["relevance_score"]) for r in res]
    assert got == [(ids[1], pytest.approx(0.78, abs=STORED)), (ids[0], pytest.approx(0.72, abs=STORED)),
                   (ids[2], pytest.approx(0.22, abs=STORED)), (ids[3], 0.0)]
    by_id = {r["episode_id"]: r for r in res}
    assert by_id[ids[1]]["feedback_score"] == 1.0 and by_id[ids[1]]["feedback_count"] == 1
    assert by_id[ids[0]]["feedback_score"] is None and by_id[ids[0]]["feedback_count"] == 0
    assert by_id[ids[0]]["semantic_score"] == pytest.approx(0.9, abs=STORED)


def test_min_similarity_applies_to_semantic_score(scored) -> None:  # type: ignore[no-untyped-def]
    wm, ids = scored
    res = wm.recall_experiences("t1", "Finance", "qqq", options={"min_similarity": 0.75, "hybrid": False})
    assert [r["episode_id"] for r in res] == [ids[1], ids[0]]
    # the original default threshold, 0.6, keeps three
    assert len(wm.recall_experiences("t1", "Finance", "qqq", options={"hybrid": False})) == 3


def test_feedback_aware_recall(scored) -> None:  # type: ignore[no-untyped-def]
    wm, ids = scored
    res = wm.recall_experiences("t1", "Finance", "qqq",
                                options={"min_similarity": 0.0, "min_feedback_score": 0.7, "hybrid": False})
    # only the episode rated +1 (normalised 1.0) passes; it gets +0.2 on top of its clamped 0.78
    assert [(r["episode_id"], r["relevance_score"]) for r in res] == [(ids[1], pytest.approx(0.98, abs=STORED))]
    res = wm.recall_experiences("t1", "Finance", "qqq",
                                options={"min_similarity": 0.0, "min_feedback_score": 0.0, "hybrid": False})
    # unrated episodes are excluded once a feedback threshold is set; -1 rated ones get -0.3, which
    # ranks them (score_breakdown.final) but the score callers get is clamped to [0, 1]
    assert [r["episode_id"] for r in res] == [ids[1], ids[2], ids[3]]
    assert res[1]["score_breakdown"]["final"] == pytest.approx(0.22 - 0.3, abs=STORED)
    assert res[1]["relevance_score"] == 0.0


def test_five_near_copies_do_not_fill_the_top(tmp_path) -> None:  # type: ignore[no-untyped-def]
    vecs = {"qqq": [1.0, 0.0, 0.0, 0.0], "other": unit(0.75, 2)}
    for i in range(5):
        vecs[f"copy{i}"] = unit(0.85 - i * 0.0001, 1)  # copies: similarity ~1.0 to each other
    wm = WorldModel.open(tmp_path, embedder=VectorEmbedder(vecs), relevance_signal="vector")
    ids = wm.record_experiences("t1", [_exp(f"copy{i}", 1, 0.5) for i in range(5)] + [_exp("other", 1, 0.5)])
    res = wm.recall_experiences("t1", "Finance", "qqq", limit=5, options={"min_similarity": 0.0, "hybrid": False})
    wm.close()
    top = [r["episode_id"] for r in res]
    assert ids[5] in top  # the distinct experience beats the 4th and 5th copies
    penalties = sorted(r["score_breakdown"]["diversity_penalty"] for r in res)
    assert penalties[0] == 0.0 and penalties[-1] == pytest.approx(0.15, abs=1e-3)


def _formula(sem: float, ts: float, conf: float, avg: float | None, date: float, aware: bool) -> tuple[float, ...]:
    """Step 4 written out in plain Python floats, term by term (the reference for the arrays)."""
    days = (NOW - ts) / DAY
    rec = 0.1 if days < 7 else 0.05 if days < 30 else 0.0
    f = 0.5 if avg is None else avg
    fb = (f - 0.5) * (0.2 / 0.5) if f > 0.5 else -(0.5 - f) * (0.3 / 0.5) if f < 0.5 else 0.0
    clamped = min(1.0, max(0.0, sem * 0.6 + rec + fb + conf * 0.1 + date))
    boost = 0.0 if not aware or avg is None else 0.2 if avg > 0.7 else -0.3 if avg < 0.3 else 0.0
    return sem * 0.6, rec, fb, conf * 0.1, date, clamped, boost


def test_array_scores_are_the_formula_exactly() -> None:
    """Recall scores every candidate at once (relevances): each part is the same float the
    formula gives term by term in Python, feedback-aware boost included, and the scalar
    ``relevance`` agrees."""
    rng = np.random.default_rng(7)
    n = 300
    sem = rng.uniform(-0.2, 1.0, n)
    ts = NOW - rng.uniform(0, 60, n) * DAY
    ts[:3] = [NOW - 7 * DAY, NOW - 30 * DAY, NOW]  # the band edges
    conf = rng.uniform(0, 1, n)
    avg: list[float | None] = [None if x < 0.3 else min(float(x), 1.0) for x in rng.uniform(0, 1.3, n)]
    avg[3:6] = [0.5, 0.7, 0.3]  # the neutral point and the feedback-aware thresholds
    date = np.where(rng.uniform(0, 1, n) < 0.3, CFG.date_match_boost, 0.0)
    arr = np.array([np.nan if f is None else f for f in avg])
    for aware in (False, True):
        got = relevances(sem, ts, conf, arr, NOW, CFG, feedback_aware=aware, date=date)
        for k in range(n):
            want = _formula(float(sem[k]), float(ts[k]), float(conf[k]), avg[k], float(date[k]), aware)
            p = got.parts(k)
            assert (p.semantic, p.recency, p.feedback, p.confidence, p.date, p.clamped, p.feedback_aware) == want
            assert float(got.ranking[k]) == want[5] + want[6]
            assert relevance(float(sem[k]), float(ts[k]), float(conf[k]), avg[k], NOW, CFG, feedback_aware=aware,
                             date=float(date[k])) == p


def test_diversity_penalties_are_the_pass_down_the_ranking_exactly() -> None:
    """Many near-copies: each memory's penalty is the sum, in rank order, of (sim - 0.9) x 0.5
    over the memories ranked above it that it is more than 0.9 similar to (the pass written out)."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(4, 16))
    v = np.repeat(base, 10, axis=0) + rng.normal(scale=0.15, size=(40, 16))  # 4 clusters of 10 near-copies
    scores = [float(x) for x in rng.uniform(0, 1, 40)]
    scores[5] = scores[6]  # a tie keeps the input order
    order, penalties = diversity_order(scores, v, CFG)
    unit = v / np.linalg.norm(v, axis=1, keepdims=True)
    sims = unit @ unit.T
    ranked = sorted(range(40), key=lambda i: -scores[i])
    want = [0.0] * 40
    for pos, i in enumerate(ranked):
        for j in ranked[:pos]:
            if sims[i, j] > 0.9:
                want[i] += (float(sims[i, j]) - 0.9) * 0.5
    assert sum(p > 0 for p in want) > 10 and max(sum(sims[i] > 0.9) for i in range(40)) > 3
    assert penalties == want
    assert order == sorted(ranked, key=lambda i: -(scores[i] - want[i]))
