"""What links memories in recall: the candidates searched without the names a query gives, the
reply part (a turn's match confirmed by the turn that replies to it) and the optional sentence
stage. The numbers pinned, then what each changes end to end."""

from __future__ import annotations

import math
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.recall.relevance import reply_gains, text_relevance
from worldgraph.memory.recall.sentences import MAX_SENTENCES, SentenceCache, best_sentence_cosines, sentence_texts

DIMS = 6


def vec(*pairs: tuple[int, float]) -> np.ndarray:
    """A unit vector from (axis, weight) pairs."""
    v = np.zeros(DIMS, dtype=np.float32)
    for axis, weight in pairs:
        v[axis] = weight
    return v / np.linalg.norm(v)


class RuleEmbedder:
    """The vector of the first rule whose words all appear in the text; counts what it embeds."""

    name = "test-rules"
    dimensions = DIMS

    def __init__(self, rules: list[tuple[tuple[str, ...], np.ndarray]]) -> None:
        self.rules = rules
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.texts += texts
        out = []
        for t in texts:
            hit = next((v for words, v in self.rules if all(w in t for w in words)), None)
            if hit is None:
                raise AssertionError(f"no test vector for {t!r}")
            out.append(hit)
        return np.stack(out)


def _recall(tmp_path: Path, embedder: RuleEmbedder, turns: list[dict[str, str]], query: str,
            options: dict[str, Any] | None = None, limit: int | None = None,
            **config: Any) -> tuple[list[str], dict[str, dict[str, float]]]:
    """Record ``turns`` as one session, recall ``query`` (by default with no cosine floor): the texts
    in rank order and their breakdowns."""
    wm = WorldModel.open(tmp_path / f"wm-{len(list(tmp_path.iterdir()))}", embedder=embedder, **config)
    tenant = f"t-{uuid.uuid4().hex[:10]}"  # a shared Neo4j holds other tests' tenants
    try:
        wm.record_conversation(tenant, "s1", [{**t, "timestamp": f"2023-05-08T10:0{n}:00Z"}
                                              for n, t in enumerate(turns)])
        res = wm.recall_experiences(tenant, None, query, limit=limit or len(turns),
                                    options={"min_similarity": 0} if options is None else options)
    finally:
        wm.close()
    return [r["task_description"] for r in res], {r["task_description"]: r["score_breakdown"] for r in res}


# -- the reply part ------------------------------------------------------------------------------


def test_reply_gains() -> None:
    q = vec((0, 1.0))
    said = vec((0, 0.3), (1, math.sqrt(1 - 0.09)))  # cosine 0.3 with the query
    reply = vec((0, 0.9), (2, math.sqrt(1 - 0.81)))  # cosine 0.9
    off = vec((3, 1.0))  # cosine 0
    vectors = np.stack([said, reply, off])
    gains = reply_gains(vectors, q, [1, 2, None], 0.3)
    mixed = said + 0.3 * reply
    assert gains[0] == pytest.approx(float(mixed @ q / np.linalg.norm(mixed)) - 0.3)  # 0.509 - 0.3
    assert gains[1] == 0.0  # a reply that matches worse takes nothing away
    assert gains[2] == 0.0  # no reply
    assert not reply_gains(vectors, q, [None, None, None], 0.3).any()
    # scaled vectors give the same gains (each is scaled to length 1 first)
    assert reply_gains(vectors * np.array([[2.0], [5.0], [1.0]]), 3 * q, [1, 2, None], 0.3) == pytest.approx(gains)


def test_reply_part_in_the_text_relevance() -> None:
    cfg = WorldGraphConfig(relevance_signal="hybrid", hybrid_text_weight=0.4)
    cos, bm25 = np.array([0.3, 0.9]), np.zeros(2)
    rel = text_relevance(cos, bm25, 0.0, None, cfg, replies=np.array([0.2, 0.0]))
    assert rel.reply == pytest.approx([0.6 * 0.2, 0.0])  # the vector part's own weight
    assert rel.relevance == pytest.approx(0.6 * cos + rel.reply)
    full = text_relevance(np.array([0.95]), np.array([1.0]), 1.0, None, cfg, replies=np.array([0.5]))
    assert full.relevance[0] == pytest.approx(1.0) and full.reply[0] == pytest.approx(1.0 - (0.57 + 0.4))


