"""The pure merge engine: identity, drops with reasons, change over time, a text adventure, fuzzing."""

from __future__ import annotations

import copy
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from worldgraph.errors import DeltaValidationError
from worldgraph.kg.ids import edge_id, is_predicate, node_id, rule_id
from worldgraph.kg.records import EDGE_KEYS, NODE_KEYS, RELATIONS, RULE_KEYS, GraphView
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge, referenced, referenced_node_ids

T, ENV = "acme", "JerichoEnv905"


def now(i: int) -> str:
    return f"2026-01-{i:02d}T00:00:00.000000+00:00"


def scene(i: int, reason: str = "new room") -> dict:
    return {"id": f"scene-{i}", "tenant_id": T, "status": "running", "env_name": ENV, "current_round": i,
            "trigger_reason": reason}


def delta(**kw) -> dict:
    return {"entities": [], "states": [], "edges": [], "rules": [], **kw}


def ent(ref, name, typ="item", **kw):
    return {"ref": ref, "name": name, "type": typ, **kw}


def state(ref, name, entity_ref, typ="door_state", **kw):
    return {"ref": ref, "name": name, "type": typ, "entity_ref": entity_ref, **kw}


def edge(rel, src, dst, **kw):
    return {"relation": rel, "src_ref": src, "dst_ref": dst, **kw}


def nid(kind, typ, name):
    return node_id(T, ENV, kind, typ, name)


def load_view(full: GraphView, node_ids: list[str], names: list[str] = ()) -> GraphView:
    """What a store's load_view returns: the named nodes (by id or norm_name), their states, edges
    touching them, the current containment edges above them, every containment edge into a child
    of those, all rules, meta."""
    ids = set(node_ids) | {k for k, v in full.nodes.items() if v.get("norm_name") in set(names)}
    edges = {k: v for k, v in full.edges.items() if v["src_id"] in ids or v["dst_id"] in ids}
    parent = {e["dst_id"]: (k, e) for k, e in full.edges.items()
              if e["relation"] == "containment" and e["valid_to"] is None}
    for start in list(ids):
        node, hops = start, 0
        while node in parent and hops < 64:
            k, e = parent[node]
            edges[k] = e
            node, hops = e["src_id"], hops + 1
    children = {e["dst_id"] for e in edges.values() if e["relation"] == "containment"} - ids
    edges.update({k: e for k, e in full.edges.items() if e["relation"] == "containment" and e["dst_id"] in children})
    return GraphView(
        tenant_id=full.tenant_id, env_name=full.env_name,
        nodes={k: v for k, v in full.nodes.items() if k in ids or v.get("entity_id") in ids},
        edges=edges, rules=dict(full.rules), meta=full.meta,
    )


class World:
    """A store stand-in: the whole graph as a view, merges through a partial view like a store."""

    def __init__(self) -> None:
        self.view = GraphView(tenant_id=T, env_name=ENV)
        self.n = 0

    def merge(self, d: dict, with_scene: bool = True, reason: str = "curious"):
        self.n += 1
        part = load_view(self.view, *referenced(T, ENV, d))
        plan, report = plan_merge(part, d, scene(self.n, reason) if with_scene else None, now(self.n))
        self.view = apply_plan_to_view(self.view, plan)
        return plan, report

    def node(self, kind, typ, name):
        return self.view.nodes[nid(kind, typ, name)]

    def current(self, relation, dst=None):
        return [e for e in self.view.edges.values()
                if e["relation"] == relation and e["valid_to"] is None and (dst is None or e["dst_id"] == dst)]


def reasons(report, kind=None):
    return [d.reason for d in report.dropped if kind is None or d.kind == kind]


# ---------------------------------------------------------------- identity & merging


def test_same_node_by_type_and_normalised_name():
    w = World()
    _, r1 = w.merge(delta(entities=[ent("e1", "The Brass Key.", "Item", attributes={"color": "brass"})]))
    _, r2 = w.merge(delta(entities=[ent("k", "brass key", "item", attributes={"weight": 1, "color": "gold"})]))
    key = nid("entity", "item", "brass key")
    assert r1.created["nodes"] == [key] and r2.merged["nodes"] == [key] and r2.created["nodes"] == []
    rec = w.view.nodes[key]
    assert rec["name"] == "Brass Key" and rec["type"] == "item" and rec["norm_name"] == "brass key"
    assert rec["attributes"] == {"color": "gold", "weight": 1}  # new values win
    assert rec["source_scenes"] == ["scene-1", "scene-2"]


