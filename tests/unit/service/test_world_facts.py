"""Facts of any kind through the public API, on both stores: merged (single-valued ones on the
timeline, a late one as closed history), counted, read back, exported and imported byte for byte,
and reached with the same Cypher on both (one FACT relationship type, the predicate a property)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.unit.service.test_forget import graph_kw, tenant, wm  # noqa: F401 - fixtures: a model on each store
from worldgraph import WorldModel
from worldgraph.kg.composed import ComposedStore
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.world.merge.engine import plan_merge

ENV = "company"


def at(hour: int) -> str:
    return f"2026-02-01T{hour:02d}:00:00.000000+00:00"


def scene(hour: int) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "trigger_reason": "news", "created_at": at(hour), "current_round": hour}


def delta(*edges: dict[str, Any]) -> dict[str, Any]:
    people = [{"ref": n, "name": n, "type": "person" if n == "alice" else "company"}
              for n in ("alice", "acme", "beta", "gamma")]
    return {"entities": people, "states": [], "edges": list(edges), "rules": []}


def fact(src: str, predicate: str, dst: str, **kw: Any) -> dict[str, Any]:
    return {"relation": "fact", "predicate": predicate, "src_ref": src, "dst_ref": dst,
            "evidence": f"{src} {predicate} {dst}", **kw}




def runs(graph: dict[str, Any]) -> list[tuple[str, str, str, str, str | None]]:
    name = {n["id"]: n["name"] for n in graph["nodes"]}
    return sorted((name[e["src_id"]], e["predicate"], name[e["dst_id"]], e["valid_from"], e["valid_to"])
                  for e in graph["edges"] if e["relation"] == "fact")


def test_facts_merge_read_export_and_import_alike_on_both_stores(wm: WorldModel, tenant: str, tmp_path: Path) -> None:
    r1 = wm.apply_delta(tenant, ENV, delta(fact("alice", "works_at", "acme", single_valued=True),
                                           fact("alice", "customer_of", "acme")), scene=scene(1))
    assert r1.ok and r1.dropped == [] and len(r1.created["edges"]) == 2
    wm.apply_delta(tenant, ENV, delta(fact("alice", "works_at", "beta", single_valued=True)), scene=scene(5))
    late = wm.apply_delta(tenant, ENV, delta(fact("alice", "works_at", "gamma", single_valued=True)), scene=scene(3))
    assert late.ok and len(late.created["edges"]) == 1  # gamma, as closed history; acme now ends at 3
    graph = wm.world_graph(tenant, ENV)
    assert runs(graph) == [("alice", "customer_of", "acme", at(1), None),
                           ("alice", "works_at", "acme", at(1), at(3)),
                           ("alice", "works_at", "beta", at(5), None),
                           ("alice", "works_at", "gamma", at(3), at(5))]
    assert {e["single_valued"] for e in graph["edges"] if e["predicate"] == "works_at"} == {True}
    assert wm.stats(tenant)["edges"] == 4 and graph["meta"]["counts"]["edges"] == 4
    assert [e["edges"] for e in wm.list_environments(tenant)] == [4]
    # an unknown relation is dropped with the fix in its reason, the rest merges
    odd = wm.apply_delta(tenant, ENV, delta(fact("alice", "knows", "beta"),
                                            {"relation": "employs", "src_ref": "beta", "dst_ref": "alice"}))
    assert [d.reason for d in odd.dropped][0].startswith("unknown relation 'employs'")
    assert "relation: fact" in odd.dropped[0].reason and len(odd.created["edges"]) == 1

    first = wm.export(tenant, ENV, tmp_path / "a")
    wm.forget_environment(tenant, ENV)
    wm.import_snapshot(tenant, first)
    second = wm.export(tenant, ENV, tmp_path / "b")
    for name in ("nodes.jsonl", "edges.jsonl", "rules.jsonl", "scenes.jsonl", "meta.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    assert runs(wm.world_graph(tenant, ENV)) == sorted([*runs(graph), ("alice", "knows", "beta", odd_time(wm, tenant),
                                                                        None)])

    # the same Cypher on both stores: FACT is a rare type, so Neo4j may plan it as a scan across
    # tenants (refused) unless USING INDEX pins the start; the embedded store takes the same text
    rows = wm.cypher(tenant, "MATCH (a:Entity {tenant_id: $tenant_id})-[f:FACT]->(b:Entity {tenant_id: $tenant_id}) "
                             "USING INDEX a:Entity(tenant_id) WHERE f.predicate = 'works_at' AND f.valid_to IS NULL "
                             "RETURN a.name AS who, b.name AS firm, f.single_valued AS one")
    assert rows == [{"who": "alice", "firm": "beta", "one": True}]
    rows = wm.cypher(tenant, "MATCH (a)-[f:FACT {predicate: 'works_at'}]->(b:Entity {tenant_id: $tenant_id}) "
                             "USING INDEX b:Entity(tenant_id) RETURN b.name AS firm, f.valid_to IS NULL AS now "
                             "ORDER BY firm")
    assert rows == [{"firm": "acme", "now": False}, {"firm": "beta", "now": True}, {"firm": "gamma", "now": False}]


def odd_time(wm: WorldModel, tenant: str) -> str:
    """When the scene-less merge placed its fact (the merge time)."""
    graph = wm.world_graph(tenant, ENV)
    return next(e["valid_from"] for e in graph["edges"] if e.get("predicate") == "knows")


@pytest.mark.neo4j
def test_both_stores_hold_the_same_fact_bytes(tmp_path: Path, neo4j_server: dict[str, str], tenant: str) -> None:
    """One plan with facts, applied to each store: the same world graph and the same view."""
    from worldgraph.kg.neo4j.store import Neo4jGraphStore
    from worldgraph.kg.records import GraphView

    stores: list[ComposedStore] = [
        EmbeddedGraphStore(tmp_path / "worldgraph.db"),
        Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])]
    try:
        view = GraphView(tenant_id=tenant, env_name=ENV)
        plan, _ = plan_merge(view, delta(fact("alice", "works_at", "acme", single_valued=True),
                                         fact("alice", "customer_of", "beta")), None, at(1))
        out = []
        for store in stores:
            store.apply_plan(plan)
            alice = next(n["id"] for n in plan.nodes if n["name"] == "alice")
            out.append((store.world_graph(tenant, ENV), store.load_view(tenant, ENV, [alice]).__dict__,
                        store.stats(tenant)["edges"]))
        assert out[0] == out[1]
        assert {e["predicate"] for e in out[0][0]["edges"]} == {"works_at", "customer_of"}
        assert out[0][2] == 2
    finally:
        for store in stores:
            store.close()
