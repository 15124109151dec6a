"""The pieces of bench/world_fidelity.py that need no TextWorld: visibility, the oracle delta, the
noise model and the scores, on hand-written TextWorld-style facts."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from fidelity_oracle import CORRUPTIONS, containment, corrupt, oracle_delta, score, transitions, visible  # noqa: E402

from worldgraph.kg.records import GraphView  # noqa: E402
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge  # noqa: E402

R, P, I = ("kitchen", "r"), ("P", "P"), ("I", "I")  # noqa: E741 - the game's own one-letter names
CHEST, APPLE, KEY, TABLE = ("chest", "c"), ("apple", "f"), ("brass key", "k"), ("table", "s")
BEFORE = [("at", P, R), ("at", CHEST, R), ("at", TABLE, R), ("closed", CHEST), ("in", KEY, CHEST), ("in", APPLE, I)]
AFTER = [("at", P, R), ("at", CHEST, R), ("at", TABLE, R), ("open", CHEST), ("in", KEY, CHEST)]  # opened, ate the apple


def test_closed_containers_hide_their_contents() -> None:
    edges, seen = visible(BEFORE)
    assert "brass key" not in seen and ("player", "apple") in edges and ("kitchen", "player") in edges
    edges, seen = visible(AFTER)
    assert ("chest", "brass key") in edges


def test_the_oracle_delta_restates_what_is_seen_and_retracts_what_left_the_world() -> None:
    d = oracle_delta(BEFORE, AFTER, "open chest")
    assert {"name": "apple", "type": "food", "retract": True, "evidence": "the apple is gone"} in d["entities"]
    assert [s["name"] for s in d["states"]] == ["chest closed", "chest open"]
    assert [e["action"] for e in d["edges"] if e["relation"] == "transition"] == ["open chest"]
    assert transitions(BEFORE, AFTER, "open chest") == {("chest closed", "chest open", "open chest")}
    view = GraphView("t", "e")
    for i, (b, a) in enumerate([(BEFORE, BEFORE), (BEFORE, AFTER)]):
        plan, report = plan_merge(view, oracle_delta(b, a, "open chest"), {"id": f"s{i}", "created_at": f"2026-01-0{i + 1}"},
                                  "2026-02-01")
        assert report.dropped == []
        view = apply_plan_to_view(view, plan)
    graph = {"nodes": list(view.nodes.values()), "edges": list(view.edges.values())}
    known = visible(BEFORE)[1] | visible(AFTER)[1]
    result = score(graph, containment(AFTER), {"chest": "open"}, transitions(BEFORE, AFTER, "open chest"), known)
    assert result["containment_precision"] == result["containment_recall"] == result["state_accuracy"] == 1.0
    assert result["transition_recall"] == 1.0 and result["duplicate_nodes"] == 0


def test_the_noise_model_corrupts_the_share_asked_and_remembers_the_clean_items() -> None:
    d = oracle_delta(BEFORE, AFTER, "open chest")
    clean, source = corrupt(d, 0.0, random.Random(1))
    assert clean == d and len(source) == sum(len(v) for v in d.values())
    noisy, source = corrupt(d, 1.0, random.Random(1))
    changed = sum(1 for k in d for i, item in enumerate(noisy[k]) if item != source[(k, i)])
    assert changed >= 0.5 * sum(len(v) for v in d.values())
    assert any(isinstance(x, str) and json.loads(x) for v in noisy.values() for x in v)  # stringified items
    assert set(CORRUPTIONS) >= {"stringified", "unknown_relation", "dangling_ref", "case_and_articles",
                                "missing_field", "repeated"}
