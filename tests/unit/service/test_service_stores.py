"""WorldModel end to end on both graph stores: recall with the graph neighbourhood, reindex
from the store, a recall never returning what the store does not hold, Cypher exploration."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from worldgraph import ReadOnlyQueryError, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

ENV = "Kitchen"
ROUND = {"round": 1, "action": "take brass key", "before_observation": "A brass key lies on the table.",
         "after_observation": "Taken.", "feedback": "", "admissible_commands": ["look"],
         "response": "ACTION: take brass key\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: a key"}
DELTA = {"entities": [{"ref": "k", "name": "brass key", "type": "item"}, {"ref": "t", "name": "table", "type": "furniture"}],
         "states": [],
         "edges": [{"relation": "containment", "src_ref": "t", "dst_ref": "k"},
                   {"relation": "episodic", "src_ref": "k", "dst_ref": "scene"}],
         "rules": [{"condition": "the key is on the table", "outcome": "it can be taken", "linked_refs": ["k"]}]}
CANVAS = {"id": "canvas-7", "name": "Inventory board",
          "actions": [{"id": "a1", "type": "update_component", "component_id": "grid"},
                      {"id": "a2", "type": "add_filter", "component_id": "grid"}]}


@pytest.fixture(params=["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def wm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorldModel]:
    kw: dict[str, object] = {}
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        kw = {"graph": "neo4j", "neo4j_uri": server["uri"], "neo4j_user": server["user"],
              "neo4j_password": server["password"]}
    model = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384), **kw)  # type: ignore[arg-type]
    yield model
    model.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_recall_with_neighborhood(wm: WorldModel, tenant: str) -> None:
    eid = wm.record_experience(tenant, {"agent_id": "inv-1", "agent_role": "Finance", "task_type": "reconciliation",
                                        "task_description": "Reconcile brass key inventory", "outcome": "success"},
                               canvas=CANVAS)
    wm.submit_feedback(tenant, eid, 0.5, category="accuracy")
    packet = wm.observe_round(tenant, ENV, ROUND)
    assert packet is not None
    report = wm.apply_delta(tenant, ENV, DELTA, scene=packet)
    assert report.ok and len(report.created["nodes"]) == 2
    res = wm.recall_experiences(tenant, "Finance", "reconcile brass key inventory", options={
        "min_similarity": 0.0, "include_neighborhood": True, "include_canvas_context": True})
    top = res[0]
    assert top["episode_id"] == eid
    hood = top["neighborhood"]
    assert hood["canvas"]["id"] == "canvas-7"
    assert [a["action_id"] for a in hood["canvas_actions"]] == ["a1", "a2"]
    assert [f["feedback_score"] for f in hood["feedback"]] == [0.5]
    assert top["canvas_snapshot"]["name"] == "Inventory board"
    # the round's episode produced the scene, which produced the nodes and the rule
    rounds = wm.recall_experiences(tenant, "explorer", "Kitchen round 1 take brass key",
                                   options={"min_similarity": 0.0, "include_neighborhood": True})
    round_hood = next(r for r in rounds if r["episode_id"] == packet["episode_id"])["neighborhood"]
    assert [s["id"] for s in round_hood["scenes"]] == [packet["id"]]
    assert sorted(n["name"] for n in round_hood["nodes"]) == ["brass key", "table"]
    assert [r["condition"] for r in round_hood["rules"]] == ["the key is on the table"]


def test_reindex_rebuilds_from_the_store(wm: WorldModel, tenant: str) -> None:
    ids = wm.record_experiences(tenant, [
        {"agent_id": "a", "task_type": "t", "task_description": f"task number {i}", "outcome": "success"}
        for i in range(5)])
    wm.index.clear()
    assert wm.recall_experiences(tenant, None, "task number", options={"min_similarity": 0.0}) == []
    assert wm.reindex(tenant) == 5
    found = {r["episode_id"] for r in wm.recall_experiences(tenant, None, "task number",
                                                             options={"min_similarity": 0.0, "limit": 10})}
    assert found == set(ids)


def test_recall_never_returns_what_the_store_does_not_hold(wm: WorldModel, tenant: str) -> None:
    from worldgraph.memory.record import index_row

    wm.record_experience(tenant, {"agent_id": "a", "task_type": "t", "task_description": "real task",
                                  "outcome": "success"})
    ghost = {"id": "ghost-1", "tenant_id": tenant, "agent_id": "a", "agent_role": "", "task_type": "t",
             "task_description": "real task", "input_summary": "", "outcome": "success", "success": True,
             "learnings": [], "confidence_score": 0.5, "ts": 1.0e9, "canvas_id": None, "canvas_action_ids": []}
    wm.index.upsert([index_row(ghost, wm.embedder.embed(["t\nreal task\nsuccess"])[0])])
    found = [r["episode_id"] for r in wm.recall_experiences(tenant, None, "real task", options={"min_similarity": 0.0})]
    assert "ghost-1" not in found and len(found) == 1


@pytest.mark.neo4j
def test_cypher_exploration(tmp_path: Path, neo4j_server: dict[str, str], tenant: str) -> None:
    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384), graph="neo4j",
                         neo4j_uri=neo4j_server["uri"], neo4j_user=neo4j_server["user"],
                         neo4j_password=neo4j_server["password"])
    try:
        wm.apply_delta(tenant, ENV, DELTA, scene="manual")
        rows = wm.cypher(tenant, "MATCH (r:Rule {tenant_id: $tenant_id}) RETURN r.condition AS condition")
        assert rows == [{"condition": "the key is on the table"}]
        with pytest.raises(ReadOnlyQueryError):
            wm.cypher(tenant, "MATCH (n {tenant_id: $tenant_id}) DETACH DELETE n")
        with pytest.raises(ReadOnlyQueryError):
            wm.cypher(tenant, "MATCH (n:Rule) RETURN n")  # no $tenant_id: could cross tenants
    finally:
        wm.close()
