"""Facts of any kind: ``{"relation": "fact", "predicate": ..., "single_valued": ...}`` edges between
two entities, merged with evidence, identity, single-valued predicates on the timeline, retraction
and the reasons a bad one is dropped."""

from __future__ import annotations

import copy
import random

import pytest

from tests.unit.world.test_merge import ENV, T, World, delta, edge, ent, nid, now, scene
from tests.unit.world.test_merge_time import canonical
from worldgraph.kg.ids import edge_id
from worldgraph.kg.records import GraphView
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge


def fact(src: str, predicate: str, dst: str, **kw):
    return edge("fact", src, dst, predicate=predicate, **kw)


def people(*names: str) -> list[dict]:
    return [ent(n, n, "person" if n in ("alice", "bob") else "company") for n in names]


def facts(view: GraphView, predicate: str | None = None, current: bool = True) -> list[tuple[str, str, str]]:
    """(subject, predicate, object) names of the fact edges, current ones (or all)."""
    name = {k: v["name"] for k, v in view.nodes.items()}
    return sorted((name[e["src_id"]], e["predicate"], name[e["dst_id"]]) for e in view.edges.values()
                  if e["relation"] == "fact" and (predicate is None or e["predicate"] == predicate)
                  and (not current or e["valid_to"] is None))


ALICE, ACME, BETA = nid("entity", "person", "alice"), nid("entity", "company", "acme"), nid("entity", "company", "beta")


def test_a_fact_merges_with_its_predicate_and_evidence_and_an_id_that_holds_the_predicate() -> None:
    w = World()
    _, r1 = w.merge(delta(entities=people("alice", "acme"),
                          edges=[fact("alice", "works_at", "acme", evidence="Alice works at Acme.", confidence=0.8)]))
    assert r1.dropped == [] and r1.notes == []
    eid = edge_id(T, ENV, "fact", ALICE, ACME, "works_at", 0)
    assert r1.created["edges"] == [eid]
    rec = w.view.edges[eid]
    assert (rec["relation"], rec["predicate"], rec["single_valued"], rec["action"]) == ("fact", "works_at", False, None)
    assert rec["evidence"] == ["Alice works at Acme."] and rec["valid_to"] is None
    # the same fact again: evidence only, no new record
    _, r2 = w.merge(delta(entities=people("alice", "acme"), edges=[fact("Alice", "Works At", "ACME", evidence="again")]))
    assert r2.created["edges"] == [] and r2.merged["edges"] == [eid]
    assert w.view.edges[eid]["evidence_count"] == 2 and len([e for e in w.view.edges.values()
                                                              if e["relation"] == "fact"]) == 1
    # another predicate between the same ends is another fact
    _, r3 = w.merge(delta(edges=[fact("alice", "owns_shares_in", "acme")]))
    assert r3.created["edges"] == [edge_id(T, ENV, "fact", ALICE, ACME, "owns_shares_in", 0)]
    assert facts(w.view) == [("alice", "owns_shares_in", "acme"), ("alice", "works_at", "acme")]


def test_a_single_valued_predicate_closes_the_subjects_previous_fact_of_that_predicate() -> None:
    w = World()
    w.merge(delta(entities=people("alice", "bob", "acme", "beta"),
                  edges=[fact("alice", "works_at", "acme", single_valued=True),
                         fact("bob", "works_at", "acme", single_valued=True),
                         fact("alice", "knows", "bob"), fact("alice", "customer_of", "acme")]))
    _, report = w.merge(delta(edges=[fact("alice", "works_at", "beta", single_valued=True)]))
    old = w.view.edges[edge_id(T, ENV, "fact", ALICE, ACME, "works_at", 0)]
    assert old["valid_to"] == now(2) and report.closed["edges"] == [old["id"]]
    # only that subject and that predicate: bob still works at acme, alice is still a customer
    assert facts(w.view) == [("alice", "customer_of", "acme"), ("alice", "knows", "bob"),
                             ("alice", "works_at", "beta"), ("bob", "works_at", "acme")]
    assert facts(w.view, "works_at", current=False) == [("alice", "works_at", "acme"), ("alice", "works_at", "beta"),
                                                        ("bob", "works_at", "acme")]