REPLY_RULES = [(("alpha",), vec((0, 0.3), (1, math.sqrt(1 - 0.09)))),
               (("bravo",), vec((0, 0.9), (2, math.sqrt(1 - 0.81)))),
               (("charlie",), vec((0, 0.45), (3, math.sqrt(1 - 0.45 ** 2)))),
               (("qqq",), vec((0, 1.0)))]
REPLY_TURNS = [{"speaker": "Nate", "text": "alpha, last week."},  # says little in the query's words
               {"speaker": "Joanna", "text": "bravo!"},  # the reply that does
               {"speaker": "Nate", "text": "charlie."}]  # matches better than alpha alone, has no reply


def test_a_reply_confirms_what_a_turn_was_about(tmp_path: Path, store: dict[str, Any]) -> None:
    order, parts = _recall(tmp_path, RuleEmbedder(REPLY_RULES), REPLY_TURNS, "qqq", reply_context=0.0, **store)
    assert order == ["bravo!", "charlie.", "alpha, last week."]
    assert all(p["reply_part"] == 0.0 for p in parts.values())
    order, parts = _recall(tmp_path, RuleEmbedder(REPLY_RULES), REPLY_TURNS, "qqq", **store)
    assert order == ["bravo!", "alpha, last week.", "charlie."]
    assert parts["alpha, last week."]["reply_part"] > 0
    assert parts["bravo!"]["reply_part"] == 0.0 and parts["charlie."]["reply_part"] == 0.0
    for b in parts.values():
        assert b["text_relevance"] == pytest.approx(b["vector_part"] + b["bm25_part"] + b["speaker_part"]
                                                    + b["question_part"] + b["answer_part"] + b["reply_part"]
                                                    + b["neighbor_part"] + b["sentence_part"])


# -- the candidates searched without the names ---------------------------------------------------

# The whole query's vector is axis 0, its vector without "Melanie" is axis 1: Melanie's turns that
# share the name's direction lead the first search, the one that says what is asked leads the second.
NAME_RULES = [(("Melanie: same",), vec((0, 0.9), (4, math.sqrt(1 - 0.81)))),
              (("Melanie: also",), vec((0, 0.85), (4, math.sqrt(1 - 0.85 ** 2)))),
              (("Melanie: we went",), vec((0, 0.5), (1, 0.8), (4, math.sqrt(1 - 0.89)))),
              (("Caroline:",), vec((0, 0.95), (5, math.sqrt(1 - 0.95 ** 2)))),  # names her: among the first
              (("Melanie",), vec((0, 1.0))),  # the query
              (("kids",), vec((1, 1.0)))]  # the query without the name
NAME_TURNS = [{"speaker": "Melanie", "text": "same here"},
              {"speaker": "Caroline", "text": "nice"},
              {"speaker": "Melanie", "text": "also true"},
              {"speaker": "Caroline", "text": "cool"},
              {"speaker": "Melanie", "text": "we went camping at the lake with the whole family last summer"}]
NAME_QUERY = "What do Melanie's kids like"


