"""Merge rules that no other test reached (found by tracing which lines of ``world/merge/`` the
world-model tests run): a closed rule asserted again reopens, a late rule a newer one already
contradicted enters closed, rules of articles only, and retraction of a transition edge."""

from __future__ import annotations

from tests.unit.world.test_merge import ENV, T, delta, edge, ent, now, state
from worldgraph.kg.ids import edge_id, node_id, rule_id
from worldgraph.kg.records import GraphView, MergeReport
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge


class Timeline:
    """Merges each delta at the update time of its choice (the scene's created_at), like rounds
    whose extractions finish out of order."""

    def __init__(self) -> None:
        self.view = GraphView(tenant_id=T, env_name=ENV)
        self.n = 0

    def merge(self, d: dict, day: int) -> MergeReport:
        self.n += 1
        scene = {"id": f"scene-{self.n}", "tenant_id": T, "env_name": ENV, "status": "running", "created_at": now(day)}
        plan, report = plan_merge(self.view, d, scene, now(28))
        self.view = apply_plan_to_view(self.view, plan)
        return report


def rule(condition: str, outcome: str) -> dict:
    return {"condition": condition, "outcome": outcome, "confidence": 0.6}


LOCKED, FAILS, WALK = "the front door is locked", "going outside fails", "you walk outside freely"


def test_a_closed_rule_asserted_again_is_reopened_and_closes_its_replacement() -> None:
    w = Timeline()
    first, second = rule_id(T, ENV, LOCKED, FAILS), rule_id(T, ENV, LOCKED, WALK)
    w.merge(delta(rules=[rule(LOCKED, FAILS)]), 2)
    w.merge(delta(rules=[rule(LOCKED, WALK)]), 4)
    assert w.view.rules[first]["valid_to"] == now(4)
    report = w.merge(delta(rules=[rule(LOCKED, FAILS)]), 6)
    assert report.reopened["rules"] == [first] and report.merged["rules"] == [first]
    assert report.closed["rules"] == [second] and report.created["rules"] == []
    assert (w.view.rules[first]["valid_from"], w.view.rules[first]["valid_to"]) == (now(6), None)
    assert w.view.rules[second]["valid_to"] == now(6)


def test_a_late_rule_that_a_newer_one_contradicts_enters_closed() -> None:
    w = Timeline()
    newer = rule_id(T, ENV, LOCKED, WALK)
    w.merge(delta(rules=[rule(LOCKED, WALK)]), 10)
    report = w.merge(delta(rules=[rule(LOCKED, FAILS)]), 5)  # observed before, merged after
    late = rule_id(T, ENV, LOCKED, FAILS)
    assert report.created["rules"] == [late] and report.closed["rules"] == []  # created closed: not "closed"
    assert (w.view.rules[late]["valid_from"], w.view.rules[late]["valid_to"]) == (now(5), now(10))
    assert w.view.rules[newer]["valid_to"] is None


def test_rules_of_articles_only_are_similar_to_each_other_only() -> None:
    w = Timeline()
    w.merge(delta(rules=[rule("the", "a"), rule(LOCKED, FAILS)]), 2)
    report = w.merge(delta(rules=[rule("an", "the")]), 3)  # no tokens on either side: Jaccard 1
    assert report.merged["rules"] == [rule_id(T, ENV, "the", "a")] and report.created["rules"] == []
    assert len(w.view.rules) == 2


def test_retracting_a_transition_edge_closes_it_at_the_update_time() -> None:
    w = Timeline()
    w.merge(delta(entities=[ent("d", "front door", "door"), ent("l", "lamp")],
                  states=[state("s0", "door closed", "d"), state("s1", "door open", "d")],
                  edges=[edge("transition", "s0", "s1", action="open door"), edge("episodic", "l", "scene")]), 2)
    closed, opened = (node_id(T, ENV, "state", "door_state", n) for n in ("door closed", "door open"))
    transition = edge_id(T, ENV, "transition", closed, opened, "open door", 0)
    episodic = edge_id(T, ENV, "episodic", node_id(T, ENV, "entity", "item", "lamp"), "scene-1", None, 0)
    report = w.merge(delta(edges=[
        edge("transition", "door_state:door closed", "door_state:door open", action="open door", retract=True)]), 5)
    assert report.closed["edges"] == [transition] and report.dropped == []
    assert w.view.edges[transition]["valid_to"] == now(5)
    assert w.view.edges[episodic]["valid_to"] is None  # the other edges of those nodes stay
    report = w.merge(delta(edges=[edge("transition", "door_state:door closed", "door_state:door open",
                                       action="open door", retract=True)]), 6)
    assert [d.reason for d in report.dropped] == [
        f"retract: no transition edge 'door_state:door closed' -> 'door_state:door open' holds at {now(6)}"]
