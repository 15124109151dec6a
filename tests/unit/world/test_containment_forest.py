"""Property: current containment is a forest after every merge, whatever the deltas: each node has
at most one current container and no chain of containers leads back to where it started.

Random delta sequences over a few names shared across types (``kitchen`` the item, the room and
the container are three nodes), refs by delta ref, by ``type:name`` and by bare name, edge and
node retractions, and update times in any order (late rounds merge after newer ones). Checked on
the pure engine (with the partial view a store loads, ``tests.unit.world.test_merge.load_view``), on the
embedded store and on Neo4j, through ``apply_delta``. CI replays a fixed set of examples;
``CYCLE_EXAMPLES=1000`` explores further with fresh random ones.
"""

from __future__ import annotations

import copy
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit.world.test_merge import ENV, T, load_view, now
from worldgraph.config import WorldGraphConfig
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.kg.records import GraphView
from worldgraph.kg.store import GraphStore
from worldgraph.world.merge.engine import apply_plan_to_view, plan_merge, referenced
from worldgraph.world.updater import WorldUpdater

NAMES = ("kitchen", "key", "box")
TYPES = ("item", "container", "room")
EXPLORE = os.environ.get("CYCLE_EXAMPLES")


def examples(default: int) -> Any:
    return settings(max_examples=int(EXPLORE or default), deadline=None, derandomize=not EXPLORE, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


rare = st.integers(0, 9).map(lambda x: x == 0)  # a retraction now and then


@st.composite
def updates(draw: st.DrawFn) -> tuple[dict[str, Any], int]:
    """One delta (a few entities, one to three containment edges) and its update time (day 1-28)."""
    entities = [{"ref": f"e{i}", "name": draw(st.sampled_from(NAMES)), "type": draw(st.sampled_from(TYPES)),
                 **({"retract": True} if draw(rare) else {})}
                for i in range(draw(st.integers(0, 3)))]
    typed = st.builds(lambda t, n: f"{t}:{n}", st.sampled_from(TYPES), st.sampled_from(NAMES))
    choices = [typed, st.sampled_from(NAMES)] + ([st.sampled_from([e["ref"] for e in entities])] if entities else [])
    ref = st.one_of(*choices)
    edges = [{"relation": "containment", "src_ref": draw(ref), "dst_ref": draw(ref),
              **({"retract": True} if draw(rare) else {})}
             for _ in range(draw(st.integers(1, 3)))]
    return {"entities": entities, "states": [], "edges": edges, "rules": []}, draw(st.integers(1, 28))


sequences = st.lists(updates(), min_size=4, max_size=14)


def d(entities: tuple[tuple[str, str, str], ...] = (), edges: tuple[tuple[str, str], ...] = (),
      retract: str | None = None) -> dict[str, Any]:
    """A delta: entities (ref, name, type), containment edges (src, dst), the ref of an entity retracted."""
    return {"entities": [{"ref": r, "name": n, "type": t, **({"retract": True} if r == retract else {})}
                         for r, n, t in entities],
            "states": [], "edges": [{"relation": "containment", "src_ref": a, "dst_ref": b} for a, b in edges],
            "rules": []}


# Sequences that broke the property before the fix, the shortest found, replayed first on every target.
REGRESSIONS = [
    # a container retracted in the delta that put the box in it: its empty run stayed current,
    # and the key became the box's second container
    [(d((("e1", "kitchen", "item"),)), 7), (d((("e1", "key", "container"),)), 10),
     (d((("e0", "box", "container"), ("e1", "kitchen", "item")), (("item:kitchen", "e0"),), retract="e1"), 11),
     (d(edges=(("container:key", "container:box"),)), 15)],
    # a late round (day 2) put the kitchen around the box; the box, asserted around the kitchen
    # again on day 27, came back as current after the cycle was broken at day 2: a cycle
    [(d((("e1", "box", "item"), ("e2", "kitchen", "item"))), 25), (d(edges=(("item:box", "item:kitchen"),)), 27),
     (d((("e0", "box", "item"),), (("e0", "item:kitchen"),)), 1), (d((("e1", "box", "item"),), (("kitchen", "e1"),)), 2)],
    # retracting the box recomputed the key's containers from the edges touching the box only:
    # room:box came back beside room:key, which the store had not loaded
    [(d((("e2", "key", "item"),)), 25), (d((("e1", "box", "room"), ("e2", "key", "room"))), 21),
     (d(edges=(("room:box", "item:key"),)), 17), (d((("e0", "box", "item"),)), 7),
     (d(edges=(("room:key", "item:key"),)), 28), (d(edges=(("item:box", "item:key"),)), 3),
     (d((("e0", "box", "item"),), retract="e0"), 15)],
]


def regressions(test: Any) -> Any:
    for seq in reversed(REGRESSIONS):
        test = example(seq=seq)(test)
    return test


def forest_problem(edges: list[dict[str, Any]], names: dict[str, str]) -> str | None:
    """Why the current containment edges are not a forest (None: they are)."""
    parent: dict[str, str] = {}
    for e in edges:
        if e.get("relation") != "containment" or e.get("valid_to") is not None:
            continue
        if e["dst_id"] in parent:
            return f"{names.get(e['dst_id'])} has two current containers"
        parent[e["dst_id"]] = e["src_id"]
    for start in parent:
        path, node = [start], parent[start]
        while node in parent and node not in path:
            path.append(node)
            node = parent[node]
        if node in path:
            return "containment cycle " + " ⊃ ".join(names.get(n, n) for n in reversed([*path, node]))
    return None


def names_of(nodes: Any) -> dict[str, str]:
    return {n["id"]: f"{n['name']}({n['type']})" for n in nodes}


@examples(100)
@regressions
@given(seq=sequences)
def test_pure_merge_keeps_containment_a_forest(seq: list[tuple[dict[str, Any], int]]) -> None:
    view = GraphView(tenant_id=T, env_name=ENV)
    for k, (delta, day) in enumerate(seq):
        scene = {"id": f"scene-{k}", "tenant_id": T, "status": "running", "env_name": ENV, "current_round": k,
                 "trigger_reason": "curious", "created_at": now(day)}
        plan, _ = plan_merge(load_view(view, *referenced(T, ENV, delta)), copy.deepcopy(delta), scene, now(28))
        view = apply_plan_to_view(view, plan)
        problem = forest_problem(list(view.edges.values()), names_of(view.nodes.values()))
        assert problem is None, f"after merge {k}: {problem}"


@contextmanager
def updater(store: GraphStore) -> Iterator[WorldUpdater]:
    """The world updater of ``WorldModel.apply_delta`` over ``store`` (no episode index: nothing
    here records episodes, and opening a WorldModel on the shared Neo4j re-indexes every tenant)."""
    world = WorldUpdater(store, WorldGraphConfig(world_background_updates=False), lambda *a: None)
    try:
        yield world
    finally:
        world.shutdown()
        store.close()


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldUpdater]:
    with updater(EmbeddedGraphStore(tmp_path_factory.mktemp("forest") / "worldgraph.db")) as world:
        yield world


