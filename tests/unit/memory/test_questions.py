"""The question and answer parts of the text relevance: a conversation turn that asks is lowered,
and the turn that answers it (the next turn of its session, by another speaker) takes a share of
its match. The numbers pinned, then what they change end to end."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.unit.memory.test_scoring import VectorEmbedder, unit
from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.recall.relevance import QUESTION_SHARE_CHARS, question_share, text_relevance

CFG = WorldGraphConfig(relevance_signal="hybrid", hybrid_text_weight=0.4, question_weight=0.2, answer_weight=0.4)


def test_question_share_is_the_share_of_the_text_that_asks() -> None:
    assert question_share("What are their names?") == 1.0
    assert question_share("We went camping.") == 0.0
    assert question_share("") == 0.0 and question_share("   ") == 0.0
    mixed = "Ah, they're adorable! What are their names?"
    assert question_share(mixed) == pytest.approx(len("What are their names?") / (len(mixed) - 1))  # the space
    assert question_share("Luna and Oliver! Do you have pets? We got a cat.") == pytest.approx(17 / 46)  # of 16 + 17 + 13
    assert question_share("\u4f60\u597d\u3002\u4f60\u53bb\u54ea\u91cc\u4e86\uff1f") == pytest.approx(6 / 9)  # full-width marks
    assert question_share("Really?! No way.") == 0.0  # "?!" ends on "!": an exclamation
    assert question_share("so... what now?") == pytest.approx(len("what now?") / len("so...what now?"))
    # a huge text is read from its start: a recall over 64 kB memories costs what one over turns does
    huge = "We went camping. " * 240 + "Where? " * 10_000  # the questions start past 4,080 characters
    assert len(huge) > 16 * QUESTION_SHARE_CHARS
    assert question_share(huge) < 0.01  # read whole, 94% of it asks


def test_question_and_answer_parts() -> None:
    cos = np.array([0.5, 0.2, 0.4])
    bm25 = np.array([8.0, 0.0, 4.0])
    asks = np.array([1.0, 0.0, 0.5])
    # candidate 0 asks (all of it); 1 is its answer; 2 asks half and has no answer among the candidates
    rel = text_relevance(cos, bm25, 8.0, None, CFG, asks=asks, answers=[(0, 1)])
    fused = np.array([0.6 * 0.5 + 0.4, 0.6 * 0.2, 0.6 * 0.4 + 0.2])
    assert rel.question == pytest.approx([-0.2, 0.0, -0.1])
    assert rel.answer == pytest.approx([0.0, 0.4 * 1.0 * fused[0], 0.0])
    assert rel.relevance == pytest.approx(fused + rel.question + rel.answer)
    # the question part is at most the relevance itself; the answer part keeps the total at most 1
    low = text_relevance(np.array([0.1]), np.zeros(1), 0.0, None, CFG, asks=np.array([1.0]))
    assert low.question == pytest.approx([-0.06]) and low.relevance == pytest.approx([0.0])
    high = text_relevance(np.array([1.0, 0.9]), np.array([1.0, 1.0]), 1.0, None, CFG, asks=np.array([1.0, 0.0]),
                          answers=[(0, 1)])
    assert high.relevance[1] == pytest.approx(1.0) and high.answer[1] == pytest.approx(1.0 - (0.54 + 0.4))
    # weights 0: the parts are 0 and the relevance is the fused one
    off = text_relevance(cos, bm25, 8.0, None, CFG.model_copy(update={"question_weight": 0.0, "answer_weight": 0.0}),
                         asks=asks, answers=[(0, 1)])
    assert off.relevance == pytest.approx(fused) and not off.question.any() and not off.answer.any()


VECS = {"qqq": [1.0, 0.0, 0.0, 0.0], "alpha": unit(0.8, 1), "bravo": unit(0.55, 2), "charlie": unit(0.5, 3)}


def _recall(tmp_path: Path, turns: list[dict[str, Any]], **config: Any) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Record ``turns`` as one session, recall "qqq"; the texts in rank order and their breakdowns."""
    wm = WorldModel.open(tmp_path / f"wm-{len(list(tmp_path.iterdir()))}", embedder=VectorEmbedder(VECS), **config)
    tenant = f"t-{uuid.uuid4().hex[:10]}"  # a shared Neo4j holds other tests' tenants
    try:
        wm.record_conversation(tenant, "s1", [{**t, "timestamp": f"2023-05-08T10:0{n}:00Z"}
                                              for n, t in enumerate(turns)])
        res = wm.recall_experiences(tenant, None, "qqq", limit=len(turns), options={"min_similarity": 0})
    finally:
        wm.close()
    return [r["task_description"] for r in res], {r["task_description"]: r["score_breakdown"] for r in res}