def test_a_multi_valued_predicate_keeps_every_object() -> None:
    w = World()
    w.merge(delta(entities=people("alice", "acme", "beta"), edges=[fact("alice", "customer_of", "acme")]))
    w.merge(delta(entities=people("beta"), edges=[fact("alice", "customer_of", "beta")]))
    assert facts(w.view) == [("alice", "customer_of", "acme"), ("alice", "customer_of", "beta")]


def test_once_single_valued_a_subjects_predicate_stays_so() -> None:
    """A model that forgets the flag once does not give alice two employers."""
    w = World()
    w.merge(delta(entities=people("alice", "acme", "beta"), edges=[fact("alice", "works_at", "acme", single_valued=True)]))
    _, report = w.merge(delta(edges=[fact("alice", "works_at", "beta")]))
    assert facts(w.view) == [("alice", "works_at", "beta")] and len(report.closed["edges"]) == 1
    assert all(e["single_valued"] for e in w.view.edges.values() if e["relation"] == "fact")


def test_a_flag_turns_earlier_multi_valued_facts_into_runs() -> None:
    w = World()
    w.merge(delta(entities=people("alice", "acme", "beta"), edges=[fact("alice", "works_at", "acme")]))
    w.merge(delta(edges=[fact("alice", "works_at", "beta", single_valued="yes")]))
    assert facts(w.view) == [("alice", "works_at", "beta")]
    assert all(e["single_valued"] for e in w.view.edges.values() if e["relation"] == "fact")


def test_within_one_delta_the_last_object_of_a_single_valued_predicate_wins() -> None:
    w = World()
    _, report = w.merge(delta(entities=people("alice", "acme", "beta"),
                              edges=[fact("alice", "works_at", "acme", single_valued=True),
                                     fact("alice", "works_at", "beta", single_valued=True)]))
    assert [(d.index, d.reason) for d in report.dropped] == [
        (0, "superseded by edges[1]: 'works_at' is single-valued, the last object given for a subject wins")]
    assert facts(w.view) == [("alice", "works_at", "beta")]


def test_one_flag_in_a_delta_makes_the_subjects_predicate_single_valued_for_all_its_items() -> None:
    w = World()
    _, report = w.merge(delta(entities=people("alice", "acme", "beta"),
                              edges=[fact("alice", "works_at", "acme"), fact("alice", "works_at", "beta", single_valued=True)]))
    assert [d.index for d in report.dropped] == [0] and facts(w.view) == [("alice", "works_at", "beta")]


def test_going_back_to_an_old_object_keeps_every_interval() -> None:
    w = World()
    w.merge(delta(entities=people("alice", "acme", "beta"), edges=[fact("alice", "works_at", "acme", single_valued=True)]))
    w.merge(delta(edges=[fact("alice", "works_at", "beta", single_valued=True)]))
    _, report = w.merge(delta(edges=[fact("alice", "works_at", "acme", single_valued=True)]))
    runs = sorted((w.view.nodes[e["dst_id"]]["name"], e["occurrence"], e["valid_from"], e["valid_to"])
                  for e in w.view.edges.values() if e["relation"] == "fact")
    assert runs == [("acme", 0, now(1), now(2)), ("acme", 1, now(3), None), ("beta", 0, now(2), now(3))]
    assert report.created["edges"] == [edge_id(T, ENV, "fact", ALICE, ACME, "works_at", 1)]


def test_a_late_fact_lands_where_its_time_says() -> None:
    """Merged out of order, a fact a newer round already contradicted enters as closed history."""
    d1 = delta(entities=people("alice", "acme"), edges=[fact("alice", "works_at", "acme", single_valued=True)])
    d2 = delta(entities=people("alice", "beta"), edges=[fact("alice", "works_at", "beta", single_valued=True)])
    view = GraphView(tenant_id=T, env_name=ENV)
    for i, d in ((2, d2), (1, d1)):  # round 2 merges first
        plan, _ = plan_merge(view, copy.deepcopy(d), dict(scene(i), created_at=now(i)), now(10 + i))
        view = apply_plan_to_view(view, plan)
    runs = sorted((view.nodes[e["dst_id"]]["name"], e["valid_from"], e["valid_to"]) for e in view.edges.values())
    assert runs == [("acme", now(1), now(2)), ("beta", now(2), None)]