@pytest.fixture(scope="module")
def neo4j(request: pytest.FixtureRequest) -> Iterator[WorldUpdater]:
    from worldgraph.kg.neo4j.store import Neo4jGraphStore

    server = request.getfixturevalue("neo4j_server")
    with updater(Neo4jGraphStore(server["uri"], server["user"], server["password"])) as world:
        yield world


def merge_all(world: WorldUpdater, seq: list[tuple[dict[str, Any], int]]) -> None:
    """``apply_delta`` each update at its time into a fresh tenant; the property after each."""
    tenant, env = f"forest-{uuid.uuid4().hex[:10]}", "Forest"
    for k, (delta, day) in enumerate(seq):
        world.apply_delta(tenant, env, copy.deepcopy(delta), scene={"trigger_reason": "curious", "created_at": now(day)})
        graph = world.store.world_graph(tenant, env)
        problem = forest_problem(graph["edges"], names_of(graph["nodes"]))
        assert problem is None, f"after merge {k}: {problem}"


@examples(40)
@regressions
@given(seq=sequences)
def test_embedded_store_keeps_containment_a_forest(embedded: WorldUpdater, seq: list[tuple[dict[str, Any], int]]) -> None:
    merge_all(embedded, seq)


@pytest.mark.neo4j
@examples(15)
@regressions
@given(seq=st.lists(updates(), min_size=1, max_size=int(EXPLORE and 10 or 6)))
def test_neo4j_store_keeps_containment_a_forest(neo4j: WorldUpdater, seq: list[tuple[dict[str, Any], int]]) -> None:
    merge_all(neo4j, seq)


def test_the_property_catches_a_cycle_and_two_containers() -> None:
    """The check itself: a cycle and a node with two current containers are both reported."""
    def edge(src: str, dst: str, valid_to: str | None = None) -> dict[str, Any]:
        return {"relation": "containment", "src_id": src, "dst_id": dst, "valid_to": valid_to}

    names = {"k": "kitchen(item)", "c": "key(container)", "i": "key(item)"}
    assert forest_problem([edge("k", "c"), edge("c", "i"), edge("i", "k")], names) == \
        "containment cycle key(container) ⊃ key(item) ⊃ kitchen(item) ⊃ key(container)"
    assert forest_problem([edge("k", "i"), edge("c", "i")], names) == "key(item) has two current containers"
    assert forest_problem([edge("k", "c"), edge("c", "i"), edge("i", "k", "2026-01-02")], names) is None
