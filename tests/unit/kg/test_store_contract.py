"""One contract, two stores: every GraphStore behaviour checked on the embedded store and on a real
Neo4j. Each test uses a fresh random tenant, so tests on a shared server do not see each other."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from worldgraph.errors import NotFoundError
from worldgraph.kg.composed import ComposedStore
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.kg.records import MergePlan
from worldgraph.kg.store import GraphStore
from worldgraph.memory.models import AgentExperience, CanvasContext
from worldgraph.memory.record import build_episode

ENV = "kitchen-env"
T0 = datetime(2026, 1, 5, 12, 0, tzinfo=timezone.utc)


def _open(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> GraphStore:
    if kind == "embedded":
        return EmbeddedGraphStore(tmp_path / "worldgraph.db")
    from worldgraph.kg.neo4j.store import Neo4jGraphStore

    server = request.getfixturevalue("neo4j_server")
    return Neo4jGraphStore(server["uri"], server["user"], server["password"])


@pytest.fixture(params=["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[GraphStore]:
    s = _open(request.param, tmp_path, request)
    yield s
    s.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


# ------------------------------------------------------------------------- builders
def test_a_store_owns_its_parts_on_one_shared_connection(store: GraphStore) -> None:
    """Composed, not stacked (docs/architecture.md, "How a store is made"): the store's only base
    is ComposedStore, and its parts are objects that share one connection object."""
    assert isinstance(store, ComposedStore) and type(store).__bases__ == (ComposedStore,)
    parts = [store.episodes, store.world, store.leases, store.lifecycle]
    shared = {id(part.db) for part in parts}  # type: ignore[attr-defined]
    assert len(shared) == 1 and len({type(part) for part in parts}) == 4


def episode(tenant: str, agent: str = "agent-1", minutes: int = 0, canvas: dict[str, Any] | None = None,
            task: str = "sort the invoices", **extra: Any) -> tuple[dict[str, Any], dict[str, Any] | None, list[Any]]:
    exp = AgentExperience(agent_id=agent, agent_role="clerk", task_type="sorting", task_description=task,
                          outcome="success", learnings=["sort by date first"], timestamp=T0 + timedelta(minutes=minutes),
                          **extra)
    return build_episode(tenant, exp, CanvasContext.model_validate(canvas) if canvas else None)


def add(store: GraphStore, tenant: str, *eps: tuple[dict[str, Any], dict[str, Any] | None, list[Any]]) -> list[str]:
    store.add_episodes(tenant, [e for e, _, _ in eps], [c for _, c, _ in eps if c], [a for _, _, al in eps for a in al])
    return [e["id"] for e, _, _ in eps]


def feedback(tenant: str, episode_id: str, score: float, category: str | None = None, n: int = 0) -> dict[str, Any]:
    return {"id": f"fb-{episode_id}-{n}", "episode_id": episode_id, "tenant_id": tenant, "feedback_score": score,
            "feedback_notes": None, "feedback_category": category, "created_by": "tester",
            "created_at": f"2026-01-06T00:00:0{n}.000000+00:00"}


def node(tenant: str, nid: str, name: str, kind: str = "entity", scenes: tuple[str, ...] = ("scene-1",),
         **extra: Any) -> dict[str, Any]:
    return {"id": nid, "tenant_id": tenant, "env_name": ENV, "kind": kind, "type": "item", "name": name,
            "norm_name": name, "attributes": {"color": "brass", "nested": {"a": [1, None]}}, "confidence": 0.8,
            "evidence": ["You see it."], "evidence_count": 1, "source_scenes": list(scenes), "entity_id": None,
            "valid_from": "2026-01-05T12:00:00.000000+00:00", "valid_to": None,
            "created_at": "2026-01-05T12:00:00.000000+00:00", "updated_at": "2026-01-05T12:00:00.000000+00:00",
            **extra}


def edge(tenant: str, eid: str, relation: str, src: str, dst: str, valid_to: str | None = None,
         action: str | None = None) -> dict[str, Any]:
    return {"id": eid, "tenant_id": tenant, "env_name": ENV, "relation": relation, "src_id": src, "dst_id": dst,
            "action": action, "confidence": 0.9, "evidence": ["seen"], "evidence_count": 1,
            "source_scenes": ["scene-1"], "valid_from": "2026-01-05T12:00:00.000000+00:00", "valid_to": valid_to,
            "created_at": "2026-01-05T12:00:00.000000+00:00", "updated_at": "2026-01-05T12:00:00.000000+00:00"}


def rule(tenant: str, rid: str, linked: list[str], scenes: tuple[str, ...] = ("scene-1",)) -> dict[str, Any]:
    return {"id": rid, "tenant_id": tenant, "env_name": ENV, "condition": "the door is locked",
            "outcome": "going out fails", "linked_node_ids": linked, "confidence": 0.6, "evidence": ["tried"],
            "evidence_count": 1, "source_scenes": list(scenes), "valid_from": "2026-01-05T12:00:00.000000+00:00",
            "valid_to": None, "created_at": "2026-01-05T12:00:00.000000+00:00",
            "updated_at": "2026-01-05T12:00:00.000000+00:00"}


def scene(tenant: str, sid: str, status: str = "pending", episode_id: str | None = None, env: str = ENV,
          minute: int = 0) -> dict[str, Any]:
    return {"id": sid, "tenant_id": tenant, "env_name": env, "status": status, "error": None,
            "episode_id": episode_id, "created_at": f"2026-01-05T12:{minute:02d}:00.000000+00:00",
            "updated_at": f"2026-01-05T12:{minute:02d}:00.000000+00:00", "current_round": 3,
            "trigger_reason": "a door I did not expect", "action": "open door", "before_observation": "closed",
            "after_observation": "open", "feedback": "", "admissible_commands": ["look", "open door"],
            "latest_response": "FLAG_CURIOSITY: yes", "recent_history_excerpt": ""}


def first_plan(tenant: str, episode_id: str | None = None) -> MergePlan:
    return MergePlan(
        tenant_id=tenant, env_name=ENV,
        nodes=[node(tenant, "n-table", "wooden table"), node(tenant, "n-key", "brass key"),
               node(tenant, "n-box", "box"),
               node(tenant, "s-closed", "door closed", kind="state", entity_id="n-box"),
               node(tenant, "s-open", "door open", kind="state", entity_id="n-box")],
        edges=[edge(tenant, "e-contains", "containment", "n-table", "n-key"),
               edge(tenant, "e-trans", "transition", "s-closed", "s-open", action="open door"),
               edge(tenant, "e-epi", "episodic", "n-key", "scene-1")],
        rules=[rule(tenant, "r-door", ["n-box", "s-closed"])],
        scene=scene(tenant, "scene-1", status="merged", episode_id=episode_id),
        meta={"env_name": ENV, "app_name": "general", "graph_version": 1,
              "updated_at": "2026-01-05T12:00:00.000000+00:00", "last_trigger_reason": "a door"},
    )


def second_plan(tenant: str) -> MergePlan:
    """The key moves from the table into the box: the old containment closes, a new one opens."""
    key = node(tenant, "n-key", "brass key", scenes=("scene-1", "scene-2"), evidence_count=2)
    return MergePlan(
        tenant_id=tenant, env_name=ENV, nodes=[key, key],  # duplicate rows are one upsert
        edges=[edge(tenant, "e-contains", "containment", "n-table", "n-key", valid_to="2026-01-05T12:05:00.000000+00:00"),
               edge(tenant, "e-contains-2", "containment", "n-box", "n-key")],
        rules=[rule(tenant, "r-door", ["n-box"], scenes=("scene-1", "scene-2"))],
        scene=scene(tenant, "scene-2", status="merged", minute=5),
        meta={"env_name": ENV, "app_name": "general", "graph_version": 2,
              "updated_at": "2026-01-05T12:05:00.000000+00:00", "last_trigger_reason": "the key moved"},
    )


def expected_graph(tenant: str) -> dict[str, Any]:
    p1, p2 = first_plan(tenant), second_plan(tenant)
    nodes = {n["id"]: n for n in p1.nodes + p2.nodes}
    edges = {e["id"]: e for e in p1.edges + p2.edges}
    rules = {r["id"]: r for r in p1.rules + p2.rules}
    assert p1.scene and p2.scene
    meta = dict(p2.meta or {}, tenant_id=tenant, counts={"nodes": 5, "edges": 4, "rules": 1, "scenes": 2})
    return {"nodes": [nodes[k] for k in sorted(nodes)], "edges": [edges[k] for k in sorted(edges)],
            "rules": [rules[k] for k in sorted(rules)], "scenes": [p1.scene, p2.scene], "meta": meta}


def canonical(graph: dict[str, Any]) -> str:
    return json.dumps(graph, ensure_ascii=False, sort_keys=True)


# ------------------------------------------------------------------------- episodes
def test_add_and_get_episodes_round_trip(store: GraphStore, tenant: str) -> None:
    canvas = {"id": "canvas-1", "name": "Invoices", "components": [{"id": "c1", "kind": "table"}],
              "actions": [{"id": "a1", "type": "click", "timestamp": T0.isoformat()}]}
    e1, c1, audits = episode(tenant, canvas=canvas)
    e2, _, _ = episode(tenant, minutes=1, task="file the receipts")
    add(store, tenant, (e1, c1, audits), (e2, None, []))

    got = store.get_episodes(tenant, [e1["id"], e2["id"], "missing", e1["id"]])
    assert got == {e1["id"]: e1, e2["id"]: e2}
    assert got[e1["id"]]["index_error"] is None and got[e1["id"]]["canvas_snapshot"]["name"] == "Invoices"
    assert store.get_canvas(tenant, "canvas-1") == c1
    assert store.get_canvas(tenant, "nope") is None
    assert store.canvas_audits(tenant, e1["id"]) == audits and len(audits) == 1
    assert store.canvas_audits(tenant, e2["id"]) == []


def test_agent_episodes_newest_first_with_limit(store: GraphStore, tenant: str) -> None:
    eps = [episode(tenant, minutes=m) for m in (3, 1, 4, 2)]
    eps.append(episode(tenant, agent="agent-2", minutes=9))
    add(store, tenant, *eps)
    got = store.agent_episodes(tenant, "agent-1", 3)
    assert [e["ts"] for e in got] == [(T0 + timedelta(minutes=m)).timestamp() for m in (4, 3, 2)]
    assert [e["agent_id"] for e in store.agent_episodes(tenant, "agent-2", 10)] == ["agent-2"]
    assert store.agent_episodes(tenant, "nobody", 10) == []
    assert store.agent_ids(tenant) == ["agent-1", "agent-2"] and store.agent_ids(tenant, limit=1) == ["agent-1"]


def test_iter_episodes_batches_everything(store: GraphStore, tenant: str) -> None:
    ids = add(store, tenant, *[episode(tenant, minutes=m) for m in range(7)])
    batches = list(store.iter_episodes(tenant, batch_size=3))
    assert [len(b) for b in batches] == [3, 3, 1]
    assert sorted(e["id"] for b in batches for e in b) == sorted(ids)
    everyone = {e["id"] for b in store.iter_episodes(None, batch_size=500) for e in b}
    assert set(ids) <= everyone


def test_index_status_and_unindexed(store: GraphStore, tenant: str) -> None:
    ids = add(store, tenant, *[episode(tenant, minutes=m) for m in range(3)])
    store.set_index_status(tenant, [ids[0]], "indexed")
    store.set_index_status(tenant, [ids[1]], "failed", "embedder timed out")
    store.set_index_status("someone-else", [ids[2]], "indexed")  # not that tenant's: no effect
    got = store.get_episodes(tenant, ids)
    assert [got[i]["index_status"] for i in ids] == ["indexed", "failed", "pending"]
    assert got[ids[1]]["index_error"] == "embedder timed out"
    mine = [e["id"] for e in store.unindexed_episodes(limit=1_000_000) if e["tenant_id"] == tenant]
    assert mine == [ids[1], ids[2]]  # oldest first
    store.set_index_status(tenant, [ids[1]], "indexed")  # a retry that worked clears the error
    got = store.get_episodes(tenant, ids)
    assert (got[ids[1]]["index_status"], got[ids[1]]["index_error"]) == ("indexed", None)
    # every read path returns the same records, state included
    assert {e["id"]: e for b in store.iter_episodes(tenant) for e in b} == got
    assert store.episodes_with_feedback(tenant, ids)[0] == got
    agent = got[ids[0]]["agent_id"]
    assert {e["id"]: e for e in store.agent_episodes(tenant, agent, 10)} == {
        i: e for i, e in got.items() if e["agent_id"] == agent}


def test_tenant_isolation(store: GraphStore, tenant: str) -> None:
    other = tenant + "-b"
    (eid,) = add(store, tenant, episode(tenant, canvas={"id": "cv", "name": "A's canvas"}))
    store.add_feedback(tenant, feedback(tenant, eid, 0.5))
    store.apply_plan(first_plan(tenant, episode_id=eid))

    assert store.get_episodes(other, [eid]) == {}
    assert store.agent_episodes(other, "agent-1", 10) == [] and store.agent_ids(other) == []
    assert store.feedback_for(other, eid) == [] and store.feedback_stats(other, [eid]) == {}
    assert store.get_canvas(other, "cv") is None and store.canvas_audits(other, eid) == []
    assert store.world_graph(other, ENV) == {"nodes": [], "edges": [], "rules": [], "scenes": [], "meta": None}
    assert store.get_scene(other, "scene-1") is None and store.list_scenes(other) == []
    assert store.environments(other) == [] and store.neighborhood(other, [eid]) == {}
    view = store.load_view(other, ENV, ["n-key", "n-table"])
    assert (view.nodes, view.edges, view.rules, view.meta) == ({}, {}, {}, None)
    assert set(store.stats(other).values()) == {0}
    with pytest.raises(NotFoundError):
        store.add_feedback(other, feedback(other, eid, 1.0))
    assert tenant in store.tenants()


# ------------------------------------------------------------------------- feedback
def test_feedback_add_list_and_stats(store: GraphStore, tenant: str) -> None:
    e1, e2, e3 = add(store, tenant, *[episode(tenant, minutes=m) for m in range(3)])
    store.add_feedback(tenant, feedback(tenant, e1, 1.0, "accuracy", n=0))
    store.add_feedback(tenant, feedback(tenant, e1, -0.5, "safety", n=1))
    store.add_feedback(tenant, feedback(tenant, e1, 0.25, "accuracy", n=2))
    store.add_feedback(tenant, feedback(tenant, e2, 0.5, None, n=0))

    assert [f["feedback_score"] for f in store.feedback_for(tenant, e1)] == [1.0, -0.5, 0.25]
    assert store.feedback_for(tenant, e1)[0] == feedback(tenant, e1, 1.0, "accuracy", n=0)
    stats = store.feedback_stats(tenant, [e1, e2, e3, "missing"])
    assert set(stats) == {e1, e2}
    assert stats[e1][0] == pytest.approx(0.25) and stats[e1][1] == 3
    assert stats[e2] == (pytest.approx(0.5), 1)
    acc = store.feedback_stats(tenant, [e1, e2], category="accuracy")
    assert set(acc) == {e1} and acc[e1][0] == pytest.approx(0.625) and acc[e1][1] == 2
    # recall's combined read gives the same as the two calls
    episodes, both = store.episodes_with_feedback(tenant, [e1, e2, e3, "missing"])
    assert set(episodes) == {e1, e2, e3} and both == stats
    episodes, acc_both = store.episodes_with_feedback(tenant, [e1, e2], category="accuracy")
    assert set(episodes) == {e1, e2} and acc_both == acc


def test_recall_filters_read_from_the_store(store: GraphStore, tenant: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The feedback and session filters' reads (recall turns them into the episodes that pass):
    one query of the store, never a walk over every episode of the tenant (the base class's
    fallback: at 1M episodes on Neo4j, seconds per recall)."""
    e1, e2, e3, e4 = add(store, tenant, episode(tenant, minutes=0, session_id="chat-a"),
                         episode(tenant, minutes=1, session_id="chat-a"),
                         episode(tenant, minutes=2, session_id="chat-b"), episode(tenant, minutes=3))
    other = f"{tenant}-other"
    o1, = add(store, other, episode(other, session_id="chat-a"))
    store.add_feedback(other, feedback(other, o1, 1.0, "accuracy"))
    store.add_feedback(tenant, feedback(tenant, e1, 1.0, "accuracy", n=0))
    store.add_feedback(tenant, feedback(tenant, e1, 0.0, "safety", n=1))
    store.add_feedback(tenant, feedback(tenant, e3, -0.5, None, n=0))

    def walked(*_: Any, **__: Any) -> Any:
        raise AssertionError("walked every episode of the tenant")
    monkeypatch.setattr(store, "iter_episodes", walked)
    monkeypatch.setattr(store.episodes, "iter_episodes", walked)  # type: ignore[attr-defined]
    assert store.feedback_means(tenant) == {e1: pytest.approx(0.5), e3: pytest.approx(-0.5)}
    assert store.feedback_means(tenant, "accuracy") == {e1: pytest.approx(1.0)}
    assert store.feedback_means(tenant, "no-such-category") == {}
    assert sorted(store.session_episode_ids(tenant, "chat-a")) == sorted([e1, e2])
    assert store.session_episode_ids(tenant, "chat-b") == [e3]
    assert store.session_episode_ids(tenant, "no-such-chat") == []
    assert e4 not in store.session_episode_ids(tenant, "chat-a")
    assert store.session_episode_ids(other, "chat-a") == [o1] and store.feedback_means(other) == {o1: 1.0}


