"""The candidate pool: recall scores the top ``candidate_pool`` memories by vector similarity (100
by default, bench/README.md "Room in the latency budget"), or as many as the results asked for
(a framework's deep page)."""

from __future__ import annotations

from pathlib import Path

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig


def test_recall_scores_the_top_candidate_pool_by_vector_similarity(tmp_path: Path) -> None:
    assert WorldGraphConfig().candidate_pool == 100
    wm = WorldModel.open(tmp_path, embedding_provider="hashing")
    try:
        wm.record_experiences("t", [{"agent_id": "a", "task_type": "note", "task_description": f"note {n} about the garden",
                                     "outcome": "success", "confidence_score": 0.5} for n in range(200)])
        options = {"hybrid": False, "min_similarity": -1.0}  # vector candidates only, no floor
        # the index is asked for candidate_pool candidates, or as many as the results asked for
        assert len(wm.recall_experiences("t", None, "the garden", limit=200, options=options)) == 200
        assert len(wm.recall_experiences("t", None, "the garden", limit=60, options=options)) == 60
        wm.config = wm.config.model_copy(update={"candidate_pool": 150})
        assert len(wm.recall_experiences("t", None, "the garden", limit=200, options=options)) == 200
    finally:
        wm.close()