def test_noisy_or_for_independent_scenes_max_for_the_same_scene():
    w = World()
    w.merge(delta(entities=[ent("e", "lamp", confidence=0.6)]))
    w.merge(delta(entities=[ent("e", "lamp", confidence=0.5)]))
    assert w.node("entity", "item", "lamp")["confidence"] == pytest.approx(0.8)  # 1 - 0.4 * 0.5
    # the same scene again is not independent evidence
    plan, _ = plan_merge(w.view, delta(entities=[ent("e", "lamp", confidence=0.9)]), scene(2), now(9))
    assert plan.nodes[0]["confidence"] == pytest.approx(0.9)
    plan, _ = plan_merge(w.view, delta(entities=[ent("e", "lamp", confidence=0.1)]), None, now(9))
    assert plan.nodes[0]["confidence"] == pytest.approx(0.8)  # no scene: max


def test_evidence_is_deduplicated_last_20_kept_all_counted():
    w = World()
    for i in range(25):
        w.merge(delta(entities=[ent("e", "lamp", evidence=[f"seen {i}", "a lamp"])]))
    rec = w.node("entity", "item", "lamp")
    assert rec["evidence"][-1] == "seen 24" and len(rec["evidence"]) == 20 and "seen 4" not in rec["evidence"]
    assert rec["evidence_count"] == 50
    assert len(rec["source_scenes"]) == 25


def test_merging_the_same_delta_and_scene_twice_changes_only_evidence_counts():
    d = adventure()[0]
    view = GraphView(tenant_id=T, env_name=ENV)
    plan1, _ = plan_merge(view, d, scene(1), now(1))
    v1 = apply_plan_to_view(view, plan1)
    plan2, r2 = plan_merge(v1, copy.deepcopy(d), scene(1), now(2))
    v2 = apply_plan_to_view(v1, plan2)
    assert r2.created == r2.closed == r2.reopened == {"nodes": [], "edges": [], "rules": []}

    def strip(records):
        return {k: {f: v for f, v in r.items() if f not in ("evidence_count", "updated_at", "last_seen", "seen")}
                for k, r in records.items()}

    for part in ("nodes", "edges", "rules"):
        assert strip(getattr(v2, part)) == strip(getattr(v1, part)), part
    assert any(v2.nodes[k]["evidence_count"] > v1.nodes[k]["evidence_count"] for k in v1.nodes)
    assert v2.meta["graph_version"] == 2 and v2.meta["counts"] == v1.meta["counts"]


def test_merge_is_deterministic():
    view = GraphView(tenant_id=T, env_name=ENV)
    runs = [plan_merge(view, copy.deepcopy(d), scene(1), now(1)) for d in [adventure()[0]] * 2]
    assert runs[0][0] == runs[1][0] and runs[0][1].to_dict() == runs[1][1].to_dict()


def test_structural_errors_plan_nothing_item_errors_drop_the_item():
    with pytest.raises(DeltaValidationError) as exc:
        plan_merge(GraphView(T, ENV), {"entities": [], "states": [], "edges": "x", "rules": []}, None, now(1))
    assert exc.value.errors == ["edges: must be an array, got string"]
    plan, report = plan_merge(GraphView(T, ENV), delta(entities=[ent("k", "key")], edges=["x", 3]), None, now(1))
    assert [(d.kind, d.index, d.reason) for d in report.dropped] == [
        ("edge", 0, "must be an object, got string"), ("edge", 1, "must be an object, got number")]
    assert len(plan.nodes) == 1


def test_a_string_holding_a_json_object_is_parsed():
    d = delta(entities=[json.dumps(ent("k", "key")), '{"ref": "t", "name": "table"'],
              edges=[json.dumps(edge("containment", "t", "k"))])
    plan, report = plan_merge(GraphView(T, ENV), d, None, now(1))
    assert [n["name"] for n in plan.nodes] == ["key"]
    assert [(d.kind, d.index) for d in report.dropped] == [("entity", 1), ("edge", 0)]
    assert report.dropped[0].reason.startswith("a string that is not a JSON object")
    assert report.dropped[1].reason == "src_ref 't' does not resolve to a node in this delta or the graph"