def test_feedback_for_unknown_episode_writes_nothing(store: GraphStore, tenant: str) -> None:
    add(store, tenant, episode(tenant))
    with pytest.raises(NotFoundError, match="no-such-episode"):
        store.add_feedback(tenant, feedback(tenant, "no-such-episode", 1.0))
    assert store.stats(tenant)["feedback"] == 0
    assert store.feedback_for(tenant, "no-such-episode") == []


# ------------------------------------------------------------------------- world graph
def test_apply_plans_then_world_graph_is_exact(store: GraphStore, tenant: str) -> None:
    meta1 = store.apply_plan(first_plan(tenant))
    assert meta1["counts"] == {"nodes": 5, "edges": 3, "rules": 1, "scenes": 1}
    assert meta1["graph_version"] == 1 and meta1["tenant_id"] == tenant and meta1["env_name"] == ENV
    meta2 = store.apply_plan(second_plan(tenant))
    assert meta2["counts"] == {"nodes": 5, "edges": 4, "rules": 1, "scenes": 2}

    graph = store.world_graph(tenant, ENV)
    assert graph == expected_graph(tenant)
    assert canonical(graph) == canonical(expected_graph(tenant))  # byte-identical exports
    closed = {e["id"]: e["valid_to"] for e in graph["edges"]}
    assert closed["e-contains"] == "2026-01-05T12:05:00.000000+00:00" and closed["e-contains-2"] is None
    assert graph["nodes"][0]["attributes"] == {"color": "brass", "nested": {"a": [1, None]}}
    assert store.environments(tenant) == [ENV]
    s = store.stats(tenant)
    assert (s["nodes"], s["edges"], s["rules"], s["scenes"]) == (5, 4, 1, 2)