TURNS = [{"speaker": "Caroline", "text": "alpha: what are their names?"},  # asks, and reads like the query
         {"speaker": "Melanie", "text": "bravo, Luna and Oliver!"},  # answers it
         {"speaker": "Caroline", "text": "charlie is fine."}]


def test_an_answer_comes_above_the_question_it_answers(tmp_path: Path, store: dict[str, Any]) -> None:
    order, parts = _recall(tmp_path, TURNS, question_weight=0.0, answer_weight=0.0, **store)
    assert order[0] == TURNS[0]["text"]  # the question's cosine (0.8) leads
    order, parts = _recall(tmp_path, TURNS, **store)
    assert order[:2] == [TURNS[1]["text"], TURNS[0]["text"]]  # its answer first
    q, a, c = (parts[t["text"]] for t in TURNS)
    assert q["question_part"] == pytest.approx(-WorldGraphConfig().question_weight)  # all of it asks
    assert a["answer_part"] > 0 and a["question_part"] == 0.0
    assert c["answer_part"] == 0.0 and c["question_part"] == 0.0  # follows no question
    for b in (q, a):
        assert b["text_relevance"] == pytest.approx(b["vector_part"] + b["bm25_part"] + b["speaker_part"]
                                                    + b["question_part"] + b["answer_part"] + b["reply_part"]
                                                    + b["neighbor_part"] + b["sentence_part"], abs=1e-5)  # 6 places


def test_only_another_speakers_next_turn_is_an_answer(tmp_path: Path, store: dict[str, Any]) -> None:
    same = [TURNS[0], {"speaker": "Caroline", "text": "bravo, Luna and Oliver!"}, TURNS[2]]
    _, parts = _recall(tmp_path, same, **store)
    assert parts[same[1]["text"]]["answer_part"] == 0.0  # the asker going on is not an answer


def test_only_conversation_turns_ask(tmp_path: Path) -> None:
    # a task phrased as a question is the record of a run, not a turn that asks: no question part
    wm = WorldModel.open(tmp_path / "runs", embedder=VectorEmbedder(VECS))
    try:
        wm.record_experiences("t", [{"agent_id": "a", "task_type": "qa", "task_description": "alpha: how do I deploy?",
                                     "outcome": "success"}])
        (res,) = wm.recall_experiences("t", None, "qqq", limit=1, options={"min_similarity": 0})
    finally:
        wm.close()
    assert res["score_breakdown"]["question_part"] == 0.0


def test_the_vector_signal_has_no_question_part(tmp_path: Path) -> None:
    order, parts = _recall(tmp_path, TURNS, relevance_signal="vector")
    assert order[0] == TURNS[0]["text"] and all(p["question_part"] == 0.0 for p in parts.values())


def test_the_neighbour_lift_and_the_answer_share_one_read_of_the_session_order(tmp_path: Path) -> None:
    wm = WorldModel.open(tmp_path / "both", embedder=VectorEmbedder(VECS), neighbor_weight=0.1)
    calls: list[list[str]] = []
    read = wm.store.session_neighbors

    def counted(tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        calls.append(list(episode_ids))
        return read(tenant_id, episode_ids)

    try:
        wm.record_conversation("t", "s1", [{**t, "timestamp": f"2023-05-08T10:0{n}:00Z"} for n, t in enumerate(TURNS)])
        wm.store.session_neighbors = counted  # type: ignore[method-assign]
        res = wm.recall_experiences("t", None, "qqq", limit=3, options={"min_similarity": 0})
    finally:
        wm.close()
    assert len(calls) == 1 and len(calls[0]) == 3  # every candidate's, read once for both parts
    parts = {r["task_description"]: r["score_breakdown"] for r in res}
    assert parts[TURNS[1]["text"]]["answer_part"] > 0 and parts[TURNS[1]["text"]]["neighbor_part"] > 0
