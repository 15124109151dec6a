"""The optional LLM step of recall (memory/recall/rewrite.py): sub-queries from an
OpenAI-compatible LLM (the local scripted server of tests/support/fake_openai.py, through the real
client), searched beside the query; off by default, and never a reason for a recall to fail."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.fake_openai import FakeOpenAI, Reply
from tests.unit.memory.test_scoring import VectorEmbedder, unit
from worldgraph import WorldModel
from worldgraph.memory.recall.rewrite import parse_subqueries

# The query ("qqq ...") is far from alpha (cosine 0.1: under the 0.3 floor, never a candidate on
# its own), close to bravo; the sub-query "zulu camping" points at alpha.
VECS = {"qqq": [1.0, 0.0, 0.0, 0.0], "zulu": unit(0.1, 1), "alpha": unit(0.1, 1), "bravo": unit(0.8, 2)}
QUERY = "qqq what did Melanie do with her family"


def _open(path: Path, n: int, timeout: float = 5.0) -> tuple[WorldModel, dict[str, str]]:
    wm = WorldModel.open(path, embedder=VectorEmbedder(VECS), recall_llm_subqueries=n,
                         recall_llm_timeout_seconds=timeout)
    ids = wm.record_experiences("t", [{"agent_id": "a", "task_type": "note", "task_description": text,
                                       "outcome": "success"} for text in ("alpha went camping", "bravo")])
    return wm, {ids[0]: "alpha", ids[1]: "bravo"}


def _ask(wm: WorldModel, names: dict[str, str]) -> list[str]:
    return [names[r["episode_id"]] for r in wm.recall_experiences("t", None, QUERY, limit=5)]


def test_parse_subqueries() -> None:
    assert parse_subqueries('{"queries": ["camping trip", "museum", 3, " "]}') == ["camping trip", "museum"]
    assert parse_subqueries('```json\n["a b", "c"]\n```') == ["a b", "c"]
    assert parse_subqueries("camping, museum") == [] and parse_subqueries('{"q": ["x"]}') == []
    assert parse_subqueries("") == [] and parse_subqueries('"just a string"') == []


def test_subqueries_find_the_memory_the_query_misses(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(json.dumps({"queries": ["zulu camping", QUERY, "zulu camping"]}))
    wm, names = _open(tmp_path / "on", 3)
    try:
        res = wm.recall_experiences("t", None, QUERY, limit=5)
    finally:
        wm.close()
    assert [names[r["episode_id"]] for r in res] == ["alpha", "bravo"]
    b = {names[r["episode_id"]]: r["score_breakdown"] for r in res}
    # cosines from the index's float16 vectors: within ~1e-4
    assert b["alpha"]["subquery_cosine"] == pytest.approx(1.0, abs=1e-3)
    assert b["alpha"]["vector_cosine"] == pytest.approx(1.0, abs=1e-3)
    assert res[0]["semantic_score"] == pytest.approx(0.1, abs=1e-3)  # semantic_score stays the query's own cosine
    assert b["bravo"]["vector_cosine"] == pytest.approx(0.8, abs=1e-3)  # its own cosine beats the sub-query's
    (req,) = fake_openai.chat_requests
    assert req["messages"][-1]["content"] == QUERY and "at most 3" in req["messages"][0]["content"]


def test_off_by_default_and_without_an_llm(tmp_path: Path, fake_openai: FakeOpenAI,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    wm, names = _open(tmp_path / "off", 0)
    try:
        assert _ask(wm, names) == ["bravo"]  # alpha is under the floor for the query alone
    finally:
        wm.close()
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY")
    wm, names = _open(tmp_path / "no-llm", 3)  # asked for, but no LLM configured
    try:
        assert _ask(wm, names) == ["bravo"]
    finally:
        wm.close()
    assert fake_openai.chat_requests == []


@pytest.mark.parametrize("reply", [Reply(status=500, message="boom"), "camping, museum", '{"queries": []}'],
                         ids=["error", "unreadable", "empty"])
def test_a_failing_llm_leaves_the_query_alone(tmp_path: Path, fake_openai: FakeOpenAI, reply: Reply | str,
                                              caplog: pytest.LogCaptureFixture) -> None:
    fake_openai.queue(reply)
    wm, names = _open(tmp_path / "x", 3)
    try:
        assert _ask(wm, names) == ["bravo"]
    finally:
        wm.close()
    assert len(fake_openai.chat_requests) == 1
    if reply != '{"queries": []}':
        assert "the query is searched alone" in caplog.text


def test_a_slow_llm_costs_at_most_the_timeout(tmp_path: Path, fake_openai: FakeOpenAI) -> None:
    fake_openai.queue(Reply(delay=5.0, content='{"queries": ["zulu camping"]}'))
    wm, names = _open(tmp_path / "slow", 3, timeout=0.5)
    try:
        t0 = time.perf_counter()
        assert _ask(wm, names) == ["bravo"]
        assert time.perf_counter() - t0 < 4.0
    finally:
        wm.close()
