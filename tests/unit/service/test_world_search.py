"""search_world and context on both stores: hybrid search over entities, states, facts and rules,
current facts first with currency read from the store at query time (a merge closing a fact
shows at once), as_of, neighbourhoods, one prompt-ready block within a token budget citing ids;
the world index written in the background, synced when behind, rebuilt by reindex, emptied by
forget and purged."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.unit.service.test_forget import files_holding, graph_kw, tenant, wm  # noqa: F401 - fixtures
from worldgraph import InvalidInputError, NotFoundError, WorldContext, WorldHit, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.index.world_index import world_table_name
from worldgraph.world.search.context import count_tokens

ENV = "kitchen"


def at(hour: int) -> str:
    return f"2026-02-01T{hour:02d}:00:00.000000+00:00"


def scene(hour: int, action: str) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "trigger_reason": "look", "created_at": at(hour), "current_round": hour,
            "action": action}


THINGS = [{"ref": "key", "name": "brass key", "type": "item"}, {"ref": "table", "name": "kitchen table", "type": "supporter"},
          {"ref": "chest", "name": "wooden chest", "type": "container"}, {"ref": "alice", "name": "Alice", "type": "person"},
          {"ref": "acme", "name": "Acme", "type": "company"}]


def delta(edges: list[dict[str, Any]], states: list[dict[str, Any]] = (), rules: list[dict[str, Any]] = ()) -> dict[str, Any]:
    return {"entities": THINGS, "states": list(states), "edges": edges, "rules": list(rules)}


def contain(parent: str, child: str) -> dict[str, Any]:
    return {"relation": "containment", "src_ref": parent, "dst_ref": child, "evidence": f"the {child} is on the {parent}"}


def grow(wm: WorldModel, tenant: str) -> None:
    """The key on the table at 1, moved into the chest at 3 (by 'put key in chest'); the chest
    closed, then opened at 3; Alice works at Acme; a rule about the chest."""
    closed = {"ref": "s0", "name": "wooden chest closed", "type": "chest_state", "entity_ref": "chest"}
    opened = {"ref": "s1", "name": "wooden chest open", "type": "chest_state", "entity_ref": "chest"}
    wm.apply_delta(tenant, ENV, delta([contain("table", "key"),
                                       {"relation": "fact", "predicate": "works_at", "src_ref": "alice", "dst_ref": "acme",
                                        "single_valued": True}], [closed],
                                      [{"condition": "the wooden chest is locked", "outcome": "opening it fails",
                                        "linked_refs": ["chest"]}]), scene=scene(1, "look"))
    wm.apply_delta(tenant, ENV, delta([contain("chest", "key"),
                                       {"relation": "transition", "src_ref": "s0", "dst_ref": "s1", "action": "open chest"}],
                                      [closed, opened]), scene=scene(3, "put key in chest"))
    assert wm.wait_for_updates(60)


def test_search_world_ranks_current_facts_first_and_reads_them_from_the_store(wm: WorldModel, tenant: str) -> None:
    grow(wm, tenant)
    hits = wm.search_world(tenant, "where is the brass key now?", env_name=ENV, k=10)
    assert all(isinstance(h, WorldHit) for h in hits)
    first = hits[0]
    assert (first.kind, first.text, first.current, first.valid_to) == (
        "fact", "the brass key is located in the wooden chest", True, None)
    assert first.evidence == ["the key is on the chest"] and len(first.source_scenes) == 1
    assert 0 < first.confidence <= 1 and first.valid_from == at(3)
    # the table's containment, closed at 3 (by its sentence or the one of what came after 'look')
    old = next(h for h in hits if h.kind == "fact" and "kitchen table" in h.text and "brass key" in h.text)
    assert (old.current, old.valid_to) == (False, at(3))
    assert hits.index(old) > 0 and old.score < first.score
    # what came after the action that began the fact: a move, as history
    moved = wm.search_world(tenant, "What did doing 'put key in chest' do?", env_name=ENV, k=3)
    assert moved[0].text == "doing 'put key in chest' moved the brass key from the kitchen table to the wooden chest"
    assert moved[0].id == first.id
    # the neighbourhood: at most 10 current facts one hop around, never the hit itself
    for h in hits:
        assert len(h.neighbourhood) <= 10 and all(n.id != h.id for n in h.neighbourhood)
    chest = next(h for h in wm.search_world(tenant, "wooden chest", env_name=ENV, k=10) if h.kind == "entity")
    assert {n.text for n in chest.neighbourhood} >= {"the brass key is located in the wooden chest"}
    assert "the brass key is located in the kitchen table" not in {n.text for n in chest.neighbourhood}
    # states, facts of any kind and rules
    state = wm.search_world(tenant, "is the wooden chest open or closed?", env_name=ENV, k=3)
    assert [(h.kind, h.text, h.current) for h in state if h.kind == "state"][0] == ("state", "the wooden chest is open", True)
    assert wm.search_world(tenant, "where does Alice work", k=1)[0].text == "Alice works at Acme"
    rule = wm.search_world(tenant, "what happens when the chest is locked", env_name=ENV, k=2)
    assert rule[0].kind == "rule" and rule[0].text == "if the wooden chest is locked, then opening it fails"
    # as_of: the facts valid then rank first
    then = wm.search_world(tenant, "where is the brass key?", env_name=ENV, as_of=at(2))
    assert then[0].text == "the brass key is located in the kitchen table" and then[0].current is False
    assert "wooden chest open" not in {h.text for h in wm.search_world(tenant, "chest", env_name=ENV, as_of=at(0))}


def test_a_merge_closing_a_fact_shows_at_once(wm: WorldModel, tenant: str) -> None:
    grow(wm, tenant)
    was = wm.search_world(tenant, "where is the brass key now?", env_name=ENV)[0]
    assert was.current and "wooden chest" in was.text
    wm.world.on_merged = None  # nothing queued: the index rows (which hold no currency) stay as they were
    wm.world_search.indexer.ensure = lambda *_: None  # type: ignore[method-assign] - nor synced
    wm.apply_delta(tenant, ENV, delta([contain("table", "key")]), scene=scene(5, "take key"))
    hits = wm.search_world(tenant, "where is the brass key now?", env_name=ENV)
    chest = next(h for h in hits if h.id == was.id)
    assert (chest.current, chest.valid_to) == (False, at(5))
    assert hits[0].id != was.id


def test_the_index_catches_up_with_the_store_and_is_rebuilt_by_reindex(wm: WorldModel, tenant: str) -> None:
    wm.world.on_merged = None  # a process that died after its merges, before indexing them
    grow(wm, tenant)
    assert wm.world_search.index.count(tenant) == 0
    assert wm.search_world(tenant, "brass key", env_name=ENV)[0].text.startswith("the brass key")
    rows = wm.world_search.index.count(tenant)
    assert rows > 8
    wm.world_search.index.drop_tenant(tenant)
    wm.reindex(tenant)
    assert wm.world_search.index.count(tenant) == rows
    assert wm.search_world(tenant, "Alice", k=1)[0].text == "Alice works at Acme"


def test_search_is_sealed_by_tenant_and_checks_its_arguments(wm: WorldModel, tenant: str) -> None:
    grow(wm, tenant)
    other = tenant + "-other"
    assert wm.search_world(other, "brass key") == []
    with pytest.raises(NotFoundError) as err:
        wm.search_world(other, "brass key", env_name=ENV)
    assert err.value.field == "env_name"
    for bad, field in (({"query": ""}, "query"), ({"query": "key", "k": 0}, "k"), ({"query": "key", "k": 101}, "k"),
                       ({"query": "key", "as_of": "yesterday"}, "as_of"), ({"query": "key", "env_name": "../x"}, "env_name"),
                       ({"query": "x" * 5000}, "query")):
        with pytest.raises(InvalidInputError) as bad_err:
            wm.search_world(tenant, **bad)
        assert bad_err.value.field == field, bad
    with pytest.raises(InvalidInputError):
        wm.context(tenant, "key", max_tokens=0)


def test_context_puts_current_facts_first_then_episodes_within_the_budget(wm: WorldModel, tenant: str) -> None:
    grow(wm, tenant)
    wm.record_experience(tenant, {"agent_id": "cook-1", "agent_role": "Cook", "task_type": "search",
                                  "task_description": "looked for the brass key in the kitchen",
                                  "outcome": "success", "learnings": ["the key moves around"]})
    wm.record_experience(tenant, {"agent_id": "clerk", "agent_role": "Clerk", "task_type": "search",
                                  "task_description": "filed the brass key report", "outcome": "success"})
    ctx = wm.context(tenant, "where is the brass key?", agent_role="Cook", env_name=ENV)
    assert isinstance(ctx, WorldContext) and str(ctx) == ctx.text
    lines = ctx.text.splitlines()
    assert lines[0].startswith("World model") and "Past episodes (most relevant first):" in lines
    world = lines[1:lines.index("Past episodes (most relevant first):")]
    assert world[0].endswith("] the brass key is located in the wooden chest")
    assert not any("located in the kitchen table" in line for line in lines), "a closed fact is not said as now"
    episodes = lines[lines.index("Past episodes (most relevant first):") + 1:]
    assert len(episodes) == 1 and "cook-1 (Cook): looked for the brass key" in episodes[0]
    cited = {c.id: c.kind for c in ctx.citations}
    assert len(cited) == len(world) + len(episodes) and "episode" in cited.values() and "fact" in cited.values()
    for line in world + episodes:  # every line cites a record by the start of its id
        start = line[1:line.index("]")]
        assert [i for i in cited if i.startswith(start)], line
    assert ctx.tokens == sum(n + 1 for n in count_tokens(lines)) <= 1500
    small = wm.context(tenant, "where is the brass key?", env_name=ENV, max_tokens=40)
    assert 0 < small.tokens <= 40 and small.text.splitlines()[1].endswith("the brass key is located in the wooden chest")
    # a budget too small for the world's share to hold a line with its header: the first fact
    # still comes first (alone), before any episode
    for budget in (20, 30):
        tiny = wm.context(tenant, "where is the brass key?", agent_role="Cook", env_name=ENV, max_tokens=budget)
        assert tiny.tokens <= budget and [c.kind for c in tiny.citations] == ["fact"], tiny.text
        assert tiny.citations[0].id == wm.search_world(tenant, "where is the brass key?", env_name=ENV, k=1)[0].id
    assert wm.context(tenant + "-none", "brass key").text == ""


def test_forget_environment_and_tenant_empty_the_world_index_and_purge_leaves_no_file(tmp_path: Path, tenant: str) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        grow(wm, tenant)
        wm.apply_delta(tenant, "attic", {"entities": [{"name": "zorbleflax lamp", "type": "item"}],
                                         "states": [], "edges": [], "rules": []})
        assert wm.wait_for_updates(60)
        assert wm.search_world(tenant, "zorbleflax lamp", env_name="attic")[0].text == "the zorbleflax lamp (item)"
        assert files_holding(data / "lancedb", "zorbleflax")
        wm.forget_environment(tenant, "attic")
        assert [h.env_name for h in wm.search_world(tenant, "zorbleflax lamp")] == [ENV] * len(
            wm.search_world(tenant, "zorbleflax lamp"))
        assert files_holding(data / "lancedb", "zorbleflax"), "deleted rows stay in old versions until purge"
        stats = wm.purge()
        assert stats["world_index_tables_rewritten"] >= 0 and stats["world_index_tables_dropped"] == 0
        assert files_holding(data, "zorbleflax") == []
        assert wm.search_world(tenant, "brass key", env_name=ENV), "the other environment stays"
        wm.forget_tenant(tenant)
        assert world_table_name(tenant) not in wm.world_search.index.tenant_tables()
        wm.purge()
        assert files_holding(data, "wooden chest") == []


def test_a_read_only_model_searches_what_is_indexed(tmp_path: Path, tenant: str) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        grow(wm, tenant)
    with WorldModel.open(data, embedder=HashingEmbedder(64), read_only=True) as ro:
        assert ro.search_world(tenant, "where is the brass key now?", env_name=ENV)[0].current
        assert ro.context(tenant, "brass key", env_name=ENV).citations


def test_forgetting_a_round_takes_its_action_out_of_the_world_rows(tmp_path: Path, tenant: str) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        packet = wm.observe_round(tenant, ENV, {
            "round": 1, "action": "lift qwxplorf lid", "before_observation": "A chest.", "after_observation": "Done.",
            "response": "ACTION: lift qwxplorf lid\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: the lid"})
        assert packet is not None
        wm.apply_delta(tenant, ENV, delta([contain("chest", "key")]), scene=packet)
        assert wm.wait_for_updates(60)
        said = [h.text for h in wm.search_world(tenant, "what did doing 'lift qwxplorf lid' do?", env_name=ENV)]
        assert "after doing 'lift qwxplorf lid', the brass key was seen in the wooden chest" in said
        wm.forget_episode(tenant, packet["episode_id"])
        said = [h.text for h in wm.search_world(tenant, "what did doing 'lift qwxplorf lid' do?", env_name=ENV)]
        assert not [t for t in said if "qwxplorf" in t] and "the brass key is located in the wooden chest" in said
        wm.purge()
        assert files_holding(data, "qwxplorf") == []


def test_the_rows_written_after_each_merge_are_those_a_full_sync_writes(wm: WorldModel, tenant: str) -> None:
    """A move's row names where the thing was before, a containment another merge may have closed
    or begun: a merge arriving late (an earlier scene's) re-times the key's timeline, and every
    row written in the background is the one a full sync (``reindex``) writes from the store."""
    wm.apply_delta(tenant, ENV, delta([contain("table", "key")]), scene=scene(1, "look"))
    assert wm.wait_for_updates(60)
    wm.apply_delta(tenant, ENV, delta([contain("chest", "key")]), scene=scene(5, "put key in chest"))
    assert wm.wait_for_updates(60)
    wm.apply_delta(tenant, ENV, {"entities": [*THINGS, {"ref": "me", "name": "player", "type": "character"}],
                                 "states": [], "rules": [], "edges": [contain("me", "key")]}, scene=scene(3, "take key"))
    assert wm.wait_for_updates(60)
    written = {i: t for i, (t, _) in wm.world_search.index.rows_of_env(tenant, ENV).items()}
    assert "doing 'put key in chest' moved the brass key from the player to the wooden chest" in written.values()
    wm.reindex(tenant)
    assert {i: t for i, (t, _) in wm.world_search.index.rows_of_env(tenant, ENV).items()} == written


def test_the_question_form_picks_between_a_things_place_its_state_and_its_contents(wm: WorldModel, tenant: str) -> None:
    """"where is the chest" asks for the chest's place (not its state, not what is in it); "what is
    in the chest" for what it holds (not its place)."""
    things = [*THINGS, {"ref": "pantry", "name": "pantry", "type": "room"}]
    locked = {"ref": "s0", "name": "wooden chest locked", "type": "chest_state", "entity_ref": "chest"}
    wm.apply_delta(tenant, ENV, {"entities": things, "states": [locked], "rules": [],
                                 "edges": [contain("pantry", "chest"), contain("chest", "key")]}, scene=scene(1, "look"))
    assert wm.wait_for_updates(60)
    where = wm.search_world(tenant, "Where is the wooden chest now?", env_name=ENV, k=3)
    assert where[0].text == "the wooden chest is located in the pantry"
    holds = wm.search_world(tenant, "What is in or on the wooden chest?", env_name=ENV, k=3)
    assert holds[0].text == "the brass key is located in the wooden chest"
    state = wm.search_world(tenant, "Is the wooden chest open, closed or locked?", env_name=ENV, k=3)
    assert state[0].text == "the wooden chest is locked"


def test_a_yes_no_question_asks_for_the_state_that_holds(wm: WorldModel, tenant: str) -> None:
    """"is the chest locked?" is answered by the chest's state now ("open"), before the change that
    unlocked it and the rules that name "locked"; "is the key in the chest?" by the key's place."""
    states = [{"ref": "s0", "name": "wooden chest locked", "type": "chest_state", "entity_ref": "chest"},
              {"ref": "s1", "name": "wooden chest unlocked", "type": "chest_state", "entity_ref": "chest"},
              {"ref": "s2", "name": "wooden chest open", "type": "chest_state", "entity_ref": "chest"}]
    rules = [{"condition": "the wooden chest is locked", "outcome": "opening the wooden chest fails",
              "linked_refs": ["chest"]},
             {"condition": "the wooden chest is locked", "outcome": "the brass key unlocks the wooden chest",
              "linked_refs": ["chest", "key"]}]
    wm.apply_delta(tenant, ENV, delta([contain("chest", "key")], states[:1], rules), scene=scene(1, "look"))
    wm.apply_delta(tenant, ENV, delta([{"relation": "transition", "src_ref": "s0", "dst_ref": "s1",
                                        "action": "unlock wooden chest with brass key"}], states[:2]),
                   scene=scene(2, "unlock wooden chest with brass key"))
    wm.apply_delta(tenant, ENV, delta([{"relation": "transition", "src_ref": "s1", "dst_ref": "s2",
                                        "action": "open wooden chest"}], states[1:]), scene=scene(3, "open wooden chest"))
    assert wm.wait_for_updates(60)
    state = wm.search_world(tenant, "is the wooden chest locked?", env_name=ENV, k=5)
    assert state[0].kind == "state" and state[0].text == "the wooden chest is open" and state[0].current, \
        [(h.kind, h.text) for h in state]
    place = wm.search_world(tenant, "is the brass key in the wooden chest?", env_name=ENV, k=3)
    assert place[0].text == "the brass key is located in the wooden chest"