def test_load_view(store: GraphStore, tenant: str) -> None:
    store.apply_plan(first_plan(tenant))
    store.apply_plan(second_plan(tenant))
    view = store.load_view(tenant, ENV, ["n-key", "n-key", "unknown"])
    assert set(view.nodes) == {"n-key"}
    assert set(view.edges) == {"e-contains", "e-contains-2", "e-epi"}  # closed ones too
    assert view.edges["e-contains"]["valid_to"] is not None
    assert set(view.rules) == {"r-door"}
    assert view.meta is not None and view.meta["graph_version"] == 2
    states = store.load_view(tenant, ENV, ["s-open"])
    assert set(states.nodes) == {"s-open"} and set(states.edges) == {"e-trans"}
    empty = store.load_view(tenant, "other-env", ["n-key"])
    assert (empty.nodes, empty.edges, empty.rules, empty.meta) == ({}, {}, {}, None)
    # asking for an entity brings its states, so a new state can close an old one by name
    box = store.load_view(tenant, ENV, ["n-box"])
    assert set(box.nodes) == {"n-box", "s-closed", "s-open"}


def test_world_records_are_the_records_asked_for_by_id_and_nothing_around_them(store: GraphStore, tenant: str) -> None:
    store.apply_plan(first_plan(tenant))
    store.apply_plan(second_plan(tenant))
    graph = store.world_graph(tenant, ENV)
    every = {r["id"]: r for part in ("nodes", "edges", "rules") for r in graph[part]}
    asked = ["n-key", "s-open", "e-contains", "e-trans", "r-door", "unknown", "n-key"]
    view = store.world_records(tenant, ENV, asked)
    assert (set(view.nodes), set(view.edges), set(view.rules)) == ({"n-key", "s-open"}, {"e-contains", "e-trans"},
                                                                   {"r-door"})
    assert view.edges["e-contains"] == every["e-contains"] and view.nodes["n-key"] == every["n-key"]
    assert view.meta is None  # no edge of n-key's but the one asked for, no meta
    assert store.world_records(tenant, "other-env", asked).nodes == {}
    assert store.world_records(tenant + "-other", ENV, asked).edges == {}  # sealed by tenant
    assert store.world_records(tenant, ENV, []).nodes == {}


