"""relevance_score is in [0, 1] for every caller: the feedback-aware boost can lift the ranking
value over 1 (and near-duplicate penalties can push it under 0), so the reported score is that
value clamped, and the order stays the ranking value's (score_breakdown.final keeps it)."""

from __future__ import annotations

from pathlib import Path

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.recall.scoring import ScoreParts


def test_a_boosted_score_is_clamped_and_keeps_its_rank(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384)) as wm:
        base = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation", "outcome": "success",
                "confidence_score": 1.0}
        best, near = wm.record_experiences("acme", [
            {**base, "task_description": "Reconcile SKU-123 inventory discrepancy"},
            {**base, "task_description": "Reconcile SKU-123 inventory discrepancy in the warehouse count"}])
        for eid in (best, near):
            wm.submit_feedback("acme", eid, 1.0)
        results = wm.recall_experiences("acme", "Finance", "Reconcile SKU-123 inventory discrepancy", 5,
                                        {"min_similarity": 0, "min_feedback_score": 0.7})
    assert [r["episode_id"] for r in results] == [best, near]
    finals = [r["score_breakdown"]["final"] for r in results]
    assert finals[0] > 1.0 and finals[0] > finals[1]  # clamped 1.0 + the +0.2 feedback-aware boost
    assert results[0]["relevance_score"] == 1.0
    for r in results:
        assert 0.0 <= r["relevance_score"] <= 1.0
        assert r["relevance_score"] == round(min(1.0, max(0.0, r["score_breakdown"]["final"])), 6)
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True)


def test_a_penalised_score_is_not_negative() -> None:
    parts = ScoreParts(semantic=0.1, recency=0, feedback=0, confidence=0, clamped=0.1, feedback_aware=-0.3)
    assert parts.final < 0 and parts.score == 0.0
    assert ScoreParts(semantic=1, recency=0, feedback=0, confidence=0, clamped=0.5).score == 0.5
