"""The text relevance (relevance_signal): the fused numbers pinned, and what they change end to end."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.unit.memory.test_scoring import VectorEmbedder, unit
from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.recall.relevance import in_window, named_speakers, text_relevance, without_speakers

COS = np.array([0.5, 0.2, -0.1])
BM25 = np.array([4.0, 0.0, 2.0])


def test_vector_signal_is_the_cosine() -> None:
    rel = text_relevance(COS, BM25, 8.0, None, WorldGraphConfig(relevance_signal="vector"))
    assert rel.relevance.tolist() == COS.tolist()
    assert rel.bm25.tolist() == [0.0, 0.0, 0.0] and rel.neighbor.tolist() == [0.0, 0.0, 0.0]


def test_hybrid_fuses_cosine_and_bm25_in_0_1() -> None:
    cfg = WorldGraphConfig(relevance_signal="hybrid", hybrid_text_weight=0.4, neighbor_weight=0.0)
    rel = text_relevance(COS, BM25, 8.0, None, cfg)  # the best hit (8.0) is no longer a candidate
    assert rel.vector == pytest.approx([0.3, 0.12, 0.0])  # 0.6 x cosine, floored at 0
    assert rel.bm25 == pytest.approx([0.2, 0.0, 0.1])  # 0.4 x bm25 / 8
    assert rel.relevance == pytest.approx([0.5, 0.12, 0.1])
    top = text_relevance(np.array([1.0]), np.array([3.0]), 3.0, None, cfg)
    assert top.relevance == pytest.approx([1.0])  # a perfect match on both is 1
    none = text_relevance(COS, np.zeros(3), 0.0, None, cfg)  # no word matched anything
    assert none.bm25.tolist() == [0.0, 0.0, 0.0] and none.relevance == pytest.approx([0.3, 0.12, 0.0])


def test_neighbour_lift() -> None:
    cfg = WorldGraphConfig(relevance_signal="hybrid", hybrid_text_weight=0.4, neighbor_weight=0.2)
    rel = text_relevance(COS, BM25, 8.0, [(None, 1), (0, 2), (1, None)], cfg)
    assert rel.neighbor == pytest.approx([0.2 * 0.12, 0.2 * 0.5, 0.2 * 0.12])
    assert rel.relevance == pytest.approx([0.5 + 0.024, 0.12 + 0.1, 0.1 + 0.024])
    capped = text_relevance(np.array([1.0, 1.0]), np.array([1.0, 1.0]), 1.0, [(None, 1), (0, None)], cfg)
    assert capped.relevance.tolist() == [1.0, 1.0]


def test_in_window_bounds_are_inclusive_and_open_ended() -> None:
    ts = np.array([10.0, 20.0, 30.0])
    assert in_window(ts, 20.0, 30.0).tolist() == [False, True, True]
    assert in_window(ts, None, 10.0).tolist() == [True, False, False]
    assert in_window(ts, 25.0, None).tolist() == [False, False, True]


def _exp(key: str, days: float = 400.0) -> dict[str, object]:
    return {"agent_id": "a", "task_type": "note", "task_description": key, "outcome": "success",
            "confidence_score": 0.5, "timestamp": (datetime.now(timezone.utc) - timedelta(days=days)).isoformat()}


def test_word_evidence_reorders_recall(tmp_path: Path) -> None:
    vecs = {"qqq": [1.0, 0.0, 0.0, 0.0], "alpha": unit(0.9, 1), "bravo": unit(0.7, 2), "charlie": unit(0.2, 3)}
    emb = VectorEmbedder(vecs)
    ids = {}
    for signal in ("vector", "hybrid"):
        wm = WorldModel.open(tmp_path / signal, embedder=emb, relevance_signal=signal)
        got = wm.record_experiences("t", [_exp("alpha"), _exp("bravo zulu"), _exp("charlie")])
        ids[signal] = dict(zip(("alpha", "bravo", "charlie"), got))
        res = wm.recall_experiences("t", None, "qqq zulu", limit=3)
        vector_only = wm.recall_experiences("t", None, "qqq zulu", limit=3, options={"hybrid": False})
        wm.close()
        # without a full-text search there is no word evidence to fuse: the relevance is the cosine
        # (the index's float16 vectors: within ~1e-4)
        assert [r["score_breakdown"]["text_relevance"] for r in vector_only][:2] == pytest.approx([0.9, 0.7], abs=1e-3)
        order = [r["episode_id"] for r in res]
        by = {r["episode_id"]: r for r in res}
        # (cosines from the index's float16 vectors are within ~1e-4: checked to 1e-3)
        if signal == "vector":
            # the original formula: cosine only, default floor 0.6 (charlie's 0.2 is dropped)
            assert order == [ids[signal]["alpha"], ids[signal]["bravo"]]
            assert by[order[0]]["relevance_score"] == pytest.approx(0.9 * 0.6 + 0.5 * 0.1, abs=1e-3)
        else:
            # hybrid: bravo is the only memory with the query's word; default floor 0.3 on the cosine
            b, a = by[ids[signal]["bravo"]], by[ids[signal]["alpha"]]
            assert order == [ids[signal]["bravo"], ids[signal]["alpha"]]
            assert b["semantic_score"] == pytest.approx(0.7, abs=1e-3)  # semantic_score stays the cosine
            parts = b["score_breakdown"]
            # 0.75 x cosine + 0.25 x BM25 / best (hybrid_text_weight 0.25)
            assert parts["bm25_part"] == pytest.approx(0.25) and parts["vector_part"] == pytest.approx(0.525, abs=1e-3)
            assert parts["text_relevance"] == pytest.approx(0.775, abs=1e-3)
            assert b["relevance_score"] == pytest.approx(0.775 * 0.6 + 0.05, abs=1e-3)
            assert a["score_breakdown"]["bm25_part"] == 0.0
            assert a["score_breakdown"]["text_relevance"] == pytest.approx(0.675, abs=1e-3)


def test_speaker_match_lifts_the_named_persons_memories() -> None:
    cfg = WorldGraphConfig(relevance_signal="hybrid", hybrid_text_weight=0.4, speaker_match_weight=0.15)
    named = np.array([False, True, False])
    rel = text_relevance(COS, BM25, 8.0, None, cfg, named=named)
    assert rel.speaker == pytest.approx([0.0, 0.15, 0.0])
    assert rel.relevance == pytest.approx([0.5, 0.27, 0.1])  # 0.12 + 0.15 for the named speaker's memory
    # naming every speaker (or none) tells no memory apart: no change
    for same in (np.ones(3, dtype=bool), np.zeros(3, dtype=bool)):
        assert text_relevance(COS, BM25, 8.0, None, cfg, named=same).relevance == pytest.approx([0.5, 0.12, 0.1])
    # capped so the parts still add up to the relevance, at most 1
    top = text_relevance(np.array([1.0, 0.0]), np.array([3.0, 0.0]), 3.0, None, cfg, named=np.array([True, False]))
    assert top.speaker == pytest.approx([0.0, 0.0]) and top.relevance == pytest.approx([1.0, 0.0])
    off = text_relevance(COS, BM25, 8.0, None, WorldGraphConfig(speaker_match_weight=0.0), named=named)
    assert off.speaker.tolist() == [0.0, 0.0, 0.0]


def test_named_speakers() -> None:
    speakers = ["Melanie", "Caroline Smith", "agent 7", "a", "Bob"]
    assert named_speakers("What do Melanie's kids like?", speakers) == {"Melanie"}
    assert named_speakers("what did caroline paint", speakers) == {"Caroline Smith"}  # the first word, any case
    assert named_speakers("what did agent 7 decide", speakers) == {"agent 7"}  # the whole id as words
    assert named_speakers("what is a good plan", speakers) == set()  # a one-letter first word never alone
    assert named_speakers("what did bobby say", speakers) == set()  # whole words only
    assert named_speakers("Bob and Melanie", speakers) == {"Bob", "Melanie"}


def test_a_question_about_a_person_ranks_their_memories_first(tmp_path: Path) -> None:
    # Caroline's turn is closer to the query in meaning (0.7 against 0.5) and both match one query
    # word ("kids" / the speaker's name); the query is about Melanie. Two sessions, so neither
    # turn carries the other as context.
    vecs = {"qqq": [1.0, 0.0, 0.0, 0.0], "alpha": unit(0.7, 1), "bravo": unit(0.5, 2)}
    order = {}
    for weight in (0.0, 0.15):
        wm = WorldModel.open(tmp_path / str(weight), embedder=VectorEmbedder(vecs), speaker_match_weight=weight)
        ids = [wm.record_conversation("t", "s1", [{"speaker": "Caroline", "text": "alpha kids",
                                                   "timestamp": "2023-05-08T10:00:00Z"}])[0],
               wm.record_conversation("t", "s2", [{"speaker": "Melanie", "text": "bravo",
                                                   "timestamp": "2023-05-09T10:00:00Z"}])[0]]
        res = wm.recall_experiences("t", None, "qqq what do Melanie's kids like", limit=2)
        wm.close()
        # which turn comes first: 0 = Caroline's, 1 = Melanie's
        order[weight] = [ids.index(r["episode_id"]) for r in res]
        by = {r["episode_id"]: r["score_breakdown"] for r in res}
        assert by[ids[1]]["speaker_part"] == pytest.approx(weight) and by[ids[0]]["speaker_part"] == 0.0
        b = by[ids[1]]
        assert b["text_relevance"] == pytest.approx(b["vector_part"] + b["bm25_part"] + b["speaker_part"], abs=1e-5)
    assert order[0.0] == [0, 1]  # on words and meaning alone Caroline's turn ranks first
    assert order[0.15] == [1, 0]  # the question is about Melanie: her turn first


def test_without_speakers() -> None:
    assert without_speakers("What do Melanie's kids like?", {"Melanie"}) == "What do kids like?"
    assert without_speakers("what did caroline  and MELANIE\u2019s kids paint", {"Caroline Smith", "Melanie"}) == \
        "what did and kids paint"  # any case, curly possessive, every word of a named id
    assert without_speakers("Did Melanie see Melanies' show?", {"Melanie"}) == "Did see Melanies' show?"  # whole words
    assert without_speakers("what did agent 7 decide", {"agent 7"}) == "what did 7 decide"  # one-letter words stay
    assert without_speakers("Melanie?", {"Melanie"}) == "?"  # nothing but the name: the caller keeps the query
    assert without_speakers("what  did Bob say", set()) == "what did Bob say"


class CountingEmbedder(VectorEmbedder):
    def __init__(self, vectors: dict[str, list[float]]) -> None:
        super().__init__(vectors)
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super().embed(texts)


def test_the_vector_part_ranks_a_named_persons_memories_by_what_they_say(tmp_path: Path) -> None:
    # The whole query ("... Melanie paint") is closest to alpha (0.8; what the name brings), the
    # query without the name ("... paint") to bravo (0.87), alpha not at all. Both are Melanie's,
    # Caroline's charlie keeps the speaker match telling memories apart.
    vecs = {"Melanie paint": [1.0, 0.0, 0.0, 0.0], "paint": [0.0, 0.0, 1.0, 0.0], "alpha": unit(0.8, 1),
            "bravo": unit(0.5, 2), "charlie": unit(0.6, 3), "nobody": [1.0, 0.0, 0.0, 0.0]}
    order = {}
    for on in (False, True):
        emb = CountingEmbedder(vecs)
        wm = WorldModel.open(tmp_path / str(on), embedder=emb, speaker_free_vector=on)
        ids = [wm.record_conversation("t", f"s{n}", [{"speaker": who, "text": text,
                                                     "timestamp": f"2023-05-0{n + 1}T10:00:00Z"}])[0]
               for n, (who, text) in enumerate([("Melanie", "alpha"), ("Melanie", "bravo"), ("Caroline", "charlie")])]
        emb.texts.clear()
        res = wm.recall_experiences("t", None, "what did Melanie paint", limit=3)
        asked = list(emb.texts)
        emb.texts.clear()
        wm.recall_experiences("t", None, "what did nobody paint", limit=3)  # names no speaker
        assert emb.texts == ["what did nobody paint"]  # one embedding, as before
        wm.close()
        order[on] = [ids.index(r["episode_id"]) for r in res]
        by = {ids.index(r["episode_id"]): r for r in res}
        assert by[1]["semantic_score"] == pytest.approx(0.5, abs=1e-3)  # the whole query's cosine (float16 vectors)
        b = by[1]["score_breakdown"]
        assert b["vector_part"] == pytest.approx((1 - WorldGraphConfig().hybrid_text_weight) * b["vector_cosine"], abs=1e-5)
        if on:
            assert sorted(asked) == ["what did Melanie paint", "what did paint"]  # the two run side by side
            assert b["vector_cosine"] == pytest.approx(0.866, abs=1e-3)
            assert by[0]["score_breakdown"]["vector_cosine"] == pytest.approx(0.0, abs=1e-6)
        else:
            assert asked == ["what did Melanie paint"] and b["vector_cosine"] == pytest.approx(0.5, abs=1e-3)
    assert order[False][0] == 0  # the name's pull: alpha first
    assert order[True][0] == 1  # what Melanie said about painting: bravo first


def test_the_floor_is_lower_while_the_query_names_a_speaker(tmp_path: Path) -> None:
    # alpha (Melanie's) is 0.25 from every query vector: under the hybrid floor 0.3, over the
    # speaker floor 0.2. It is returned only for a query that names some speakers and not others,
    # and only while neither the caller's min_similarity nor speaker_min_similarity None says otherwise.
    e0 = [1.0, 0.0, 0.0, 0.0]
    vecs = {"Melanie and Caroline paint": e0, "Melanie paint": e0, "nobody paint": e0, "paint": e0,
            "alpha": unit(0.25, 1), "bravo": unit(0.5, 2), "charlie": unit(0.6, 3)}

    def recalled(query: str, options: dict[str, object] | None = None, **config: object) -> dict[str, float]:
        wm = WorldModel.open(tmp_path / uuid.uuid4().hex, embedder=VectorEmbedder(vecs), **config)
        try:
            for n, (who, text) in enumerate([("Melanie", "alpha"), ("Melanie", "bravo"), ("Caroline", "charlie")]):
                wm.record_conversation("t", f"s{n}", [{"speaker": who, "text": text,
                                                      "timestamp": f"2023-05-0{n + 1}T10:00:00Z"}])
            res = wm.recall_experiences("t", None, query, limit=3, options=options)
        finally:
            wm.close()
        return {r["task_description"]: r["semantic_score"] for r in res}

    assert WorldGraphConfig().speaker_min_similarity == 0.2
    named = recalled("what did Melanie paint")
    assert set(named) == {"alpha", "bravo", "charlie"} and named["alpha"] == pytest.approx(0.25, abs=1e-3)
    assert set(recalled("what did nobody paint")) == {"bravo", "charlie"}  # names no speaker: the floor 0.3
    assert set(recalled("what did Melanie and Caroline paint")) == {"bravo", "charlie"}  # names every speaker
    assert set(recalled("what did Melanie paint", speaker_min_similarity=None)) == {"bravo", "charlie"}
    assert set(recalled("what did Melanie paint", {"min_similarity": 0.3})) == {"bravo", "charlie"}  # the caller's
    assert set(recalled("what did Melanie paint", speaker_match_weight=0.0)) == {"bravo", "charlie"}  # no match
    # a floor someone set is kept as set: the operator's, stricter or looser
    assert set(recalled("what did Melanie paint", min_similarity_threshold=0.55)) == {"charlie"}
    assert set(recalled("what did Melanie paint", min_similarity_threshold=0.1)) == {"alpha", "bravo", "charlie"}
    assert set(recalled("what did nobody paint", min_similarity_threshold=0.1)) == {"alpha", "bravo", "charlie"}
    # the vector signal's floor (0.6, no speaker match) is not touched
    assert set(recalled("what did Melanie paint", relevance_signal="vector")) == {"charlie"}
