from __future__ import annotations

from typing import Any

from worldgraph.world.curiosity import AgentRound, build_scene_packet
from worldgraph.world.summary import render_summary, summarize_graph


def _node(nid: str, name: str, type_: str, kind: str = "entity", conf: float = 0.8,
          evidence: int = 1, **extra: Any) -> dict[str, Any]:
    return {"id": nid, "kind": kind, "type": type_, "name": name, "attributes": {},
            "confidence": conf, "evidence_count": evidence, "evidence": ["seen"] * evidence,
            "source_scenes": [], "valid_to": None, **extra}


def _edge(eid: str, rel: str, src: str, dst: str, valid_to: str | None = None) -> dict[str, Any]:
    return {"id": eid, "relation": rel, "src_id": src, "dst_id": dst, "confidence": 0.9,
            "evidence": [], "source_scenes": [], "valid_from": "2026-01-01", "valid_to": valid_to}


def _graph() -> dict[str, Any]:
    nodes = [
        _node("n-key", "brass key", "item", conf=0.5),
        _node("n-table", "wooden table", "furniture", conf=0.5),
        _node("n-kitchen", "kitchen", "room", conf=0.5),
        _node("n-door", "front door", "door"),
        _node("s-open", "front door open", "door_state", kind="state", entity_id="n-door"),
        _node("s-closed", "front door closed", "door_state", kind="state", entity_id="n-door",
              valid_to="2026-01-02", conf=0.99, evidence=50),
    ]
    # A busy, well attested part of the world the scene does not talk about.
    for i in range(30):
        nodes.append(_node(f"n-hub-{i:02d}", f"garden statue {i}", "statue", conf=0.95, evidence=40))
    edges = [_edge(f"e-hub-{i:02d}", "containment", "n-hub-00", f"n-hub-{i:02d}") for i in range(1, 30)]
    edges += [
        _edge("e-1", "containment", "n-kitchen", "n-table"),
        _edge("e-2", "containment", "n-table", "n-key"),
        _edge("e-old", "containment", "n-hub-00", "n-key", valid_to="2026-01-01"),
        _edge("e-3", "transition", "s-closed", "s-open"),
        _edge("e-ep", "episodic", "n-key", "scene-0"),
    ]
    rules = [
        {"id": "r-locked", "condition": "the front door is locked", "outcome": "going outside fails",
         "linked_node_ids": ["n-door"], "confidence": 0.6, "evidence_count": 1, "valid_to": None},
        {"id": "r-old", "condition": "the statue is pushed", "outcome": "nothing happens",
         "linked_node_ids": [], "confidence": 0.9, "evidence_count": 9, "valid_to": "2026-01-01"},
    ] + [
        {"id": f"r-statue-{i}", "condition": f"statue {i} is touched", "outcome": "it hums",
         "linked_node_ids": [f"n-hub-{i:02d}"], "confidence": 0.9, "evidence_count": 5, "valid_to": None}
        for i in range(10)
    ]
    return {"nodes": nodes, "edges": edges, "rules": rules, "meta": {"env_name": "house"}}


def _scene() -> dict[str, Any]:
    rnd = AgentRound(round=4, action="take brass key",
                     before_observation="In the kitchen, on the wooden table, is a brass key.",
                     after_observation="Taken. The front door is still locked.")
    return build_scene_packet("t", "house", rnd, "key found", "", "scene-4", None)


def test_summary_is_bounded_and_counts_everything() -> None:
    graph = _graph()
    summary = summarize_graph(graph, _scene(), max_items=8)
    shown = summary["entities"] + summary["states"] + summary["rules"]
    assert len(shown) == 8
    assert summary["counts"] == {"nodes": 36, "entities": 34, "states": 2, "edges": 34,
                                 "current_edges": 33, "current_facts": 0, "rules": 12}
    assert {r["id"] for r in summary["rules"]}.isdisjoint({"r-old"})  # closed rules are history