def test_replace_world_then_world_graph_equals_input(store: GraphStore, tenant: str) -> None:
    store.apply_plan(first_plan(tenant))
    snapshot = expected_graph(tenant)
    snapshot["meta"]["graph_version"] = 7
    store.replace_world(tenant, ENV, snapshot)
    assert canonical(store.world_graph(tenant, ENV)) == canonical(snapshot)
    # Replacing again with a smaller graph removes what is gone.
    smaller = {"nodes": snapshot["nodes"][:2], "edges": [], "rules": [], "scenes": snapshot["scenes"][:1],
               "meta": snapshot["meta"]}
    store.replace_world(tenant, ENV, smaller)
    assert canonical(store.world_graph(tenant, ENV)) == canonical(smaller)
    assert store.stats(tenant)["edges"] == 0


def test_scene_claim_only_once(store: GraphStore, tenant: str) -> None:
    store.upsert_scene(scene(tenant, "sc-a", status="pending"))
    assert store.claim_scene(tenant, "sc-a") is True
    assert store.claim_scene(tenant, "sc-a") is False
    got = store.get_scene(tenant, "sc-a")
    assert got is not None and got["status"] == "running"
    assert got == dict(scene(tenant, "sc-a"), status="running")
    assert store.claim_scene(tenant, "missing") is False
    assert store.claim_scene(tenant + "-b", "sc-a") is False

    store.upsert_scene(dict(got, status="failed", error="LLM down"))
    assert store.claim_scene(tenant, "sc-a") is True  # a failed scene may be retried
    store.upsert_scene(scene(tenant, "sc-m", status="merged"))
    assert store.claim_scene(tenant, "sc-m") is False


