"""Derived text is derived, not copied (docs/forget.md), on both stores: what a record shows of
another (a turn's context, a canvas's actions, a scene's words in the world graph, a round in later
scenes) is derived again in the forget itself, store rows and index rows (full text included), and
forgetting by person (an agent, a session) keeps the same guarantees."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.unit.service.test_forget import graph_kw, tenant, wm  # noqa: F401 - fixtures: both stores
from worldgraph import InvalidInputError, NotFoundError, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def word() -> str:
    """A marker: one full-text term no other record holds."""
    return f"zq{uuid.uuid4().hex[:10]}x"


def bm25_ids(wm: WorldModel, tenant: str, term: str) -> list[str]:
    wm.index.ensure_indexes(vector=False, tenant_id=tenant)
    return [r["episode_id"] for r in wm.index.text_search(tenant, term, k=10)]


def chat(wm: WorldModel, tenant: str, session: str, words: list[str], speakers: list[str]) -> list[str]:
    return wm.record_conversation(tenant, session, [
        {"speaker": who, "text": f"said {w}", "timestamp": f"2026-01-01T10:{i:02d}:00Z"}
        for i, (who, w) in enumerate(zip(speakers, words))])


def test_a_turn_quoting_a_forgotten_turn_quotes_the_one_before_it(wm: WorldModel, tenant: str) -> None:
    first, middle, last = word(), word(), word()
    ids = chat(wm, tenant, "chat", [first, middle, last], ["Alice", "Bob", "Alice"])
    turn = wm.get_episode(tenant, ids[2])
    assert turn["input_summary"] == f"Bob: said {middle}" and turn["context_from"] == ids[1]
    assert set(bm25_ids(wm, tenant, middle)) == {ids[1], ids[2]}, "the full text of the next turn holds it"

    report = wm.forget_episode(tenant, ids[1])
    assert report.removed["turn_contexts_rederived"] == 1
    turn = wm.get_episode(tenant, ids[2])
    assert turn["input_summary"] == f"Alice: said {first}" and turn["context_from"] == ids[0]
    assert turn["index_status"] == "indexed"
    # no read path ranks by the forgotten words, before any purge: the full-text index included
    assert bm25_ids(wm, tenant, middle) == []
    assert set(bm25_ids(wm, tenant, first)) == {ids[0], ids[2]}
    hits = wm.recall_experiences(tenant, None, f"said {middle}", limit=10, options={"min_similarity": 0.0})
    assert all(middle not in (h["input_summary"] or "") for h in hits)
    rows = wm.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.record AS r")
    assert rows and not any(middle in str(r["r"]) for r in rows)
    # the first turn forgotten: the last one quotes nothing
    wm.forget_episode(tenant, ids[0])
    turn = wm.get_episode(tenant, ids[2])
    assert turn["input_summary"] == "" and turn["context_from"] is None
    assert bm25_ids(wm, tenant, first) == []


def test_a_turn_recorded_before_context_from_is_matched_by_its_text(wm: WorldModel, tenant: str) -> None:
    secret = word()
    base = {"task_type": "conversation", "outcome": "success", "session_id": "old-chat"}
    quoted_id = wm.record_experience(tenant, {**base, "agent_id": "Bob", "task_description": f"said {secret}",
                                              "timestamp": "2026-01-01T10:00:00Z"})
    reply = wm.record_experience(tenant, {**base, "agent_id": "Alice", "task_description": "a reply",
                                          "input_summary": f"Bob: said {secret}", "timestamp": "2026-01-01T10:01:00Z"})
    own = wm.record_experience(tenant, {**base, "agent_id": "Carol", "task_description": "mine",
                                        "input_summary": "a summary of my own", "timestamp": "2026-01-01T10:02:00Z"})
    assert "context_from" not in wm.get_episode(tenant, reply)
    wm.forget_episode(tenant, quoted_id)
    assert wm.get_episode(tenant, reply)["input_summary"] == ""
    assert wm.get_episode(tenant, own)["input_summary"] == "a summary of my own", "a summary given is the caller's"
    assert bm25_ids(wm, tenant, secret) == []


def test_a_turn_with_its_own_input_summary_quotes_nothing(wm: WorldModel, tenant: str) -> None:
    ids = wm.record_conversation(tenant, "c", [{"speaker": "A", "text": "one"},
                                               {"speaker": "B", "text": "two", "input_summary": "given"}])
    got = wm.get_episode(tenant, ids[1])
    assert got["input_summary"] == "given" and got["context_from"] is None
    wm.forget_episode(tenant, ids[0])
    assert wm.get_episode(tenant, ids[1])["input_summary"] == "given"


def test_forget_agent_and_session(wm: WorldModel, tenant: str) -> None:
    words = [word() for _ in range(6)]
    a = chat(wm, tenant, "chat-a", words[:4], ["Alice", "Bob", "Alice", "Bob"])
    b = chat(wm, tenant, "chat-b", words[4:], ["Bob", "Carol"])
    kept = wm.record_experience(tenant, {"agent_id": "Dan", "task_type": "t", "task_description": "keep",
                                         "outcome": "success"})
    report = wm.forget_agent(tenant, "Bob", forgotten_by="privacy@example")
    assert report.kind == "agent" and report.target_id == "Bob" and report.removed["episodes"] == 3
    assert report.removed["turn_contexts_rederived"] == 2  # Alice's second turn, Carol's turn
    assert "Bob" not in {x["agent_id"] for x in wm.list_agents(tenant)}
    assert wm.get_episode(tenant, a[2])["input_summary"] == f"Alice: said {words[0]}"
    assert wm.get_episode(tenant, b[1])["input_summary"] == ""
    for w in (words[1], words[3], words[4]):
        assert bm25_ids(wm, tenant, w) == []
    with pytest.raises(NotFoundError) as err:
        wm.forget_agent(tenant, "Bob")
    assert err.value.field == "agent_id" and "Alice" in str(err.value)

    report = wm.forget_session(tenant, "chat-a")
    assert report.kind == "session" and report.removed["episodes"] == 2
    assert [e["id"] for e in wm.list_episodes(tenant, session_id="chat-a").items] == []
    assert [e["id"] for e in wm.list_episodes(tenant, session_id="chat-b").items] == [b[1]]
    assert wm.get_episode(tenant, kept)["task_description"] == "keep"
    with pytest.raises(NotFoundError) as err:
        wm.forget_session(tenant, "chat-a")
    assert err.value.field == "session_id"
    with pytest.raises(InvalidInputError):
        wm.forget_session(tenant, "")
    with pytest.raises(InvalidInputError):
        wm.forget_agent(tenant, "")
    log = wm.store.forget_log(tenant)
    assert [(x["kind"], x["target_id"], x["forgotten_by"]) for x in log] == [
        ("agent", "Bob", "privacy@example"), ("session", "chat-a", None)]
    assert sorted(log[0]["episode_ids"]) == sorted([a[1], a[3], b[0]])
    # the other tenant's agent of the same name is not touched
    other = tenant + "-o"
    theirs = wm.record_experience(other, {"agent_id": "Carol", "task_type": "t", "task_description": "x",
                                          "outcome": "success"})
    wm.forget_agent(tenant, "Carol")
    assert wm.get_episode(other, theirs)["agent_id"] == "Carol"


def _canvas(name: str, action: str) -> dict[str, Any]:
    return {"id": "canvas-1", "name": name, "components": [{"id": "chart"}],
            "actions": [{"id": f"act-{action}", "type": "edit", "component_id": action, "details": {"note": action}}]}


def test_a_canvas_holds_only_what_live_episodes_carried(wm: WorldModel, tenant: str) -> None:
    old, new = word(), word()
    base = {"agent_id": "a", "task_type": "t", "outcome": "success"}
    first = wm.record_experience(tenant, {**base, "task_description": "one", "timestamp": "2026-01-01T10:00:00Z"},
                                 canvas=_canvas(f"board {old}", old))
    second = wm.record_experience(tenant, {**base, "task_description": "two", "timestamp": "2026-01-01T11:00:00Z"},
                                  canvas=_canvas(f"board {new}", new))
    plain = wm.record_experience(tenant, {**base, "task_description": "three", "canvas_id": "canvas-1"})
    assert new in str(wm.store.get_canvas(tenant, "canvas-1"))
    report = wm.forget_episode(tenant, second)
    assert report.removed["canvases_rederived"] == 1
    canvas = wm.store.get_canvas(tenant, "canvas-1")
    assert canvas is not None and new not in str(canvas) and old in str(canvas)
    rows = wm.cypher(tenant, "MATCH (c:Canvas {tenant_id: $tenant_id}) RETURN c")
    assert len(rows) == 1 and new not in str(rows) and old in str(rows)
    # the last episode that carried it goes: so does the canvas (one that only names it carried none)
    report = wm.forget_episode(tenant, first)
    assert report.removed["canvases"] == 1
    assert wm.store.get_canvas(tenant, "canvas-1") is None
    assert wm.cypher(tenant, "MATCH (c:Canvas {tenant_id: $tenant_id}) RETURN c") == []
    assert wm.get_episode(tenant, plain)["canvas_id"] == "canvas-1"


def _flagged(n: int, text: str, reason: str) -> dict[str, Any]:
    return {"round": n, "action": f"look {n}", "before_observation": f"before {text}",
            "after_observation": f"after {text}", "feedback": "", "admissible_commands": ["look"],
            "response": f"look\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: {reason}"}


def test_forgetting_a_round_drops_what_came_only_from_its_scene(wm: WorldModel, tenant: str) -> None:
    env = "Cellar"
    secret, reason, other, later = word(), word(), word(), word()
    packet = wm.observe_round(tenant, env, _flagged(1, secret, f"the crate {reason}"))
    assert packet is not None
    delta = {"entities": [{"ref": "c", "name": "crate", "type": "container", "evidence": f"a crate {secret}"},
                          {"ref": "b", "name": "bottle", "type": "item", "evidence": f"a bottle {secret}"}],
             "states": [], "edges": [{"relation": "containment", "src_ref": "c", "dst_ref": "b",
                                       "evidence": f"inside {secret}"}],
             "rules": [{"condition": "a crate is closed", "outcome": "it hides things", "linked_refs": ["c"],
                        "evidence": f"rule {secret}"}]}
    wm.apply_delta(tenant, env, delta, scene=packet)
    # the same crate seen without a scene (a caller's delta): that evidence stays
    wm.apply_delta(tenant, env, {"entities": [{"ref": "c", "name": "crate", "type": "container",
                                               "evidence": f"crate again {other}"}],
                                 "states": [], "edges": [], "rules": []})
    assert wm.world_graph(tenant, env)["meta"]["last_trigger_reason"] == f"the crate {reason}"
    # a later flagged round: its scene quotes the first round in its history
    second = wm.observe_round(tenant, env, _flagged(2, later, "more"))
    assert second is not None and secret in second["recent_history_excerpt"]
    assert second["history_episode_ids"] == [packet["episode_id"]]

    report = wm.forget_episode(tenant, packet["episode_id"])
    assert report.removed["scenes"] == 1 and report.removed["scenes_rederived"] == 1
    graph = wm.world_graph(tenant, env)
    assert secret not in str(graph) and reason not in str(graph)
    assert {n["name"] for n in graph["nodes"]} == {"crate", "bottle"} and len(graph["rules"]) == 1
    assert len(graph["edges"]) == 1, "what was learned stays"
    crate = next(n for n in graph["nodes"] if n["name"] == "crate")
    assert crate["evidence"] == [f"crate again {other}"]
    assert graph["meta"]["last_trigger_reason"] is None
    scene = wm.store.get_scene(tenant, second["id"])
    assert scene is not None and secret not in str(scene) and scene["history_episode_ids"] == []
    rows = wm.cypher(tenant, "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.record AS r")
    assert rows and not any(secret in str(r["r"]) for r in rows)
    # the process's own history of rounds forgot it too: the next scene does not quote it
    third = wm.observe_round(tenant, env, _flagged(3, word(), "again"))
    assert third is not None and secret not in third["recent_history_excerpt"]
    assert later in third["recent_history_excerpt"]


def test_a_round_forgotten_by_another_process_leaves_this_ones_history(tmp_path: Path, tenant: str) -> None:
    secret = word()
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as wm:
        first = wm.observe_round(tenant, "Cellar", {**_flagged(1, secret, "x"), "response": "look"})
        assert first is None
        eid = wm.list_episodes(tenant).items[0]["id"]
        with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as other:
            other.forget_episode(tenant, eid)
        packet = wm.observe_round(tenant, "Cellar", _flagged(2, word(), "y"))
        assert packet is not None and secret not in packet["recent_history_excerpt"]


def _forget_the_old_way(wm: WorldModel, tenant: str, episode_id: str, copies: list[str]) -> None:
    """Forget ``episode_id`` as a worldgraph before derived text did: the records of ``copies``
    keep what they showed of it (written back as they were), and the upgrade is not done yet."""
    from worldgraph.kg.lifecycle import DerivedRecords

    before = wm.store.get_episodes(tenant, copies)
    wm.forget_episode(tenant, episode_id)
    legacy = [{k: v for k, v in e.items() if k != "context_from"} for e in before.values()]
    wm.store.write_derived(tenant, DerivedRecords(episodes=legacy), {
        "id": str(uuid.uuid4()), "tenant_id": tenant, "kind": "test", "target_id": "", "forgotten_by": None,
        "forgotten_at": "2026-01-01T00:00:00+00:00"})
    if wm.store.name == "neo4j":
        wm.store.db.write(lambda tx: tx.run("MATCH (s:WorldgraphSchema {name: 'worldgraph'}) "
                                            "REMOVE s.derived_text").consume())
    else:
        with wm.store.db.transaction() as cur:
            cur.execute("DELETE FROM schema_info WHERE key = 'derived_text'")


def test_the_upgrade_derives_again_what_an_older_forget_left(wm: WorldModel, tenant: str) -> None:
    from worldgraph.facade.upgrade import derive_legacy_copies

    first, middle, last = word(), word(), word()
    ids = chat(wm, tenant, "chat", [first, middle, last], ["Alice", "Bob", "Alice"])
    _forget_the_old_way(wm, tenant, ids[1], [ids[2]])
    assert wm.get_episode(tenant, ids[2])["input_summary"] == f"Bob: said {middle}"
    assert not wm.store.derived_text_upgraded()
    counts = derive_legacy_copies(wm.store)
    assert counts["episodes"] == 1 and wm.store.derived_text_upgraded()
    assert wm.get_episode(tenant, ids[2])["input_summary"] == f"Alice: said {first}"
    assert wm.retry_indexing() == 1 and bm25_ids(wm, tenant, middle) == []
    assert derive_legacy_copies(wm.store) == {}, "once"


def test_an_upgrade_that_fails_is_left_to_the_next_open(wm: WorldModel, tenant: str,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    from worldgraph.facade.upgrade import derive_legacy_copies

    first, middle, last = word(), word(), word()
    ids = chat(wm, tenant, "chat", [first, middle, last], ["Alice", "Bob", "Alice"])
    _forget_the_old_way(wm, tenant, ids[1], [ids[2]])

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(wm.store, "write_derived", full_disk)
        assert derive_legacy_copies(wm.store) == {}
    assert "not all derived again" in caplog.text and "No space left" in caplog.text
    assert not wm.store.derived_text_upgraded(), "the next open upgrades"
    assert wm.get_episode(tenant, ids[2])["input_summary"] == f"Bob: said {middle}"
    assert derive_legacy_copies(wm.store)["episodes"] == 1 and wm.store.derived_text_upgraded()
    assert wm.get_episode(tenant, ids[2])["input_summary"] == f"Alice: said {first}"


def test_an_agent_shows_no_forgotten_episodes_role(wm: WorldModel, tenant: str) -> None:
    role = word()
    base = {"agent_id": "a", "task_type": "t", "outcome": "success"}
    wm.record_experience(tenant, {**base, "agent_role": "Cook", "task_description": "one",
                                  "timestamp": "2026-01-01T10:00:00Z"})
    last = wm.record_experience(tenant, {**base, "agent_role": role, "task_description": "two",
                                         "timestamp": "2026-01-01T11:00:00Z"})
    assert [a["agent_role"] for a in wm.list_agents(tenant)] == [role]
    wm.forget_episode(tenant, last)
    assert [a["agent_role"] for a in wm.list_agents(tenant)] == ["Cook"]
    rows = wm.cypher(tenant, "MATCH (a:Agent {tenant_id: $tenant_id}) RETURN a.agent_role AS role, a.record AS r")
    assert rows and role not in str(rows)