def test_scene_entities_rank_first() -> None:
    summary = summarize_graph(_graph(), _scene(), max_items=8)
    ids = [e["id"] for e in summary["entities"]]
    # the statues are central and well attested, but the scene talks about these four
    assert set(ids) == {"n-key", "n-table", "n-kitchen", "n-door"}
    assert summary["rules"][0]["id"] == "r-locked"
    key = next(e for e in summary["entities"] if e["id"] == "n-key")
    assert key["ref"] == "item:brass key"
    assert key["parent"] == "furniture:wooden table"  # current containment, not the closed one


def test_current_states_come_before_superseded_ones() -> None:
    summary = summarize_graph(_graph(), _scene(), max_items=20)
    states = summary["states"]
    assert [s["id"] for s in states] == ["s-open", "s-closed"]
    assert states[0]["current"] is True and states[1]["current"] is False
    assert states[0]["entity"] == "door:front door"


def test_without_a_scene_centrality_and_evidence_rank() -> None:
    summary = summarize_graph(_graph(), None, max_items=5)
    assert summary["entities"][0]["id"] == "n-hub-00"  # the hub of 29 containment edges
    assert len(summary["entities"] + summary["states"] + summary["rules"]) == 5


def test_render_summary_lists_ids_and_type_name_refs() -> None:
    text = render_summary(summarize_graph(_graph(), _scene(), max_items=8))
    assert "36 nodes" in text and "12 rules" in text
    assert "n-key | item:brass key" in text
    assert "s-open | door_state:front door open | of door:front door, current" in text
    assert "IF the front door is locked THEN going outside fails" in text
    assert "most relevant" in text
    assert len(text.splitlines()) <= 8 + 6  # items plus headings


def test_empty_graph() -> None:
    summary = summarize_graph({"nodes": [], "edges": [], "rules": [], "meta": None}, _scene(), 40)
    assert summary["entities"] == summary["states"] == summary["rules"] == []
    assert "empty" in render_summary(summary)
    assert summarize_graph({}, None, 0)["counts"]["nodes"] == 0


def test_graph_as_dicts_by_id_is_accepted() -> None:
    graph = _graph()
    by_id = {k: {r["id"]: r for r in graph[k]} for k in ("nodes", "edges", "rules")}
    assert summarize_graph(by_id, _scene(), 8) == summarize_graph(graph, _scene(), 8)


def _with_facts() -> dict[str, Any]:
    graph = _graph()
    graph["nodes"] += [_node("n-alice", "alice", "person"), _node("n-acme", "acme", "company"),
                       _node("n-beta", "beta", "company")]
    graph["edges"] += [
        dict(_edge("f-now", "fact", "n-alice", "n-beta"), predicate="works_at", single_valued=True),
        dict(_edge("f-old", "fact", "n-alice", "n-acme", valid_to="2026-01-02"), predicate="works_at",
             single_valued=True),
        dict(_edge("f-key", "fact", "n-key", "n-door"), predicate="opens", single_valued=False),
    ]
    return graph


def test_current_facts_are_listed_for_the_model_to_update() -> None:
    summary = summarize_graph(_with_facts(), _scene(), max_items=20)
    assert summary["counts"]["current_facts"] == 2
    assert [f["id"] for f in summary["facts"]] == ["f-key", "f-now"]  # the scene names the key and the door
    text = render_summary(summary)
    assert "current, 2 of them facts) and 12 rules." in text
    assert "Facts (id | subject predicate object | details):" in text
    assert "- f-now | person:alice works_at company:beta | single-valued, conf 0.90" in text
    assert "- f-key | item:brass key opens door:front door | conf 0.90" in text
    assert "f-old" not in text  # a closed fact is history


def test_without_facts_the_summary_has_no_facts_part() -> None:
    text = render_summary(summarize_graph(_graph(), _scene(), max_items=20))
    assert "Facts" not in text and "facts" not in text