def race(n: int, fn: Callable[[], Any]) -> tuple[list[Any], list[BaseException]]:
    """Run ``fn`` in ``n`` threads released at the same moment; their results and exceptions."""
    results: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run() -> None:
        barrier.wait()
        try:
            results.append(fn())
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def test_scene_claimed_once_under_concurrency(store: GraphStore, tenant: str) -> None:
    store.upsert_scene(scene(tenant, "sc-race"))
    results, errors = race(8, lambda: store.claim_scene(tenant, "sc-race"))
    assert errors == []
    assert sorted(results) == [False] * 7 + [True]


def test_concurrent_plans_writing_the_same_keys_all_land(store: GraphStore, tenant: str) -> None:
    """Writers racing to create the same nodes and edges (the same env merged from several
    threads) all succeed, and each key exists once."""
    nodes = [node(tenant, f"n-{i:03d}", f"thing {i}") for i in range(300)]
    edges = [edge(tenant, f"e-{i:03d}", "containment", "n-000", f"n-{i:03d}") for i in range(1, 300)]
    plan = MergePlan(tenant_id=tenant, env_name=ENV, nodes=nodes, edges=edges,
                     meta={"env_name": ENV, "graph_version": 1})
    _, errors = race(4, lambda: store.apply_plan(plan))
    assert errors == []
    graph = store.world_graph(tenant, ENV)
    assert (len(graph["nodes"]), len(graph["edges"])) == (300, 299)
    assert graph["meta"]["counts"]["nodes"] == 300 and graph["meta"]["counts"]["edges"] == 299


