"""Recall's filters whose values only the store holds (a session, the feedback floor and category):
resolved from the store at each recall and pushed into the index's search as the episodes that
pass, so the results are the best of those episodes (what an exact filtered search gives), not
the passing few of the overall top N; and a rating written by another process counts at the next
recall. On both in-process paths: a small table's copy and a big table's mirror."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.embeddings import HashingEmbedder

N = 240


def exp(text: str) -> dict[str, object]:
    return {"agent_id": "clerk", "task_type": "note", "task_description": text, "outcome": "success"}


def open_wm(data: Path, path: str) -> WorldModel:
    # a small candidate pool: without the filter pushed in, rated episodes outside the top 8 are missed
    config = WorldGraphConfig(candidate_pool=8, fulltext_pool=4, mirror_min_rows=1 if path == "mirror" else 0)
    wm = WorldModel.open(data, embedder=HashingEmbedder(64), config=config)
    if path == "mirror":
        wm.index._small.max_rows = 0  # never the small-table copy: the mirror's path
    return wm


def rate_elsewhere(data: Path, episode_id: str, score: float) -> None:
    """A rating written by another process on the same data folder."""
    code = textwrap.dedent(f"""
        from worldgraph import WorldModel
        from worldgraph.memory.embeddings import HashingEmbedder
        with WorldModel.open({str(data)!r}, embedder=HashingEmbedder(64)) as wm:
            wm.submit_feedback("t", {episode_id!r}, {score!r}, category="accuracy")
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def ids_of(results: list) -> set[str]:
    return {r["episode_id"] for r in results}


@pytest.mark.parametrize("path", ["small", "mirror"])
def test_feedback_filters_give_the_best_rated_episodes_and_see_other_processes_ratings(tmp_path: Path,
                                                                                        path: str) -> None:
    data = tmp_path / "data"
    with open_wm(data, path) as wm:
        ids = wm.record_experiences("t", [exp(f"quarterly invoice reconciliation batch {i}") for i in range(N)])
        # rated: three far down any ranking of the query, one rated low, one in another category
        good, low, other = [ids[7], ids[120], ids[231]], ids[60], ids[90]
        for eid in good:
            wm.submit_feedback("t", eid, 0.8, category="accuracy")
        wm.submit_feedback("t", low, -0.9, category="accuracy")
        wm.submit_feedback("t", other, 0.9, category="tone")
        query, opts = "quarterly invoice reconciliation", {"min_similarity": -1.0}
        assert len(wm.recall_experiences("t", None, query, limit=10, options=opts)) == 10
        if path == "mirror":
            assert wm.index.mirror_stats("t") is not None  # searched through the mirror
        else:
            assert wm.index.in_process("t")
        floor = {**opts, "min_feedback_score": 0.6}
        assert ids_of(wm.recall_experiences("t", None, query, limit=10, options=floor)) == {*good, other}
        in_category = {**opts, "feedback_category": "accuracy"}
        assert ids_of(wm.recall_experiences("t", None, query, limit=10, options=in_category)) == {*good, low}
        both = {**floor, "feedback_category": "accuracy"}
        assert ids_of(wm.recall_experiences("t", None, query, limit=10, options=both)) == set(good)
        # another process rates one more episode, and lifts the low one: the next recall sees both
        rate_elsewhere(data, ids[199], 1.0)
        rate_elsewhere(data, low, 1.0)
        rate_elsewhere(data, low, 1.0)  # mean (-0.9 + 2) / 3 ~ 0.37 -> normalised 0.68
        assert ids_of(wm.recall_experiences("t", None, query, limit=10, options=both)) == {*good, ids[199], low}
        # the filter and the index agree with an exact search of the rated episodes
        q = wm.embedder.embed([query])[0]
        hits = wm.index.vector_search("t", q, k=2, where={"episode_ids": [*good, ids[199]]}, columns=["episode_id"])
        assert len(hits) == 2 and ids_of(hits) <= {*good, ids[199]}
        # nothing rated that high: nothing recalled (not the unfiltered top N)
        assert wm.recall_experiences("t", None, query, limit=10, options={**opts, "min_feedback_score": 0.99,
                                                                          "feedback_category": "tone"}) == []


@pytest.mark.parametrize("path", ["small", "mirror"])
def test_a_session_filter_gives_that_sessions_episodes(tmp_path: Path, path: str) -> None:
    data = tmp_path / "data"
    with open_wm(data, path) as wm:
        wm.record_experiences("t", [exp(f"quarterly invoice reconciliation batch {i}") for i in range(N)])
        turns = [{"speaker": "ann", "text": f"the invoice reconciliation of week {w}"} for w in range(3)]
        mine = wm.record_conversation("t", "chat-1", turns)
        wm.record_conversation("t", "chat-2", [{"speaker": "bob", "text": "the invoice reconciliation again"}])
        opts = {"min_similarity": -1.0, "session_id": "chat-1"}
        got = wm.recall_experiences("t", None, "quarterly invoice reconciliation", limit=10, options=opts)
        assert ids_of(got) == set(mine)
        assert all(r["session_id"] == "chat-1" for r in got)
        assert wm.recall_experiences("t", None, "invoice", limit=10,
                                     options={"min_similarity": -1.0, "session_id": "no-such-chat"}) == []