def test_the_candidates_are_also_searched_without_the_names(tmp_path: Path, store: dict[str, Any]) -> None:
    target = NAME_TURNS[-1]["text"]
    # no min_similarity from the caller: the speaker floor (speaker_min_similarity) applies
    small = {"candidate_pool": 2, "fulltext_pool": 1, "options": {}, **store}
    # (a limit of 2: the index is asked for at least as many candidates as results)
    order, _ = _recall(tmp_path, RuleEmbedder(NAME_RULES), NAME_TURNS, NAME_QUERY, speaker_free_candidates=False,
                       limit=2, **small)
    assert target not in order  # outside the whole query's top 2 and not the best full-text hit
    order, parts = _recall(tmp_path, RuleEmbedder(NAME_RULES), NAME_TURNS, NAME_QUERY, **small)
    assert target in order  # the speaker-free search found it
    # its cosine without the name (the index stores vectors as float16: within ~1e-4)
    assert parts[target]["vector_cosine"] == pytest.approx(0.8, abs=1e-3)
    assert parts[target]["speaker_part"] > 0
    # without the speaker match there is no speaker-free search either
    order, _ = _recall(tmp_path, RuleEmbedder(NAME_RULES), NAME_TURNS, NAME_QUERY, speaker_match_weight=0.0,
                       limit=2, **small)
    assert target not in order


# -- the optional sentence stage -----------------------------------------------------------------


def test_sentence_texts() -> None:
    text = "That tart looks yummy! Lately I've been doing great. I won a big video game tournament last week!"
    assert sentence_texts("Nate", text) == ["Nate: That tart looks yummy!", "Nate: Lately I've been doing great.",
                                            "Nate: I won a big video game tournament last week!"]
    assert sentence_texts("Nate", "Wow! Thanks, Jo! I won a big tournament.") == []  # one sentence of 3 words or more
    assert sentence_texts("Nate", "I won a tournament.\nIt was in Berlin last week") == [
        "Nate: I won a tournament.", "Nate: It was in Berlin last week"]  # lines end sentences too
    many = " ".join(f"Sentence number {n} is here." for n in range(50))
    assert len(sentence_texts("", many)) == MAX_SENTENCES and sentence_texts("", many)[0] == "Sentence number 0 is here."
    assert sentence_texts("Nate", "") == [] and sentence_texts("Nate", "x" * 100_000) == []


def test_the_sentence_cache_embeds_each_text_once_per_tenant() -> None:
    emb = RuleEmbedder([(("a",), vec((0, 1.0))), (("b",), vec((1, 1.0))), (("c",), vec((2, 1.0)))])
    cache = SentenceCache(max_items=2)
    q = vec((0, 1.0))
    assert best_sentence_cosines(emb, "t1", q, [["a", "b"], [], ["b"]], cache) == [pytest.approx(1.0), None,
                                                                                  pytest.approx(0.0)]
    assert emb.texts == ["a", "b"] and cache.embedded == 2  # "b" twice in one call: embedded once
    best_sentence_cosines(emb, "t1", q, [["a", "b"]], cache)
    assert emb.texts == ["a", "b"]  # both cached
    best_sentence_cosines(emb, "t2", q, [["a"]], cache)
    assert emb.texts == ["a", "b", "a"]  # another tenant's recall embeds its own
    best_sentence_cosines(emb, "t1", q, [["a"]], cache)
    assert emb.texts == ["a", "b", "a", "a"]  # at most 2 kept: t1's "a" was the least recently used
    assert best_sentence_cosines(emb, "t1", q, [[], []], cache) == [None, None]


SENTENCE_RULES = [(("tart", "tournament"), vec((0, 0.45), (2, 0.7), (3, 0.55))),  # the whole turn: its mean
                  (("tournament",), vec((0, 0.9), (1, math.sqrt(1 - 0.81)))),
                  (("tart",), vec((2, 1.0))),
                  (("doing",), vec((3, 1.0))),
                  (("Jo: I love",), vec((0, 0.5), (4, math.sqrt(0.75)))),
                  (("qqq",), vec((0, 1.0)))]
SENTENCE_TURNS = [{"speaker": "Nate", "text": "That tart looks yummy. Lately I've been doing great. "
                                             "I won a big tournament last week!"},
                  {"speaker": "Jo", "text": "I love baking pies."}]


