"""The merge on the timeline: any merge order gives the in-order graph; retraction; refs by
normalised name; no containment cycles."""

from __future__ import annotations

import copy
import random

import pytest

from tests.unit.world.test_merge import ENV, T, World, delta, edge, ent, nid, now, scene, state
from worldgraph.kg.records import GraphView
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge, referenced_node_ids


def timed_scene(i: int) -> dict:
    return dict(scene(i), created_at=now(i))


def canonical(view: GraphView) -> dict:
    """What a user sees of a graph, without merge bookkeeping (ids of edge records, evidence order,
    merge times): every node's run, every edge interval, every rule's run."""
    nodes = sorted((n["id"], n["name"], n["valid_from"], n["valid_to"], n.get("entity_id")) for n in view.nodes.values())
    edges = sorted((e["relation"], e["src_id"], e["dst_id"], e.get("action") or "", e["valid_from"], e["valid_to"] or "")
                   for e in view.edges.values())
    rules = sorted((r["id"], r["valid_from"], r["valid_to"] or "") for r in view.rules.values())
    return {"nodes": nodes, "edges": edges, "rules": rules}


def merge_in(order: list[int], deltas: list[dict]) -> GraphView:
    view = GraphView(tenant_id=T, env_name=ENV)
    for k, i in enumerate(order):
        plan, _ = plan_merge(view, copy.deepcopy(deltas[i]), timed_scene(i + 1), now(20 + k))
        view = apply_plan_to_view(view, plan)
    return view


def wandering_world(rng: random.Random, rounds: int = 16) -> list[dict]:
    """Rounds of a small world, each delta self-contained as an oracle's would be (it declares
    what it names, and restates what is visible: repeated facts): a key moves between places, the
    player between rooms, a door opens and closes (sometimes as a transition), an apple is eaten."""
    places = [("room", "kitchen"), ("furniture", "table"), ("character", "player"), ("room", "hall")]
    where, room, door, apple = rng.choice(places), "kitchen", "closed", "table"
    out = []
    for _ in range(rounds):
        before = door
        if rng.random() < 0.5:
            where = rng.choice([p for p in places if p != where])
        if rng.random() < 0.3:
            room = "hall" if room == "kitchen" else "kitchen"
        if rng.random() < 0.3:
            door = "open" if door == "closed" else "closed"
        d = delta(entities=[ent("p", where[1], where[0]), ent("k", "key"), ent("d", "door", "door"),
                            ent("me", "player", "character"), ent("r", room, "room")],
                  states=[state("s", f"door {door}", "d")],
                  edges=[edge("containment", "p", "k"), edge("containment", "r", "me")])
        if before != door and rng.random() < 0.5:
            d["states"].append(state("s0", f"door {before}", "d"))
            d["states"].reverse()  # the old state first, the new one wins
            d["edges"].append(edge("transition", "s0", "s", action=f"{'open' if door == 'open' else 'close'} door"))
        if apple == "table" and rng.random() < 0.15:
            apple = "eaten"
            d["entities"].append({"name": "apple", "type": "food", "retract": True})
        elif apple == "table":
            d["entities"] += [ent("a", "apple", "food"), ent("t", "table", "furniture")]
            d["edges"].append(edge("containment", "t", "a"))
        out.append(d)
    return out


@pytest.mark.parametrize("seed", range(16))
def test_any_merge_order_gives_the_in_order_graph(seed: int) -> None:
    rng = random.Random(seed)
    deltas = wandering_world(rng)
    in_order = canonical(merge_in(list(range(len(deltas))), deltas))
    for _ in range(3):
        order = list(range(len(deltas)))
        rng.shuffle(order)
        assert canonical(merge_in(order, deltas)) == in_order, order


def test_a_late_fact_a_newer_round_contradicted_enters_as_closed_history() -> None:
    deltas = [delta(entities=[ent("t", "table", "furniture"), ent("k", "key")], edges=[edge("containment", "t", "k")]),
              delta(entities=[ent("p", "player", "character"), ent("k", "key")], edges=[edge("containment", "p", "k")])]
    view = merge_in([1, 0], deltas)
    key = nid("entity", "item", "key")
    holders = sorted((e["valid_from"], e["valid_to"], view.nodes[e["src_id"]]["name"])
                     for e in view.edges.values() if e["dst_id"] == key)
    assert holders == [(now(1), now(2), "table"), (now(2), None, "player")]


# ---------------------------------------------------------------- retraction


def test_retracting_an_entity_closes_it_and_its_edges() -> None:
    w = World()
    w.merge(delta(entities=[ent("p", "player", "character"), ent("a", "apple", "food")],
                  edges=[edge("containment", "p", "a")]))
    _, report = w.merge(delta(entities=[{"name": "The Apple", "type": "food", "retract": True}]))
    apple = w.node("entity", "food", "apple")
    assert apple["valid_to"] == now(2) and report.dropped == []
    assert w.current("containment") == [] and report.closed["nodes"] == [apple["id"]]
    assert len(report.closed["edges"]) == 1
    # retracting it again: it is not current any more
    _, report = w.merge(delta(entities=[{"name": "apple", "type": "food", "retract": True}]))
    assert report.dropped[0].reason.startswith("retract: entity 'apple' is not current")
    # seen again later: reopened
    _, report = w.merge(delta(entities=[ent("a", "apple", "food")]))
    assert w.node("entity", "food", "apple")["valid_to"] is None and report.reopened["nodes"] == [apple["id"]]


