"""The world-graph flow through WorldModel: rounds, durable packets, the LLM (a local
OpenAI-compatible server), merge, retry, export/import bytes, and a replayed adventure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.fake_openai import closed_port_url
from worldgraph import DeltaValidationError, InvalidInputError, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

ROOT = Path(__file__).resolve().parents[3]
ENV = "CottageEscape"

FLAGGED = {
    "round": 3, "action": "take brass key", "before_observation": "A brass key lies on the kitchen table.",
    "after_observation": "Taken.", "feedback": "You now carry the brass key.",
    "admissible_commands": ["go north", "drop brass key"],
    "response": "I take the key; it may open the front door.\nACTION: take brass key\n"
                "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: first key found",
}
DELTA = {
    "entities": [{"ref": "e1", "name": "brass key", "type": "item", "evidence": "A brass key lies on the table."},
                 {"ref": "e2", "name": "player", "type": "player"},
                 {"ref": "e3", "name": "kitchen table", "type": "furniture"}],
    "states": [],
    "edges": [{"relation": "containment", "src_ref": "e2", "dst_ref": "e1", "evidence": "Taken."},
              {"relation": "episodic", "src_ref": "e1", "dst_ref": "scene"},
              {"relation": "near", "src_ref": "e1", "dst_ref": "e3"},
              {"relation": "containment", "src_ref": "e3", "dst_ref": "e404"}],
    "rules": [{"condition": "the player carries the brass key", "outcome": "the front door can be unlocked",
               "linked_refs": ["e1"], "confidence": 0.6}],
}


@pytest.fixture
def wm(tmp_path: Path):  # type: ignore[no-untyped-def]
    model = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384))
    yield model
    model.close()


def test_unflagged_round_is_an_episode_only(wm: WorldModel) -> None:
    rnd = dict(FLAGGED, response="ACTION: look\nFLAG_CURIOSITY: no")
    assert wm.observe_round("t1", ENV, rnd) is None
    assert wm.stats("t1")["episodes"] == 1 and wm.stats("t1")["scenes"] == 0


def test_flagged_round_without_llm_stays_pending(wm: WorldModel) -> None:
    packet = wm.observe_round("t1", ENV, FLAGGED)
    assert packet is not None and packet["status"] == "pending"
    for key in ("env_name", "current_round", "trigger_reason", "action", "before_observation", "after_observation",
                "feedback", "admissible_commands", "latest_response", "recent_history_excerpt"):
        assert key in packet
    assert packet["trigger_reason"] == "first key found" and packet["current_round"] == 3
    wm.wait_for_updates(5)
    assert wm.store.get_scene("t1", packet["id"])["status"] == "pending"
    report = wm.update_world(packet)  # no OPENAI_* set: the packet waits, nothing is lost
    assert not report.ok and "OPENAI" in report.error
    assert wm.store.get_scene("t1", packet["id"])["status"] == "pending"


def test_llm_update_merges_and_reports_drops(wm: WorldModel, fake_openai) -> None:  # type: ignore[no-untyped-def]
    # The delta has two bad edges: the model gets one repair round with the errors; when it
    # answers the same again, the delta is still well-formed, so it merges and the bad edges are
    # dropped with their reasons instead of failing the whole update.
    fake_openai.queue(json.dumps(DELTA), json.dumps(DELTA))
    packet = wm.observe_round("t1", ENV, FLAGGED)
    assert wm.wait_for_updates(30)
    scene = wm.store.get_scene("t1", packet["id"])
    assert scene["status"] == "merged", scene.get("error")
    graph = wm.world_graph("t1", ENV)
    names = sorted(n["name"] for n in graph["nodes"])
    assert names == ["brass key", "kitchen table", "player"]
    relations = sorted(e["relation"] for e in graph["edges"])
    assert relations == ["containment", "episodic"]
    assert graph["meta"]["graph_version"] == 1 and graph["meta"]["last_trigger_reason"] == "first key found"
    assert graph["meta"]["counts"] == {"nodes": 3, "edges": 2, "rules": 1, "scenes": 1}
    # the prompt carried the scene and asked for the delta schema
    assert "take brass key" in json.dumps(fake_openai.chat_requests[0])
    assert "near" in json.dumps(fake_openai.chat_requests[1]["messages"][-1])
    # a packet is never merged twice
    again = wm.update_world(packet)
    assert again.skipped and wm.world_graph("t1", ENV)["meta"]["graph_version"] == 1


def test_apply_delta_reports_every_dropped_edge(wm: WorldModel) -> None:
    report = wm.apply_delta("t1", ENV, DELTA, scene="manual")
    reasons = " | ".join(d.reason for d in report.dropped)
    assert "near" in reasons and "e404" in reasons
    assert len(report.created["nodes"]) == 3 and len(report.created["rules"]) == 1
    again = wm.apply_delta("t1", ENV, DELTA, scene="manual")  # same delta: same ids, evidence grows
    assert again.created["nodes"] == [] and sorted(again.merged["nodes"]) == sorted(report.created["nodes"])


def test_bad_delta_writes_nothing(wm: WorldModel) -> None:
    wm.apply_delta("t1", ENV, DELTA)
    before = wm.world_graph("t1", ENV)
    for bad in ("not json", [], {"entities": []}, {"entities": "x", "states": [], "edges": [], "rules": []}):
        with pytest.raises(DeltaValidationError):
            wm.apply_delta("t1", ENV, bad)
    # an item that is not an object is dropped on its own; with nothing left, nothing is written
    report = wm.apply_delta("t1", ENV, {"entities": [1], "states": [], "edges": [], "rules": []}, scene="x")
    assert [d.reason for d in report.dropped] == ["must be an object, got number"] and report.skipped
    assert wm.world_graph("t1", ENV) == before
    with pytest.raises(InvalidInputError, match="env_name"):
        wm.apply_delta("t1", "../etc", DELTA)


def test_server_down_then_retry(wm: WorldModel, fake_openai, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OPENAI_BASE_URL", closed_port_url())
    wm.world._extractor = None
    packet = wm.observe_round("t1", ENV, FLAGGED)
    assert wm.wait_for_updates(60)
    scene = wm.store.get_scene("t1", packet["id"])
    assert scene["status"] == "pending" and scene["error"]
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    wm.world._extractor = None
    fake_openai.default = json.dumps(DELTA)  # answer and repair round alike
    reports = wm.retry_updates("t1")
    assert [r.ok for r in reports] == [True]
    assert wm.store.get_scene("t1", packet["id"])["status"] == "merged"


def test_export_import_export_is_byte_identical(wm: WorldModel, tmp_path: Path) -> None:
    wm.apply_delta("t1", ENV, DELTA, scene={"trigger_reason": "ключ найден", "action": "take key"})
    first = wm.export("t1", ENV, tmp_path / "a")
    assert first == tmp_path / "a" / "t1" / "general" / "world_model_graph" / ENV
    files = sorted(p.name for p in first.iterdir())
    assert files == ["edges.jsonl", "meta.json", "nodes.jsonl", "rules.jsonl", "scenes.jsonl"]
    assert "ключ найден" in (first / "scenes.jsonl").read_text("utf-8")  # UTF-8, unescaped
    other = WorldModel.open(tmp_path / "other", embedder=HashingEmbedder(384))
    try:
        other.import_snapshot("t1", first)
        second = other.export("t1", ENV, tmp_path / "b")
    finally:
        other.close()
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_replay_multi_room_adventure(wm: WorldModel) -> None:
    from worldgraph.cli.replay import replay_log

    log = ROOT / "examples" / "text_adventure.jsonl"
    rounds = [json.loads(line) for line in log.read_text("utf-8").splitlines() if line.strip()]
    summary = replay_log(wm, "t1", ENV, log, use_shipped_deltas=True)
    flagged = sum(1 for r in rounds if r.get("delta") is not None)
    assert summary["rounds"] == len(rounds) and summary["merged"] == flagged
    graph = wm.world_graph("t1", ENV)
    nodes = {n["id"]: n for n in graph["nodes"]}
    by_name = {(n["type"], n["name"]): n for n in graph["nodes"]}
    key = by_name[("item", "brass key")]
    holders = [e for e in graph["edges"] if e["relation"] == "containment" and e["dst_id"] == key["id"]]
    current = [e for e in holders if e["valid_to"] is None]
    assert len(current) == 1, "containment is single-parent"
    assert any(e["valid_to"] is not None for e in holders), "the key's old place is kept, closed"
    door_states = [n for n in graph["nodes"] if n["kind"] == "state" and n["type"] == "door_state"]
    open_now = [n for n in door_states if n.get("valid_to") is None]
    assert [n["name"] for n in open_now] == ["front door open"]
    assert any(n["name"] == "front door locked" and n["valid_to"] is not None for n in door_states)
    assert all(e["src_id"] in nodes for e in graph["edges"])
    assert any(r["dropped"] for r in summary["reports"]), "the log carries one deliberately bad edge"


def test_packet_interrupted_mid_update_is_retried(wm: WorldModel, fake_openai) -> None:  # type: ignore[no-untyped-def]
    wm.world.auto_update = False
    packet = wm.observe_round("t1", ENV, FLAGGED)
    # a process claims the packet, then dies before merging: the scene stays "running"
    assert wm.store.claim_scene("t1", packet["id"])
    stuck = dict(wm.store.get_scene("t1", packet["id"]), updated_at="2020-01-01T00:00:00.000000+00:00")
    wm.store.upsert_scene(stuck)
    assert wm.retry_updates("t1", stale_after=None) == []  # not stale-aware: left alone
    fake_openai.default = json.dumps(DELTA)
    reports = wm.retry_updates("t1")  # default: running for over 10 minutes = interrupted
    assert [r.ok for r in reports] == [True]
    assert wm.store.get_scene("t1", packet["id"])["status"] == "merged"


def test_an_empty_delta_ends_the_packet_without_changing_the_graph(wm: WorldModel) -> None:
    wm.world.auto_update = False
    wm.apply_delta("t1", ENV, DELTA, scene="manual")
    before = wm.world_graph("t1", ENV)["meta"]
    packet = wm.observe_round("t1", ENV, FLAGGED)
    report = wm.apply_delta("t1", ENV, {"entities": [], "states": [], "edges": [], "rules": []}, scene=packet)
    assert report.skipped and report.graph_version == before["graph_version"]
    assert wm.store.get_scene("t1", packet["id"])["status"] == "merged"
    meta = wm.world_graph("t1", ENV)["meta"]
    assert meta["graph_version"] == before["graph_version"] and meta["updated_at"] == before["updated_at"]
    again = wm.update_world(packet)  # merged already: the report of that merge, not a second one
    assert again.ok and again.scene_id == packet["id"] and "not twice" in again.skipped