def test_a_turn_whose_sentence_matches_gains_with_the_sentence_stage(tmp_path: Path, store: dict[str, Any]) -> None:
    whole, jo = SENTENCE_TURNS[0]["text"], SENTENCE_TURNS[1]["text"]
    emb = RuleEmbedder(SENTENCE_RULES)
    order, parts = _recall(tmp_path, emb, SENTENCE_TURNS, "qqq", reply_context=0.0, **store)
    assert order == [jo, whole] and parts[whole]["sentence_part"] == 0.0
    assert not any(t.startswith("Nate: I won") for t in emb.texts)  # off by default: no sentence is embedded
    emb = RuleEmbedder(SENTENCE_RULES)
    order, parts = _recall(tmp_path, emb, SENTENCE_TURNS, "qqq", reply_context=0.0, sentence_head=5, **store)
    assert order == [whole, jo]
    whole_cosine = float(SENTENCE_RULES[0][1][0])  # the whole turn's
    assert parts[whole]["sentence_part"] == pytest.approx(0.2 * (0.9 - whole_cosine), abs=1e-3)  # float16 vectors
    assert parts[jo]["sentence_part"] == 0.0  # one sentence: its vector already is the sentence's
    assert "Nate: I won a big tournament last week!" in emb.texts


def test_the_session_order_is_read_once_and_only_for_turns(tmp_path: Path) -> None:
    """One store read of the session order per recall, for the candidates that are conversation
    turns; a recall over agent runs alone reads none."""
    wm = WorldModel.open(tmp_path, embedder=RuleEmbedder(REPLY_RULES + [(("run",), vec((0, 0.7), (4, 0.71)))]))
    calls: list[list[str]] = []
    read = wm.store.session_neighbors

    def counted(tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        calls.append(list(episode_ids))
        return read(tenant_id, episode_ids)

    run = {"agent_id": "a", "agent_role": "r", "task_type": "reconcile", "outcome": "success"}
    try:
        wm.record_experiences("runs", [{**run, "task_description": f"run {n}"} for n in range(3)])
        wm.record_experiences("mixed", [{**run, "task_description": "run 0"}])
        wm.record_conversation("mixed", "s1", [{**t, "timestamp": f"2023-05-08T10:0{n}:00Z"}
                                               for n, t in enumerate(REPLY_TURNS)])
        wm.store.session_neighbors = counted  # type: ignore[method-assign]
        assert len(wm.recall_experiences("runs", None, "qqq", limit=3, options={"min_similarity": 0})) == 3
        assert calls == []
        res = wm.recall_experiences("mixed", None, "qqq", limit=4, options={"min_similarity": 0})
    finally:
        wm.close()
    assert len(res) == 4 and len(calls) == 1 and len(calls[0]) == 3  # the three turns, not the run


def test_the_speaker_free_search_stays_in_the_tenant(tmp_path: Path, store: dict[str, Any]) -> None:
    """Another tenant's memory that the speaker-free query would find first is never a candidate."""
    target = NAME_TURNS[-1]["text"]
    wm = WorldModel.open(tmp_path / "wm", embedder=RuleEmbedder(NAME_RULES), candidate_pool=2, fulltext_pool=1,
                         **store)
    mine, theirs = (f"t-{uuid.uuid4().hex[:10]}" for _ in range(2))
    try:
        wm.record_conversation(mine, "s1", [{**t, "timestamp": f"2023-05-08T10:0{n}:00Z"}
                                            for n, t in enumerate(NAME_TURNS[:-1])])
        wm.record_conversation(theirs, "s1", [{**t, "timestamp": f"2023-05-08T10:0{n}:00Z"}
                                              for n, t in enumerate(NAME_TURNS)])
        assert target in [r["task_description"] for r in wm.recall_experiences(theirs, None, NAME_QUERY, limit=5)]
        res = wm.recall_experiences(mine, None, NAME_QUERY, limit=5)
    finally:
        wm.close()
    assert res and target not in [r["task_description"] for r in res]
