"""The pieces of bench/world_qa.py that need no TextWorld: questions from the true facts, the
learned records that answer them, and the matching rule, on hand-written TextWorld-style facts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))

from fidelity_oracle import oracle_delta  # noqa: E402
from qa_oracle import Fact, Question, answer_ids, block_holds, questions, unit_holds  # noqa: E402

from worldgraph.kg.records import GraphView  # noqa: E402
from worldgraph.server.world_text import WorldFilter, world_text  # noqa: E402
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge, view_as_graph  # noqa: E402

R, HALL, P, I = ("kitchen", "r"), ("hall", "r"), ("P", "P"), ("I", "I")  # noqa: E741 - the game's one-letter names
CHEST, KEY, TABLE, APPLE, DOOR = ("chest", "c"), ("brass key", "k"), ("table", "s"), ("apple", "f"), ("door", "d")
S0 = [("at", P, R), ("at", CHEST, R), ("at", TABLE, R), ("closed", CHEST), ("on", KEY, TABLE), ("in", APPLE, CHEST),
      ("link", R, DOOR, HALL), ("locked", DOOR)]
S1 = [f for f in S0 if f[0] != "closed"] + [("open", CHEST)]  # open chest: the apple is seen
S2 = [f for f in S1 if f[:2] != ("on", KEY)] + [("in", KEY, I)]  # take brass key
S3 = [f for f in S2 if f[:2] != ("in", KEY)] + [("in", KEY, CHEST)]  # put brass key in chest
ROUNDS = [{"round": i, "action": a, "before": b, "after": c}
          for i, (a, b, c) in enumerate([("look", S0, S0), ("open chest", S0, S1), ("take brass key", S1, S2),
                                         ("put brass key in chest", S2, S3)])]


def learned() -> dict:
    view = GraphView("t", "e")
    for i, r in enumerate(ROUNDS):
        plan, _ = plan_merge(view, oracle_delta(r["before"], r["after"], r["action"]),
                             {"id": f"s{i}", "created_at": f"2026-01-0{i + 1}"}, "2026-02-01")
        view = apply_plan_to_view(view, plan)
    return view_as_graph(view)


def by_text(qs: list[Question]) -> dict[str, Question]:
    return {q.text: q for q in qs}


def test_questions_come_from_the_true_final_state_and_what_the_agent_saw() -> None:
    qs = by_text(questions(ROUNDS))
    assert qs["Where is the brass key now?"].answer == "in the chest"
    assert qs["Where is the brass key now?"].moved and not qs["Where is the apple now?"].moved  # first on the table
    assert qs["Where is the player now?"].facts == [Fact("containment", ("kitchen", "player"), place=True)]
    assert qs["What is in or on the chest?"].answer == "apple, brass key"
    assert qs["Is the chest open, closed or locked?"].answer == "open"
    assert qs["Is the door open, closed or locked?"].answer == "locked"
    assert "What is in or on the table?" not in qs  # it holds nothing now
    effects = {q.text: q.answer for q in qs.values() if q.kind == "action"}
    assert effects == {"What did doing 'open chest' in the kitchen do?": "the chest went from closed to open",
                       "What did doing 'take brass key' in the kitchen do?": "the brass key moved to the player",
                       "What did doing 'put brass key in chest' in the kitchen do?": "the brass key moved to chest"}
    # a thing never seen is never asked about: the apple in the closed chest, before it opened
    early = by_text(questions(ROUNDS[:1]))
    assert "Where is the apple now?" not in early and "Where is the brass key now?" in early


def test_an_action_is_asked_with_the_room_it_was_done_in_and_one_text_is_one_question() -> None:
    """'go east' from two rooms did two things: two questions, each naming its room (one text with
    two answers would be unanswerable by a first hit); one action in one room that had two effects
    is one question answered by either."""
    garden, shed = ("garden", "r"), ("shed", "r")
    t0 = [("at", P, R), ("link", R, DOOR, HALL), ("link", garden, ("gate", "d"), shed), ("at", CHEST, HALL),
          ("open", CHEST), ("at", KEY, HALL)]
    t1 = [f for f in t0 if f[:2] != ("at", P)] + [("at", P, HALL)]  # go east: kitchen -> hall
    t2 = [f for f in t1 if f[:2] != ("at", P)] + [("at", P, garden)]  # (teleported, as a game may)
    t3 = [f for f in t2 if f[:2] != ("at", P)] + [("at", P, shed)]  # go east: garden -> shed
    t4 = [f for f in t1 if f[:2] not in (("at", KEY), ("open", CHEST))] + [("in", KEY, CHEST), ("closed", CHEST)]
    rounds = [{"round": i, "action": a, "before": b, "after": c}
              for i, (a, b, c) in enumerate([("go east", t0, t1), ("look", t1, t2), ("go east", t2, t3),
                                             ("go west", t3, t1), ("put key and close", t1, t4)])]
    acts = {q.text: q for q in questions(rounds) if q.kind == "action"}
    assert acts["What did doing 'go east' in the kitchen do?"].facts == [
        Fact("containment", ("hall", "player"), "go east", place=True)]
    assert acts["What did doing 'go east' in the garden do?"].facts == [
        Fact("containment", ("shed", "player"), "go east", place=True)]
    both = acts["What did doing 'put key and close' in the hall do?"]
    assert {f.relation for f in both.facts} == {"transition", "containment"}
    assert len({q.text for q in questions(rounds)}) == len(questions(rounds))  # no text asked twice


def test_answer_ids_are_the_learned_records_of_the_true_fact_current_ones_for_now() -> None:
    graph = learned()
    qs = by_text(questions(ROUNDS))
    where = answer_ids(graph, qs["Where is the brass key now?"])
    [edge] = [e for e in graph["edges"] if e["id"] in where]
    names = {n["id"]: n["name"] for n in graph["nodes"]}
    assert (names[edge["src_id"]], edge["valid_to"]) == ("chest", None)
    took = answer_ids(graph, qs["What did doing 'take brass key' in the kitchen do?"])  # history answers what an action did
    [edge] = [e for e in graph["edges"] if e["id"] in took]
    assert names[edge["src_id"]] == "player" and edge["valid_to"] is not None
    state = answer_ids(graph, qs["Is the chest open, closed or locked?"])
    assert [names[i] for i in state] == ["chest open"]
    opened = answer_ids(graph, qs["What did doing 'open chest' in the kitchen do?"])
    assert [e["action"] for e in graph["edges"] if e["id"] in opened] == ["open chest"]


def test_a_unit_holds_the_answer_by_an_id_or_by_one_sentence_naming_its_ends() -> None:
    q = by_text(questions(ROUNDS))["Where is the brass key now?"]
    ids = {"edge-1"}
    assert unit_holds(q, ids, hit_id="edge-1")
    assert unit_holds(q, ids, text="see edge-1")  # a cited id
    assert not unit_holds(q, ids, hit_id="edge-1", current=False)  # history does not answer "now"
    assert unit_holds(q, set(), text="You open the chest. The chest contains a brass key and an apple.")
    assert not unit_holds(q, set(), text="There is a chest here. On the table is a brass key.")  # where it was
    assert not unit_holds(q, set(), text="The brass key was in the chest until 2026-01-04.")
    assert not unit_holds(q, set(), text="Where is the brass key now? In the chest?")  # the question echoed
    assert not block_holds(q, set(), "the chest\nthe brass key")  # a block is read line by line
    place = by_text(questions(ROUNDS))["Where is the player now?"]
    assert unit_holds(place, set(), text="-= Kitchen =- You are in a kitchen. You see a chest.")
    assert not unit_holds(place, set(), text="-= Hall =- You are in a hall.")


def test_an_action_is_answered_by_its_effect_not_by_repeating_it() -> None:
    qs = by_text(questions(ROUNDS))
    opened = qs["What did doing 'open chest' in the kitchen do?"]
    assert not unit_holds(opened, set(), text="kitchen round 1: open chest")
    assert unit_holds(opened, set(), text="kitchen round 1: open chest. You open the chest, revealing an apple.")
    assert unit_holds(opened, set(), text="You can see an opened chest.")
    moved = qs["What did doing 'put brass key in chest' in the kitchen do?"]
    assert not unit_holds(moved, set(), text="round 3: put brass key in chest")
    assert unit_holds(moved, set(), text="round 3: put brass key in chest. The chest contains a brass key.")


def test_the_world_models_own_text_holds_every_answer_the_graph_holds() -> None:
    """The matching rule reads a world model's text: world_text's lines (history included)
    hold each answer that the learned graph holds."""
    graph = learned()
    text = world_text(graph, "e", WorldFilter(history=True), max_chars=100_000)
    for q in questions(ROUNDS):
        ids = answer_ids(graph, q)
        assert ids, q.text
        assert block_holds(q, set(), text), q.text


def test_the_bench_asks_every_method_through_its_plug_in_and_prints_na_without_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """world_qa.ask on a small model: the episode baseline runs; search_world and context come
    through SEARCH / CONTEXT (here stand-ins reading the world model's own text) or print n/a."""
    import world_qa

    from worldgraph import WorldModel
    from worldgraph.memory.embeddings import HashingEmbedder

    rounds = [dict(r, before_observation=f"Round {r['round']}. On the table is a brass key.",
                   after_observation="Done.", admissible_commands=[]) for r in ROUNDS]
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as wm:
        for r in rounds:
            wm.apply_delta(world_qa.TENANT, "game", oracle_delta(r["before"], r["after"], r["action"]),
                           scene={"created_at": f"2026-01-0{r['round'] + 1}T00:00:00+00:00"})
            wm.observe_round(world_qa.TENANT, "game", {**r, "response": r["action"]})
        qs = questions(ROUNDS)

        def text(model: WorldModel, tenant: str, env: str, query: str) -> str:
            return world_text(model.world_graph(tenant, env), env, WorldFilter(history=True), max_chars=100_000)

        monkeypatch.setattr(world_qa, "SEARCH", lambda *a: [{"id": None, "text": line} for line in text(*a).splitlines()])
        monkeypatch.setattr(world_qa, "CONTEXT", text)
        rows = world_qa.ask(wm, "game", qs, world_qa.Tokens(), 1500, recall_limit=10)
        assert len(rows) == len(qs) and all(r["graph_holds"] and r["context"] for r in rows)
        assert all(isinstance(r["search_hit1"], bool) and isinstance(r["search_hit5"], bool) for r in rows)
        # the stand-in search is the graph's text in its own order: its first lines answer little
        assert sum(r["search_hit1"] for r in rows) < len(rows)
        assert {"episodes_hit1", "episodes_hit5", "episodes_block"} <= set(rows[0])
        monkeypatch.setattr(world_qa, "SEARCH", world_qa.search_world)
        monkeypatch.setattr(world_qa, "CONTEXT", world_qa.context)
        rows = world_qa.ask(wm, "game", qs, world_qa.Tokens(), 1500, recall_limit=10)
    printed = world_qa.table("t", rows, 1500)
    if not hasattr(WorldModel, "search_world"):  # until the world model has them
        assert f"| all | {len(qs)} | 1.000 | n/a | n/a | n/a | " in printed