def test_meta_and_scene():
    w = World()
    plan, report = w.merge(delta(entities=[ent("e", "lamp")]), reason="found a lamp")
    assert plan.scene["status"] == "merged" and plan.scene["id"] == "scene-1" and plan.scene["current_round"] == 1
    assert plan.meta == {"tenant_id": T, "env_name": ENV, "app_name": "general", "graph_version": 1,
                         "updated_at": now(1), "last_trigger_reason": "found a lamp",
                         "counts": {"nodes": 1, "edges": 0, "rules": 0, "scenes": 0}}
    assert report.graph_version == 1
    plan, report = w.merge(delta(entities=[ent("e", "lamp")]), with_scene=False)
    assert plan.meta["graph_version"] == 2 and plan.meta["last_trigger_reason"] == "found a lamp"


def test_a_delta_that_merges_nothing_changes_nothing():
    w = World()
    w.merge(delta(entities=[ent("e", "lamp")]))
    before = copy.deepcopy(w.view)
    fresh = {k: v for k, v in scene(9).items() if k != "status"}  # not stored: nothing is written
    for d, sc, status in ((delta(), None, None), (delta(), fresh, None),
                          (delta(), dict(scene(9), status="running"), "merged"),
                          (delta(edges=[edge("containment", "x", "y")]), dict(scene(9), status="pending"), "failed")):
        plan, report = plan_merge(w.view, d, sc, now(9))
        assert plan.meta is None and plan.size() == 0 and report.graph_version == 1 and report.skipped
        assert (plan.scene or {}).get("status") == status
    assert w.view.meta == before.meta


# ---------------------------------------------------------------- drops and notes


def test_every_drop_reason():
    w = World()
    w.merge(delta(entities=[ent("r", "kitchen", "room")]))
    d = delta(
        entities=[ent("e1", "key"), {"ref": "e2", "type": "item"}, ent("e1", "other key"), ent("e3", "box", "container"),
                  {"ref": "scene", "name": "x", "type": "y"}],
        states=[state("s1", "box open", "e3", "box_state"), state("s2", "box shut", "e3", "box_state")],
        edges=[
            edge("friendship", "e1", "e3"),
            edge("containment", "e3", "e9"),
            edge("containment", "zz", "e1"),
            edge("containment", "e3", "e2"),
            edge("containment", "s1", "e1"),
            edge("transition", "e1", "s1"),
            edge("containment", "e3", "e3"),
            edge("episodic", "e1", "e3"),
            edge("containment", "e3", "scene"),
            edge("episodic", "scene", "scene"),
            edge("containment", "room:kitchen", "e1"),
            edge("containment", "e3", "e1"),
        ],
        rules=[{"condition": "box is open", "outcome": "key visible"}, {"condition": "box is open", "outcome": "box empty"},
               {"outcome": "nothing"}],
    )
    plan, report = w.merge(d)
    assert sorted((x.kind, x.index) for x in report.dropped) == [
        ("edge", 0), ("edge", 1), ("edge", 2), ("edge", 3), ("edge", 4), ("edge", 5), ("edge", 6), ("edge", 7),
        ("edge", 8), ("edge", 9), ("edge", 10), ("entity", 1), ("entity", 2), ("entity", 4), ("rule", 0), ("rule", 2),
    ]
    by = {(x.kind, x.index): x.reason for x in report.dropped}
    assert by[("entity", 1)] == "name: missing (required)"
    assert by[("entity", 2)] == "duplicate ref 'e1': first used by entities[0]"
    assert by[("entity", 4)] == "ref 'scene' is reserved for the update's scene"
    assert by[("edge", 0)].startswith("unknown relation 'friendship'; allowed: containment (parent -> child")
    assert '"relation": "fact", "predicate": "friendship"' in by[("edge", 0)]
    assert by[("edge", 1)] == "dst_ref 'e9' does not resolve to a node in this delta or the graph"
    assert by[("edge", 2)] == "src_ref 'zz' does not resolve to a node in this delta or the graph"
    assert by[("edge", 3)] == "dst_ref 'e2' names entities[1], which was dropped"
    assert by[("edge", 4)] == "containment links entity -> entity (parent -> child); src_ref 's1' is a state"
    assert by[("edge", 5)] == "transition links state -> state; src_ref 'e1' is a entity"
    assert by[("edge", 6)] == "containment from a node to itself"
    assert by[("edge", 7)] == "episodic edges point to the scene: dst_ref must be 'scene', got 'e3'"
    assert by[("edge", 8)] == "dst_ref 'scene' is only valid for episodic edges, not containment"
    assert by[("edge", 9)] == "src_ref 'scene': the scene can only be the dst of an episodic edge"
    assert by[("edge", 10)].startswith("superseded by edges[11]: containment is single-parent")
    assert by[("rule", 0)] == "superseded by rules[1]: same condition, another outcome"
    assert by[("rule", 2)] == "condition: missing (required)"
    assert [e["src_id"] for e in plan.edges] == [nid("entity", "container", "box")]
    assert all(x.item is not None for x in report.dropped)