@pytest.mark.parametrize("seed", range(8))
def test_any_merge_order_gives_the_in_order_graph(seed: int) -> None:
    """(Assertions only: a retraction that arrives before the assertions it ends is dropped as
    "not current", for every relation and node alike.)"""
    rng = random.Random(seed)
    firms = ["acme", "beta", "gamma"]
    deltas = []
    for _ in range(12):
        d = delta(entities=people("alice", "bob") + people(*firms))
        d["edges"] = [fact("alice", "works_at", rng.choice(firms), single_valued=rng.random() < 0.8),
                      fact("bob", "customer_of", rng.choice(firms))]
        if rng.random() < 0.2:
            d["edges"].append(fact("alice", "knows", "bob"))
        deltas.append(d)

    def merge_in(order: list[int]) -> GraphView:
        view = GraphView(tenant_id=T, env_name=ENV)
        for k, i in enumerate(order):
            plan, _ = plan_merge(view, copy.deepcopy(deltas[i]), dict(scene(i + 1), created_at=now(i + 1)), now(20 + k))
            view = apply_plan_to_view(view, plan)
        return view

    in_order = merge_in(list(range(len(deltas))))
    current = [e for e in in_order.edges.values() if e["relation"] == "fact" and e["valid_to"] is None
               and e["predicate"] == "works_at"]
    assert len(current) == 1  # single-valued at the end
    for _ in range(3):
        order = list(range(len(deltas)))
        rng.shuffle(order)
        assert canonical(merge_in(order)) == canonical(in_order), order


def test_retracting_facts() -> None:
    w = World()
    w.merge(delta(entities=people("alice", "bob", "acme"),
                  edges=[fact("alice", "works_at", "acme", single_valued=True), fact("alice", "knows", "bob")]))
    _, report = w.merge(delta(edges=[fact("alice", "works_at", "acme", retract=True),
                                     fact("alice", "knows", "bob", retract=True),
                                     fact("alice", "likes", "bob", retract=True)]))
    assert facts(w.view) == [] and len(report.closed["edges"]) == 2
    assert [d.reason.split(" holds")[0] for d in report.dropped] == ["retract: no fact 'likes' 'alice' -> 'bob'"]
    # asserted again later: a new interval
    w.merge(delta(edges=[fact("alice", "works_at", "acme", single_valued=True)]))
    assert facts(w.view) == [("alice", "works_at", "acme")]


def test_retracting_a_node_ends_its_facts() -> None:
    w = World()
    w.merge(delta(entities=people("alice", "bob", "acme"),
                  edges=[fact("alice", "works_at", "acme", single_valued=True), fact("bob", "customer_of", "acme")]))
    w.merge(delta(entities=[{"name": "acme", "type": "company", "retract": True}]))
    assert facts(w.view) == []
    assert {e["valid_to"] for e in w.view.edges.values()} == {now(2)}


def test_why_a_fact_is_dropped() -> None:
    w = World()
    w.merge(delta(entities=people("alice", "acme")))
    _, report = w.merge(delta(
        entities=[ent("d", "door", "door")], states=[{"ref": "s", "name": "door open", "type": "door_state",
                                                    "entity_ref": "d"}],
        edges=[edge("fact", "alice", "acme"), fact("alice", "works at!", "acme"), fact("alice", "opened", "s"),
               fact("alice", "saw", "scene"), fact("alice", "is", "alice"), edge("employed_by", "alice", "acme"),
               fact("alice", 7, "acme")]))
    by = {d.index: d.reason for d in report.dropped}
    assert by[0].startswith("predicate: missing (required for relation fact): the kind of fact, snake_case")
    assert by[1].startswith("predicate: must be snake_case") and by[1].endswith("got 'works at!'")
    assert by[2] == "fact links entity -> entity (subject -> object); dst_ref 's' is a state"
    assert by[3] == "dst_ref 'scene' is only valid for episodic edges, not fact"
    assert by[4] == "fact from a node to itself"
    assert 'relation: fact with a snake_case predicate: {"relation": "fact", "predicate": "employed_by"' in by[5]
    assert by[6] == "predicate: must be a string, got number"


def test_a_predicate_on_another_relation_is_ignored_with_a_note() -> None:
    w = World()
    _, report = w.merge(delta(entities=[ent("t", "table", "furniture"), ent("k", "key")],
                              edges=[edge("containment", "t", "k", predicate="holds", single_valued=True)]))
    assert report.dropped == [] and [n.reason for n in report.notes] == [
        "predicate and single_valued are for relation fact; ignored on containment"]
    [rec] = w.view.edges.values()
    assert "predicate" not in rec and "single_valued" not in rec
