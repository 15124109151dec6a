"""record_conversation and memories in context, end to end on both stores: turns become linked
episodes, recall returns a memory's neighbours, bad input records nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.service.test_service_stores import tenant, wm  # noqa: F401 - fixtures (both stores)
from worldgraph import InvalidInputError, WorldModel
from worldgraph.cli.main import main

TURNS = [
    {"speaker": "Melanie", "text": "Where did you go last weekend?", "timestamp": "2023-05-08T13:56:00Z"},
    {"speaker": "Caroline", "text": "I hiked up to the glacier lake with my sister.", "timestamp": "2023-05-08T13:56:00Z"},
    {"speaker": "Melanie", "text": "That sounds lovely, was it cold?", "timestamp": "2023-05-08T13:57:00Z"},
]


def test_turns_become_linked_episodes(wm: WorldModel, tenant: str) -> None:  # noqa: F811
    ids = wm.record_conversation(tenant, "chat-1", TURNS)
    assert len(ids) == 3
    eps = [wm.get_episode(tenant, i) for i in ids]
    assert [e["agent_id"] for e in eps] == ["Melanie", "Caroline", "Melanie"]
    assert [e["task_description"] for e in eps] == [t["text"] for t in TURNS]
    assert all(e["session_id"] == "chat-1" and e["task_type"] == "conversation" for e in eps)
    # each turn carries the turn it answers
    assert eps[0]["input_summary"] == "" and eps[1]["input_summary"] == "Melanie: Where did you go last weekend?"
    assert wm.store.session_neighbors(tenant, ids) == {ids[0]: (None, ids[1]), ids[1]: (ids[0], ids[2]),
                                                      ids[2]: (ids[1], None)}
    # a later call continues the session: its first turn follows the stored last one
    more = wm.record_conversation(tenant, "chat-1", [{"speaker": "Caroline", "text": "Freezing, but worth it.",
                                                      "timestamp": "2023-05-08T13:58:00Z", "agent_role": "friend"}])
    ep = wm.get_episode(tenant, more[0])
    assert ep["input_summary"] == "Melanie: That sounds lovely, was it cold?" and ep["agent_role"] == "friend"
    assert wm.store.session_neighbors(tenant, [ids[2], more[0]])[more[0]] == (ids[2], None)


def test_recall_returns_the_adjacent_turns(wm: WorldModel, tenant: str) -> None:  # noqa: F811
    ids = wm.record_conversation(tenant, "chat-1", TURNS)
    res = wm.recall_experiences(tenant, None, "glacier lake hike with her sister", limit=3,
                                options={"min_similarity": -1.0, "include_neighborhood": True})
    assert {r["episode_id"] for r in res} == set(ids)
    top = next(r for r in res if r["episode_id"] == ids[1])
    assert top["session_id"] == "chat-1"
    hood = top["neighborhood"]
    assert hood["previous"]["id"] == ids[0] and hood["next"]["id"] == ids[2]
    assert hood["previous"]["task_description"] == TURNS[0]["text"]
    assert "feedback" in hood and "scenes" in hood  # the rest of the neighbourhood is still there
    first = next(r for r in res if r["episode_id"] == ids[0])
    assert first["neighborhood"]["previous"] is None and first["neighborhood"]["next"]["id"] == ids[1]


@pytest.mark.parametrize("session_id, turns, field", [
    ("chat-1", [TURNS[0], {"speaker": "Caroline"}], "turns[1].text"),
    ("chat-1", [TURNS[0], {"speaker": "Caroline", "text": "x", "role": ""}], "turns[1].role"),
    ("chat-1", [TURNS[0], {"role": "user", "text": "x", "agent_role": "bot"}], "turns[1].agent_role"),
    ("chat-1", [{"text": "who said this?"}], "turns[0].speaker"),
    ("chat-1", [TURNS[0], "just a string"], "turns[1]"),
    ("chat-1", "not a list", "turns"),
    ("chat-1", [{**TURNS[0], "timestamp": "last tuesday"}], "turns[0].timestamp"),
    ("chat-1", [{**TURNS[0], "agent_id": "someone else"}], "turns[0].agent_id"),
    ("chat-1", [{**TURNS[0], "dia_id": "D1:1"}], "turns[0].dia_id"),
    ("x" * 201, TURNS, "session_id"),
    ("", TURNS, "session_id"),
    ("chat\n1", TURNS, "session_id"),
    (42, TURNS, "session_id"),
])
def test_bad_turns_record_nothing(wm: WorldModel, tenant: str, session_id: Any, turns: Any,  # noqa: F811
                                  field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        wm.record_conversation(tenant, session_id, turns)
    assert err.value.field == field
    assert wm.stats(tenant)["episodes"] == 0


def test_session_id_on_any_experience(wm: WorldModel, tenant: str) -> None:  # noqa: F811
    exp = {"agent_id": "a", "task_type": "t", "task_description": "d", "outcome": "success"}
    ids = wm.record_experiences(tenant, [{**exp, "session_id": "run-7"}, {**exp, "session_id": "run-7"}])
    assert wm.store.session_neighbors(tenant, ids)[ids[0]] == (None, ids[1])
    with pytest.raises(InvalidInputError) as err:
        wm.record_experience(tenant, {**exp, "session_id": "y" * 500})
    assert err.value.field == "experience.session_id"


def test_cli_record_conversation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = str(tmp_path / "data")
    sessions = tmp_path / "sessions.jsonl"
    sessions.write_text("\n".join(json.dumps({"session_id": f"s{i}", "turns": TURNS}) for i in range(2)) + "\n")
    bare = tmp_path / "turns.json"
    bare.write_text(json.dumps(TURNS))

    def run(*args: str) -> tuple[int, Any]:
        code = main(["--data", data, "--tenant", "acme", *args, "--json"])
        captured = capsys.readouterr()  # an error is one JSON line on stderr
        return code, json.loads(captured.err if code else captured.out)

    code, out = run("record-conversation", str(sessions))
    assert code == 0 and out["recorded"] == 6 and out["sessions"] == 2
    code, out = run("record-conversation", str(bare), "--session", "s9")
    assert code == 0 and out["recorded"] == 3
    code, out = run("record-conversation", str(bare))  # bare turns need --session
    assert code == 1 and out["error"]["type"] == "invalid_input" and "--session" in out["error"]["message"]
    code, out = run("recall", "glacier lake", "--neighborhood", "--min-similarity", "0", "--limit", "1")
    assert code == 0 and out[0]["neighborhood"]["previous"]["agent_id"] == "Melanie"


@pytest.mark.neo4j
def test_session_order_in_cypher(tmp_path: Path, neo4j_server: dict[str, str], tenant: str) -> None:  # noqa: F811
    from worldgraph.memory.embeddings import HashingEmbedder

    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64), graph="neo4j",
                         neo4j_uri=neo4j_server["uri"], neo4j_user=neo4j_server["user"],
                         neo4j_password=neo4j_server["password"])
    try:
        wm.record_conversation(tenant, "chat-1", TURNS)
        rows = wm.cypher(tenant, "MATCH (a:Episode {tenant_id: $tenant_id})-[:NEXT]->(b:Episode) "
                                 "RETURN a.agent_id AS a, b.agent_id AS b")
        assert sorted((r["a"], r["b"]) for r in rows) == [("Caroline", "Melanie"), ("Melanie", "Caroline")]
        rows = wm.cypher(tenant, "MATCH (s:Session {tenant_id: $tenant_id}) RETURN s.id AS id, s.last_seq AS n")
        assert rows == [{"id": "chat-1", "n": 2}]
    finally:
        wm.close()


class _CountingEmbedder:
    """The hashing embedder, counting the texts of each embed call."""

    def __init__(self) -> None:
        from worldgraph.config import WorldGraphConfig
        from worldgraph.memory.embeddings import make_embedder
        self.inner = make_embedder(WorldGraphConfig(embedding_provider="hashing"))
        self.name, self.dimensions = self.inner.name, self.inner.dimensions
        self.calls: list[int] = []

    def embed(self, texts: list[str]) -> Any:
        self.calls.append(len(texts))
        return self.inner.embed(texts)


def _session(n: int, day: int) -> list[dict[str, Any]]:
    return [{"speaker": ("Melanie", "Caroline")[i % 2], "text": f"session {day} turn {i}",
             "timestamp": f"2023-05-{day:02d}T13:{i:02d}:00Z"} for i in range(n)]


def test_record_conversations_embeds_many_sessions_in_one_call(tmp_path: Path) -> None:
    sessions = {"s1": _session(3, 8), "s2": _session(4, 9), "s3": _session(2, 10)}
    emb = _CountingEmbedder()
    wm = WorldModel.open(tmp_path / "bulk", embedder=emb)
    try:
        emb.calls.clear()
        ids = wm.record_conversations("t", sessions)
        assert emb.calls == [9]  # all three sessions' turns in one embedding call, not 3 + 4 + 2
        assert {s: len(v) for s, v in ids.items()} == {"s1": 3, "s2": 4, "s3": 2}
        # each session is what record_conversation makes of it: linked turns, each with the turn it answers
        eps = [wm.get_episode("t", i) for i in ids["s2"]]
        assert [e["task_description"] for e in eps] == [t["text"] for t in sessions["s2"]]
        assert all(e["session_id"] == "s2" for e in eps)
        assert eps[0]["input_summary"] == "" and eps[1]["input_summary"] == "Melanie: session 9 turn 0"
        assert wm.store.session_neighbors("t", ids["s2"])[ids["s2"][1]] == (ids["s2"][0], ids["s2"][2])
        # a session that continues a stored one follows its last turn, as with record_conversation
        more = wm.record_conversations("t", [("s1", [{"speaker": "Caroline", "text": "later",
                                                       "timestamp": "2023-05-08T14:00:00Z"}])])
        assert wm.get_episode("t", more["s1"][0])["input_summary"] == "Melanie: session 8 turn 2"
        assert {r["episode_id"] for r in wm.recall_experiences("t", None, "session 9 turn 3", limit=20,
                                                               options={"min_similarity": -1.0})} >= set(ids["s2"])
    finally:
        wm.close()


def test_record_conversations_checks_every_session_first(tmp_path: Path) -> None:
    wm = WorldModel.open(tmp_path / "bad", embedder=_CountingEmbedder())
    try:
        with pytest.raises(InvalidInputError) as err:
            wm.record_conversations("t", {"s1": _session(2, 8), "s2": [{"text": "who?"}]})
        assert err.value.field == "sessions['s2'].turns[0].speaker"  # names the session and the turn
        with pytest.raises(InvalidInputError, match="appears twice"):
            wm.record_conversations("t", [("s1", _session(2, 8)), ("s1", _session(1, 9))])
        with pytest.raises(InvalidInputError, match="sessions"):
            wm.record_conversations("t", "s1")  # type: ignore[arg-type]
        assert wm.list_agents("t") == []  # nothing was recorded
    finally:
        wm.close()


def test_record_conversations_splits_at_the_batch_limit(tmp_path: Path) -> None:
    emb = _CountingEmbedder()
    wm = WorldModel.open(tmp_path / "split", embedder=emb, max_batch_experiences=5)
    try:
        emb.calls.clear()
        ids = wm.record_conversations("t", {"s1": _session(3, 8), "s2": _session(2, 9), "s3": _session(4, 10)})
        assert emb.calls == [5, 4]  # whole sessions per call, each call within the limit
        assert [len(ids[s]) for s in ("s1", "s2", "s3")] == [3, 2, 4]
    finally:
        wm.close()