def test_episodic_edges_need_a_scene():
    d = delta(entities=[ent("e1", "key")], edges=[edge("episodic", "e1", "scene")])
    plan, report = plan_merge(GraphView(T, ENV), d, None, now(1))
    assert reasons(report) == ["episodic edge needs a scene, and this update has none"] and plan.edges == []
    plan, report = plan_merge(GraphView(T, ENV), d, scene(1), now(1))
    assert report.dropped == [] and plan.edges[0]["dst_id"] == "scene-1" and plan.edges[0]["valid_to"] is None


def test_unresolved_entity_ref_keeps_the_state_with_a_note():
    plan, report = plan_merge(GraphView(T, ENV), delta(states=[state("s1", "door open", "e404")]), scene(1), now(1))
    assert plan.nodes[0]["entity_id"] is None and plan.nodes[0]["valid_to"] is None and report.dropped == []
    assert [(n.kind, n.index, n.reason) for n in report.notes] == [
        ("state", 0, "entity_ref 'e404' does not resolve to a node in this delta or the graph; state kept without that entity")]


def test_rule_linked_refs_resolve_or_are_noted():
    w = World()
    w.merge(delta(entities=[ent("d", "front door", "door")]))
    _, report = w.merge(delta(entities=[ent("k", "key")], rules=[{
        "condition": "door locked", "outcome": "cannot leave", "linked_refs": ["door:front door", "k", "ghost", {"x": 1}]}]))
    rule = w.view.rules[rule_id(T, ENV, "door locked", "cannot leave")]
    assert rule["linked_node_ids"] == [nid("entity", "door", "front door"), nid("entity", "item", "key")]
    assert [n.reason for n in report.notes] == [
        "linked_refs[3]: must be a string, got object; ignored",
        "linked ref 'ghost' does not resolve to a node in this delta or the graph; left out of linked_node_ids"]


def test_refs_by_id_and_type_name_across_runs():
    w = World()
    w.merge(delta(entities=[ent("a", "chest", "container"), ent("b", "coin")]))
    chest = nid("entity", "container", "chest")
    d = delta(edges=[edge("containment", chest, "item:The Coin")])
    assert set(referenced_node_ids(T, ENV, d)) >= {chest, nid("entity", "item", "coin"), nid("state", "item", "coin")}
    _, report = w.merge(d)
    assert report.dropped == [] and len(report.created["edges"]) == 1


# ---------------------------------------------------------------- change over time


def test_containment_move_closes_the_old_edge_and_a_return_is_a_new_record():
    w = World()
    w.merge(delta(entities=[ent("t", "table", "furniture"), ent("k", "key")], edges=[edge("containment", "t", "k")]))
    w.merge(delta(entities=[ent("p", "player", "character"), ent("k", "key")], edges=[edge("containment", "p", "k")]))
    key, table, player = nid("entity", "item", "key"), nid("entity", "furniture", "table"), nid("entity", "character", "player")
    old = w.view.edges[edge_id(T, ENV, "containment", table, key, None, 0)]
    assert old["valid_to"] == now(2) and old["valid_from"] == now(1)
    assert [e["src_id"] for e in w.current("containment", key)] == [player]
    _, report = w.merge(delta(edges=[edge("containment", "furniture:table", "item:key")]))
    again = edge_id(T, ENV, "containment", table, key, None, 1)
    assert report.created["edges"] == [again] and w.view.edges[again]["occurrence"] == 1
    assert [e["id"] for e in w.current("containment", key)] == [again]
    assert old["valid_to"] == now(2)  # history untouched
    assert len([e for e in w.view.edges.values() if e["dst_id"] == key]) == 3