def test_retracting_an_edge_and_what_is_not_current() -> None:
    w = World()
    w.merge(delta(entities=[ent("t", "table", "furniture"), ent("k", "key")], edges=[edge("containment", "t", "k")]))
    _, report = w.merge(delta(edges=[edge("containment", "furniture:table", "key", retract=True)]))
    assert report.dropped == [] and len(report.closed["edges"]) == 1 and w.current("containment") == []
    _, report = w.merge(delta(edges=[edge("containment", "table", "key", retract=True),
                                     edge("containment", "table", "nothing", retract=True)]))
    assert sorted(d.reason.split(" holds")[0] for d in report.dropped) == [
        "dst_ref 'nothing' does not resolve to a node in this delta or the graph",
        "retract: no containment edge 'table' -> 'key'"]
    assert report.graph_version == 2  # nothing merged: no bump


def test_retracting_a_state() -> None:
    w = World()
    w.merge(delta(entities=[ent("d", "door", "door")], states=[state("s", "door open", "d")]))
    w.merge(delta(states=[{"name": "door open", "type": "door_state", "retract": True}]))
    assert w.node("state", "door_state", "door open")["valid_to"] == now(2)


# ---------------------------------------------------------------- refs


def test_refs_and_names_are_normalised_within_a_delta() -> None:
    w = World()
    _, report = w.merge(delta(entities=[ent("The BRASS KEY", "The BRASS KEY"), ent("T1", "Kitchen  Table", "furniture")],
                              edges=[edge("containment", "t1", "brass key"), edge("episodic", "the brass key", "SCENE")]))
    assert report.dropped == [] and len(report.created["edges"]) == 2
    key = w.node("entity", "item", "brass key")
    assert key["name"] == "BRASS KEY" and w.node("entity", "furniture", "kitchen table")["name"] == "Kitchen Table"
    w.merge(delta(entities=[ent("k", "brass key")]))
    assert w.node("entity", "item", "brass key")["name"] == "brass key"  # capitals give way


def test_existing_nodes_resolve_by_name_alone_when_unique() -> None:
    w = World()
    w.merge(delta(entities=[ent("k", "key"), ent("t", "table", "furniture"), ent("b", "box", "container"),
                            ent("b2", "box", "item")]))
    d = delta(edges=[edge("containment", "The Table", "KEY"), edge("containment", "box", "key")])
    assert set(referenced_node_ids(T, ENV, d)) == set()  # names are looked up by the store (load_view names=)
    _, report = w.merge(d)
    assert len(report.created["edges"]) == 1
    assert report.dropped[0].reason.startswith("src_ref 'box' names 2 nodes (container:box, item:box); use type:name")


# ---------------------------------------------------------------- cycles


def test_containment_never_forms_a_cycle_the_newer_edge_wins() -> None:
    w = World()
    w.merge(delta(entities=[ent("r", "room", "room"), ent("box", "box", "container"), ent("bag", "bag", "container"),
                            ent("pouch", "pouch", "container")],
                  edges=[edge("containment", "r", "box"), edge("containment", "box", "bag"),
                         edge("containment", "bag", "pouch")]))
    _, report = w.merge(delta(edges=[edge("containment", "pouch", "box")]))
    current = {(w.view.nodes[e["src_id"]]["name"], w.view.nodes[e["dst_id"]]["name"]) for e in w.current("containment")}
    # the newest edge (pouch holds box) wins: box -> bag, the cycle's edge out of the box, closes;
    # the box left the room for the pouch (single parent)
    assert current == {("pouch", "box"), ("bag", "pouch")}
    assert any("containment cycle" in n.reason for n in report.notes)
    # walk up from every node: never back to itself
    parent = {e["dst_id"]: e["src_id"] for e in w.current("containment")}
    for start in parent:
        seen, node = {start}, parent.get(start)
        while node is not None:
            assert node not in seen
            seen.add(node)
            node = parent.get(node)


def test_merging_a_cycle_breaking_delta_again_reports_nothing_closed() -> None:
    """The delta's two edges close a cycle with the hall holding the key; the tie at the update
    time goes the same way each time, so merging the delta again ends where it was: the edge a
    relayout reopened and the break closed again is reported as neither."""
    w = World()
    w.merge(delta(entities=[ent("h", "hall", "room"), ent("k", "key")], edges=[edge("containment", "h", "k")]))
    cycle = delta(entities=[ent("o", "open", "room")],
                  edges=[edge("containment", "item:key", "o"), edge("containment", "o", "room:hall")])
    _, first = w.merge(cycle)
    before = {(e["src_id"], e["dst_id"]) for e in w.current("containment")}
    _, again = w.merge(cycle)
    assert any("containment cycle" in n.reason for n in first.notes + again.notes)
    assert {(e["src_id"], e["dst_id"]) for e in w.current("containment")} == before
    assert again.closed["edges"] == [] and again.reopened["edges"] == [] and again.created["edges"] == []


def test_a_cycle_within_one_delta_keeps_the_later_edge() -> None:
    w = World()
    _, report = w.merge(delta(entities=[ent("box", "box", "container"), ent("bag", "bag", "container")],
                              edges=[edge("containment", "box", "bag"), edge("containment", "bag", "box")]))
    assert [(d.index, d.reason) for d in report.dropped] == [
        (0, "would close a containment cycle with edges[1] of this delta; the later edge wins")]
    assert [(w.view.nodes[e["src_id"]]["name"], w.view.nodes[e["dst_id"]]["name"]) for e in w.current("containment")] \
        == [("bag", "box")]


def test_repeated_items_merge_once_with_a_note() -> None:
    w = World()
    _, report = w.merge(delta(entities=[ent("k", "key", evidence="a"), ent("k", "key", evidence="a")]))
    assert report.dropped == [] and [n.reason for n in report.notes] == ["repeats entities[0]; merged once"]
    assert w.node("entity", "item", "key")["evidence_count"] == 1