def test_list_scenes_filters(store: GraphStore, tenant: str) -> None:
    store.upsert_scene(scene(tenant, "s-2", status="pending", minute=2))
    store.upsert_scene(scene(tenant, "s-1", status="failed", minute=1))
    store.upsert_scene(scene(tenant, "s-3", status="merged", minute=3))
    store.upsert_scene(scene(tenant, "s-4", status="pending", env="garden", minute=0))
    store.upsert_scene(scene(tenant + "-b", "s-5", status="pending"))

    assert [s["id"] for s in store.list_scenes(tenant)] == ["s-4", "s-1", "s-2", "s-3"]
    assert [s["id"] for s in store.list_scenes(tenant, ENV)] == ["s-1", "s-2", "s-3"]
    assert [s["id"] for s in store.list_scenes(tenant, None, ["pending", "failed"])] == ["s-4", "s-1", "s-2"]
    assert [s["id"] for s in store.list_scenes(tenant, "garden", ["merged"])] == []
    everyone = [s["id"] for s in store.list_scenes(None, None, ["pending"]) if s["tenant_id"].startswith(tenant)]
    assert everyone == ["s-4", "s-5", "s-2"]  # created_at, then id
    assert store.environments(tenant) == ["garden", ENV]


def test_neighborhood(store: GraphStore, tenant: str) -> None:
    canvas = {"id": "canvas-n", "name": "Board",
              "actions": [{"id": "a2", "type": "drag", "timestamp": (T0 + timedelta(seconds=5)).isoformat()},
                          {"id": "a1", "type": "click", "timestamp": T0.isoformat()}]}
    e1, e2 = add(store, tenant, episode(tenant, canvas=canvas), episode(tenant, minutes=1))
    store.add_feedback(tenant, feedback(tenant, e1, 0.5, n=1))
    store.add_feedback(tenant, feedback(tenant, e1, -1.0, n=0))
    store.upsert_scene(scene(tenant, "scene-1", episode_id=e1))
    store.apply_plan(first_plan(tenant, episode_id=e1))

    hood = store.neighborhood(tenant, [e1, e2, "missing"])
    assert set(hood) == {e1, e2}
    h1 = hood[e1]
    assert h1["canvas"] == store.get_canvas(tenant, "canvas-n")
    assert [a["action_id"] for a in h1["canvas_actions"]] == ["a1", "a2"]
    assert [f["feedback_score"] for f in h1["feedback"]] == [-1.0, 0.5]
    assert [s["id"] for s in h1["scenes"]] == ["scene-1"] and h1["scenes"][0]["status"] == "merged"
    graph = store.world_graph(tenant, ENV)
    assert h1["nodes"] == graph["nodes"]  # every node of the plan came from scene-1
    assert h1["rules"] == graph["rules"]
    assert hood[e2] == {"canvas": None, "canvas_actions": [], "feedback": [], "scenes": [], "nodes": [], "rules": []}