def test_a_new_state_closes_the_entitys_current_state_of_that_type():
    w = World()
    w.merge(delta(entities=[ent("d", "door", "door")], states=[state("s", "door closed", "d")]))
    _, report = w.merge(delta(entities=[ent("d", "door", "door")], states=[
        state("s0", "door closed", "d"), state("s1", "door open", "d"), state("l", "door unlocked", "d", "lock_state")],
        edges=[edge("transition", "s0", "s1", action="open door")]))
    closed, opened = w.node("state", "door_state", "door closed"), w.node("state", "door_state", "door open")
    assert closed["valid_to"] == now(2) and opened["valid_to"] is None
    assert w.node("state", "lock_state", "door unlocked")["valid_to"] is None  # another state type stays
    assert report.closed["nodes"] == [closed["id"]]
    # closing the door again reopens the closed state (identity kept) and closes the open one
    _, report = w.merge(delta(edges=[edge("transition", "door_state:door open", "door_state:door closed", action="close door")]))
    closed, opened = w.node("state", "door_state", "door closed"), w.node("state", "door_state", "door open")
    assert closed["valid_to"] is None and closed["valid_from"] == now(3) and opened["valid_to"] == now(3)
    assert report.reopened["nodes"] == [closed["id"]] and report.closed["nodes"] == [opened["id"]]


def test_rules_merge_when_similar_and_close_when_contradicted():
    w = World()
    w.merge(delta(rules=[{"condition": "The front door is locked.", "outcome": "going outside fails", "confidence": 0.5}]))
    _, report = w.merge(delta(rules=[{"condition": "front door is locked", "outcome": "Going outside fails!", "confidence": 0.5}]))  # noqa: E501
    first = rule_id(T, ENV, "front door is locked", "going outside fails")
    assert report.merged["rules"] == [first] and len(w.view.rules) == 1
    assert w.view.rules[first]["confidence"] == pytest.approx(0.75)
    # Jaccard >= 0.8 on both texts merges too
    _, report = w.merge(delta(rules=[{"condition": "when the front door is locked", "outcome": "going outside fails"}]))
    assert report.merged["rules"] == [first]
    _, report = w.merge(delta(rules=[{"condition": "the front door is locked", "outcome": "you ring the bell instead"}]))
    second = rule_id(T, ENV, "front door is locked", "you ring the bell instead")
    assert report.created["rules"] == [second] and report.closed["rules"] == [first]
    assert w.view.rules[first]["valid_to"] == now(4) and w.view.rules[second]["valid_to"] is None
    # an unrelated rule changes nothing
    _, report = w.merge(delta(rules=[{"condition": "the lamp is lit", "outcome": "you can read"}]))
    assert report.closed["rules"] == [] and len([r for r in w.view.rules.values() if r["valid_to"] is None]) == 2


# ---------------------------------------------------------------- a text adventure


def adventure() -> list[dict]:
    return [
        # 1. kitchen: a table with a key, a locked front door to the hall
        delta(entities=[ent("k", "kitchen", "room"), ent("h", "hall", "room"), ent("t", "table", "furniture"),
                        ent("key", "brass key", attributes={"color": "brass"}, evidence="You see a brass key."),
                        ent("p", "player", "character"), ent("d", "front door", "door")],
              states=[state("dc", "front door closed", "d")],
              edges=[edge("containment", "k", "t"), edge("containment", "t", "key"), edge("containment", "k", "p"),
                     edge("episodic", "key", "scene")],
              rules=[{"condition": "the front door is closed", "outcome": "you cannot enter the hall", "linked_refs": ["d"]}]),
        # 2. take key
        delta(edges=[edge("containment", "character:player", "item:brass key", evidence="Taken.")]),
        # 3. open door
        delta(states=[state("s0", "front door closed", "door:front door"), state("s1", "front door open", "door:front door")],
              edges=[edge("transition", "s0", "s1", action="open door")],
              rules=[{"condition": "the front door is closed", "outcome": "opening it with the key works"}]),
        # 4. go to the hall
        delta(entities=[ent("h", "Hall", "room"), ent("p", "Player", "character")], edges=[edge("containment", "h", "p")]),
        # 5. close the door behind you, drop the key
        delta(states=[state("o", "front door open", "door:front door"), state("c", "front door closed", "door:front door")],
              edges=[edge("transition", "o", "c", action="close door"), edge("containment", "room:hall", "item:brass key")]),
        # 6. back in the kitchen, the key goes back on the table (another interval of an old fact)
        delta(edges=[edge("containment", "room:kitchen", "character:player"),
                     edge("containment", "furniture:table", "item:brass key")]),
    ]


def test_text_adventure_ends_in_the_right_state_with_history():
    w = World()
    for d in adventure():
        _, report = w.merge(d)
        assert report.dropped == [] and report.notes == [], report.to_dict()
    key, player = nid("entity", "item", "brass key"), nid("entity", "character", "player")
    table, hall, kitchen = nid("entity", "furniture", "table"), nid("entity", "room", "hall"), nid("entity", "room", "kitchen")

    def holders(child):
        return sorted((e["valid_from"], e["valid_to"], e["src_id"], e["occurrence"])
                      for e in w.view.edges.values() if e["relation"] == "containment" and e["dst_id"] == child)

    assert holders(key) == [(now(1), now(2), table, 0), (now(2), now(5), player, 0),
                            (now(5), now(6), hall, 0), (now(6), None, table, 1)]
    assert holders(player) == [(now(1), now(4), kitchen, 0), (now(4), now(6), hall, 0), (now(6), None, kitchen, 1)]
    door_closed, door_open = w.node("state", "door_state", "front door closed"), w.node("state", "door_state", "front door open")
    assert door_closed["valid_to"] is None and door_closed["valid_from"] == now(5)
    assert door_open["valid_to"] == now(5) and door_open["valid_from"] == now(3)
    door = nid("entity", "door", "front door")
    assert door_closed["entity_id"] == door_open["entity_id"] == door
    transitions = sorted((e["action"], e["valid_to"]) for e in w.view.edges.values() if e["relation"] == "transition")
    assert transitions == [("close door", None), ("open door", None)]
    current_rules = [r["outcome"] for r in w.view.rules.values() if r["valid_to"] is None]
    assert current_rules == ["opening it with the key works"] and len(w.view.rules) == 2
    assert w.view.meta["graph_version"] == 6 and w.view.meta["counts"] == {"nodes": 8, "edges": 11, "rules": 2, "scenes": 6}
    assert w.node("entity", "room", "hall")["name"] == "hall"  # first-seen name kept


# ---------------------------------------------------------------- fuzzing

REFS = ["e1", "e2", "s1", "s2", "scene", "item:key", "room:hall", "door_state:open", "nope", "", "1", "scene-2"]
ODD = [None, True, False, 0, -1, 7, 1.5, -0.2, float("nan"), float("inf"), "", " ", "x", "Ünïcødé 前门", "0.9", "50%",
       [], {}, [1, "a", None], [[1]], {"a": 1}, {"a": {"b": [1]}}, {"key": "k", "value": 1},
       [{"key": "color", "value": "red"}], ["e1", "e2"], ["e1", {"x": 1}]]
GOOD_REFS = ["e1", "e2", "s1", "s2", "scene", "item:key", "room:hall", "door_state:open"]
FIELDS = {
    "entities": {"ref": ["e1", "e2", "e3"], "name": ["key", "The Key.", "hall", "open", "box"], "type": ["item", "room", "door_state"],  # noqa: E501
                 "attributes": [{"color": "red"}, {"n": [1, 2]}], "evidence": ["seen", ["a", "b"]], "confidence": [0.3, 0.9]},
    "edges": {"relation": [*RELATIONS, *RELATIONS, "friendship", "CONTAINMENT"], "src_ref": GOOD_REFS, "dst_ref": GOOD_REFS,
              "action": ["open", "take"], "predicate": ["works_at", "Located Near", "bad pred!", "near"],
              "single_valued": [True, False, "yes"], "evidence": ["seen"], "confidence": [0.4, 2]},
    "rules": {"condition": ["door locked", "the door is locked", "lamp lit"],
              "outcome": ["cannot leave", "you cannot leave", "can read"], "linked_refs": [REFS[:3], REFS[5:9]],
              "evidence": ["seen"], "confidence": [0.6]},
}
FIELDS["states"] = {**FIELDS["entities"], "ref": ["s1", "s2", "s3"], "entity_ref": REFS}
ABUSIVE = [
    {"entities": [{"name": "x", "type": "y"}] * 501, "states": [], "edges": [], "rules": []},
    {"entities": [{"name": "x" * 5000, "type": "y"}], "states": [], "edges": [], "rules": []},
    {"entities": [{"name": "x", "type": "y", "attributes": json.loads("[" * 20 + "]" * 20)}], "states": [], "edges": [], "rules": []},  # noqa: E501
    "[" * 3000 + "]" * 3000,
    '{"entities": [], "states": [], "edges": [], "rules": [',
]