def test_stats(store: GraphStore, tenant: str) -> None:
    canvas = {"id": "cv", "name": "C", "actions": [{"id": "a1", "type": "click"}]}
    e1, _ = add(store, tenant, episode(tenant, canvas=canvas), episode(tenant, agent="agent-2"))
    store.add_feedback(tenant, feedback(tenant, e1, 1.0))
    store.apply_plan(first_plan(tenant, episode_id=e1))
    assert store.stats(tenant) == {"episodes": 2, "agents": 2, "feedback": 1, "canvases": 1, "canvas_audits": 1,
                                   "scenes": 1, "nodes": 5, "edges": 3, "rules": 1, "indexed": 0}
    store.set_index_status(tenant, [e1], "indexed")  # what the index holds, as the store marks it
    assert store.stats(tenant)["indexed"] == 1


# ------------------------------------------------------------------------- both stores at once
@pytest.mark.neo4j
def test_both_stores_hold_the_same_bytes(tmp_path: Path, request: pytest.FixtureRequest, tenant: str) -> None:
    """The same plans applied to both stores give identical world graphs and neighborhoods."""
    stores = [_open("embedded", tmp_path, request), _open("neo4j", tmp_path, request)]
    try:
        dumps = []
        for s in stores:
            (eid,) = add(s, tenant, episode(tenant, episode_id=f"ep-{tenant}"))
            s.apply_plan(first_plan(tenant, episode_id=eid))
            s.apply_plan(second_plan(tenant))
            dumps.append((canonical(s.world_graph(tenant, ENV)), canonical(s.neighborhood(tenant, [eid])),
                          canonical(s.load_view(tenant, ENV, ["n-key"]).__dict__)))
        assert dumps[0] == dumps[1]
    finally:
        for s in stores:
            s.close()