def garbage(rng: random.Random) -> object:
    """A delta from ``rng``: mostly plausible items with wrong types, bad refs and unknown
    relations mixed in; sometimes plain garbage, abusive sizes, or the same as JSON text."""
    roll = rng.random()
    if roll < 0.05:
        return copy.deepcopy(rng.choice(ABUSIVE))
    if roll < 0.12:
        return copy.deepcopy(rng.choice(ODD))
    d: dict = {}
    for key, fields in FIELDS.items():
        if rng.random() < 0.02:
            if rng.random() < 0.5:
                d[key] = copy.deepcopy(rng.choice(ODD))
            continue  # missing key
        arr = []
        for _ in range(rng.randrange(10 if key == "edges" else 5)):
            if rng.random() < 0.015:
                arr.append(copy.deepcopy(rng.choice(ODD)))
                continue
            item = {}
            for name, good in fields.items():
                r = rng.random()
                if r < 0.92:
                    item[name] = copy.deepcopy(rng.choice(good))
                elif r < 0.97:
                    item[name] = copy.deepcopy(rng.choice(ODD))
            arr.append(item)
        d[key] = arr
    if rng.random() < 0.1:
        return json.dumps(d)
    return d


def seeded_view() -> GraphView:
    w = World()
    w.merge(delta(entities=[ent("e1", "key"), ent("e2", "hall", "room")],
                  states=[state("s1", "open", "e2")], edges=[edge("containment", "e2", "e1")]))
    return w.view


SEEDED = seeded_view()


@settings(max_examples=2200, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(seed=st.integers(0, 2**32 - 1), with_scene=st.booleans())
def test_garbage_deltas_never_write_dirty_data(seed, with_scene):
    d = garbage(random.Random(seed))
    sc = scene(2) if with_scene else None
    try:
        plan, report = plan_merge(SEEDED, copy.deepcopy(d), sc, now(2))
    except DeltaValidationError as exc:
        assert exc.errors and all(isinstance(e, str) and ":" in e for e in exc.errors)
        return
    nodes = {**SEEDED.nodes, **{n["id"]: n for n in plan.nodes}}
    for n in plan.nodes:
        assert all(k in n for k in NODE_KEYS) and n["kind"] in ("entity", "state")
        assert 0.0 <= n["confidence"] <= 1.0 and isinstance(n["attributes"], dict)
        assert n["entity_id"] is None or nodes[n["entity_id"]]["kind"] == "entity"
    for e in plan.edges:
        assert all(k in e for k in EDGE_KEYS) and e["relation"] in RELATIONS
        assert e["src_id"] in nodes
        if e["relation"] == "episodic":
            assert sc is not None and e["dst_id"] == sc["id"]
        else:
            want = "entity" if e["relation"] in ("containment", "fact") else "state"
            assert nodes[e["src_id"]]["kind"] == nodes[e["dst_id"]]["kind"] == want
        assert ("predicate" in e) == (e["relation"] == "fact")
        if e["relation"] == "fact":
            assert is_predicate(e["predicate"]) and isinstance(e["single_valued"], bool)
    for r in plan.rules:
        assert all(k in r for k in RULE_KEYS) and set(r["linked_node_ids"]) <= set(nodes)
    for x in report.dropped:
        assert x.kind in ("entity", "state", "edge", "rule") and x.reason
    after = apply_plan_to_view(SEEDED, plan)
    children = [e["dst_id"] for e in after.edges.values() if e["relation"] == "containment" and e["valid_to"] is None]
    assert len(children) == len(set(children))  # single parent
    single = [(e["src_id"], e["predicate"]) for e in after.edges.values()
              if e["relation"] == "fact" and e["single_valued"] and e["valid_to"] is None]
    assert len(single) == len(set(single))  # one current object of a single-valued predicate
    json.dumps(plan.nodes + plan.edges + plan.rules, allow_nan=False)  # JSON-clean
    if seed % 4:
        return
    # same inputs, same plan; merging it again creates nothing new
    assert plan_merge(SEEDED, copy.deepcopy(d), sc, now(2))[0] == plan
    again, report2 = plan_merge(after, copy.deepcopy(d), sc, now(3))
    assert report2.created == {"nodes": [], "edges": [], "rules": []}
    assert report2.closed == {"nodes": [], "edges": [], "rules": []}
