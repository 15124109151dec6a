"""A query that reaches only the world part is answered from a projection of the world part alone
(opener.WORLD_ONLY_MIN_EPISODES; reach.world_only decides): the same rows as the full projection,
fresh after writes, and replaced by the full projection for the first query that needs more."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.unit.kg.test_cypher_embedded import CONTRACT, ENV, _same, copy_tenant, world  # noqa: F401 - fixture
from worldgraph import WorldModel
from worldgraph.kg.embedded.cypher import opener as opener_module
from worldgraph.kg.embedded.cypher.reach import world_only
from worldgraph.memory.embeddings import HashingEmbedder


@pytest.mark.parametrize(("query", "alone"), [
    ("MATCH (r:Rule {tenant_id: $tenant_id}) RETURN r.condition, count(r) AS n", True),
    ("MATCH (a:Entity)-[:CONTAINS*1..3]->(x) RETURN count(x)", True),  # x: an end of a world relationship
    ("MATCH (a)<-[:CONTAINS]-(b:Entity) RETURN a", True),
    ("MATCH (a)-[f:FACT {predicate: 'works_at'}]->(b) RETURN a.name, b.name", True),  # facts are world edges
    ("MATCH ()-[c:CONTAINS]->(x:WorldNode) RETURN count(c)", True),
    ("MATCH (x:Entity) RETURN size([(x)-[:CONTAINS]->(y) | y]) AS n", True),
    ("MATCH (n:Entity) WHERE EXISTS { MATCH (n)-[:CONTAINS]->(m) } RETURN n", True),
    ("RETURN 1 AS one", True),
    ("MATCH (n) RETURN count(n)", False),  # every table
    ("MATCH(n) RETURN count(n)", False),
    ("MATCH (n:Entity) MATCH (m) RETURN m", False),
    ("MATCH (n:Entity), (m) RETURN m", False),
    ("MATCH p=(n) RETURN p", False),
    ("MATCH (n {name: 'x'}) RETURN n", False),
    ("MATCH (n:Entity) RETURN n UNION MATCH (m) RETURN m", False),
    ("MATCH (a:Entity)-[:CONTAINS]->(x) MATCH (x) RETURN x", False),
    ("MATCH (x:Entity)-->(y) RETURN y", False),  # untyped: any relationship
    ("MATCH (x:Entity)-[r]->(y) RETURN y", False),
    ("MATCH (x:Entity)-[:CONTAINS|NEXT]->(y) RETURN y", False),
    ("MATCH (x:Entity) WHERE exists((x)-[]->()) RETURN x", False),
    ("MATCH (x:Entity) RETURN COUNT { MATCH (z) } AS n", False),
    ("MATCH (s:Scene)-[:FROM_EPISODE]->(e) RETURN e", False),  # its end is an Episode
    ("MATCH (e:Episode) RETURN e", False),
    ("match (e:episode) return e", False),
    ("MATCH (x:`Episode`) RETURN x", False),  # a quoted name is not read
    ("MATCH (é) RETURN count(é) AS n", False),  # nor a name outside ASCII
    ("MATCH (n:Entity {name: 'café'}) RETURN n", True),  # (inside a string, anything)
    ("MATCH (r:Rule) WHERE r.agent = 1 RETURN r", False),  # a word naming an episode table, anywhere
    ("MATCH " + "(x {a: " * 3000, False),  # the end of a property map not found near: not joined
])
def test_what_reaches_only_the_world_part(query: str, alone: bool) -> None:
    assert world_only(query) is alone


def _rows(wm: WorldModel, tenant: str, queries: list[tuple[str, dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    return [wm.cypher(tenant, q, p) for q, p in queries]


def test_the_world_part_alone_returns_the_full_projections_rows(world: tuple[WorldModel, str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    wm, src = world
    tenant = f"alone-{uuid.uuid4().hex[:8]}"
    copy_tenant(wm.store, wm.store, src, tenant)
    alone = [(q, {"env": ENV, **p}) for q, p, _ in CONTRACT if world_only(q)]
    assert len(alone) >= 30
    full_rows = _rows(wm, tenant, alone)  # a small tenant: the full projection
    assert wm.store.projections.current(tenant).scope == "full"  # type: ignore[attr-defined]
    wm.store.projections.drop(tenant)  # type: ignore[attr-defined]
    monkeypatch.setattr(opener_module, "WORLD_ONLY_MIN_EPISODES", 0)
    alone_rows = _rows(wm, tenant, alone)
    proj = wm.store.projections.current(tenant)  # type: ignore[attr-defined]
    assert proj.scope == "world"
    import ladybug

    db = ladybug.Database(str(proj.path), read_only=True)
    try:
        tables = ladybug.Connection(db).execute("CALL show_tables() RETURN name").get_all()
    finally:
        db.close()
    assert tables and not any(name in ("Episode", "FROM_EPISODE") for (name,) in tables)
    for (query, _), got, want in zip(alone, alone_rows, full_rows, strict=True):
        assert _same(got, want, "ORDER BY" in query), query
    # the first query that needs more replaces it with the full projection
    count = "MATCH (n) RETURN count(n) AS n"
    replaced = wm.cypher(tenant, count)
    assert wm.store.projections.current(tenant).scope == "full" and proj.closed  # type: ignore[attr-defined]
    wm.store.projections.drop(tenant)  # type: ignore[attr-defined]
    monkeypatch.setattr(opener_module, "WORLD_ONLY_MIN_EPISODES", 10**9)
    assert replaced == wm.cypher(tenant, count)
    nodes = wm.cypher(tenant, "MATCH (n:WorldNode) RETURN count(n) AS n")[0]["n"]
    assert replaced[0]["n"] > nodes + wm.cypher(tenant, "MATCH (e:Episode) RETURN count(e) AS n")[0]["n"] > nodes


def test_the_world_part_alone_stays_fresh(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opener_module, "WORLD_ONLY_MIN_EPISODES", 0)
    monkeypatch.setattr(opener_module, "SAVE_MIN_ROWS", 0)  # the full projection is saved, in the same folder
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        wm.record_experience("t", {"agent_id": "a", "agent_role": "r", "task_type": "t", "task_description": "first",
                                   "outcome": "success"})
        delta = {"entities": [{"ref": "k", "name": "key", "type": "item"}], "states": [], "edges": [], "rules": []}
        assert wm.apply_delta("t", ENV, delta).ok
        things = "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS name ORDER BY name"
        assert wm.cypher("t", things) == [{"name": "key"}]
        proj = wm.store.projections.current("t")  # type: ignore[attr-defined]
        assert proj.scope == "world"
        # built in a child process into a file saved as the world part's, never as the full projection
        version = wm.store.db.version()  # type: ignore[attr-defined]
        assert proj.path is not None and wm.store.saved.find("t", version, "world")[0] == proj.path  # type: ignore[attr-defined,index]
        assert wm.store.saved.find("t", version) is None  # type: ignore[attr-defined]
        # an episode write leaves it as it is (it holds none); a world write is seen
        wm.record_experience("t", {"agent_id": "a", "agent_role": "r", "task_type": "t", "task_description": "second",
                                   "outcome": "success"})
        delta = {"entities": [{"ref": "d", "name": "door", "type": "item"}], "states": [], "edges": [], "rules": []}
        assert wm.apply_delta("t", ENV, delta).ok
        assert wm.cypher("t", things) == [{"name": "door"}, {"name": "key"}]
        assert wm.store.projections.current("t") is proj  # type: ignore[attr-defined]
        tasks = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS task ORDER BY task"
        assert wm.cypher("t", tasks) == [{"task": "first"}, {"task": "second"}]
        assert wm.cypher("t", things) == [{"name": "door"}, {"name": "key"}]  # the full one serves it now
        assert wm.store.projections.current("t").scope == "full"  # type: ignore[attr-defined]
        saved = wm.store.saved.find("t", wm.store.db.version())  # type: ignore[attr-defined]
        assert proj.closed and saved is not None and saved[0] == wm.store.projections.current("t").path  # type: ignore[attr-defined]
        # the world part's file stays (the full one's rebuilds sweep only their own scope)
        assert wm.store.saved.find("t", wm.store.db.version(), "world")[0] == proj.path  # type: ignore[attr-defined,index]
    finally:
        wm.close()


def test_a_failed_child_builds_the_world_part_in_process(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("the projection build process failed (1): killed")

    monkeypatch.setattr(opener_module, "WORLD_ONLY_MIN_EPISODES", 0)
    monkeypatch.setattr(opener_module, "build_in_child", fail)
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        delta = {"entities": [{"ref": "k", "name": "key", "type": "item"}], "states": [], "edges": [], "rules": []}
        assert wm.apply_delta("t", ENV, delta).ok
        assert wm.cypher("t", "MATCH (n:Entity) RETURN n.name AS name") == [{"name": "key"}]
        proj = wm.store.projections.current("t")  # type: ignore[attr-defined]
        assert proj.scope == "world" and wm.store.cypher_runner.scratch.holds(proj.path)  # type: ignore[attr-defined]
        folder = wm.store.saved.folder  # type: ignore[attr-defined]
        assert not folder.exists() or not [p for p in folder.iterdir() if not p.name.startswith("scratch-")]  # gone
    finally:
        wm.close()


def test_a_saved_world_part_is_reopened_by_the_next_process(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(opener_module, "WORLD_ONLY_MIN_EPISODES", 0)
    rules = "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS name ORDER BY name"
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        delta = {"entities": [{"ref": "k", "name": "key", "type": "item"}], "states": [], "edges": [], "rules": []}
        assert wm.apply_delta("t", ENV, delta).ok
        assert wm.cypher("t", rules) == [{"name": "key"}]
        built = wm.store.projections.current("t").path  # type: ignore[attr-defined]
    finally:
        wm.close()

    def fail(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("built again")

    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        # an episode write does not make the world part stale
        wm.record_experience("t", {"agent_id": "a", "agent_role": "r", "task_type": "t", "task_description": "x",
                                   "outcome": "success"})
        with monkeypatch.context() as m:
            m.setattr(opener_module, "build_in_child", fail)
            assert wm.cypher("t", rules) == [{"name": "key"}]
        proj = wm.store.projections.current("t")  # type: ignore[attr-defined]
        assert proj.path == built and proj.scope == "world"
        # a world write is applied to it, and saved
        delta = {"entities": [{"ref": "d", "name": "door", "type": "item"}], "states": [], "edges": [], "rules": []}
        assert wm.apply_delta("t", ENV, delta).ok
        assert wm.cypher("t", rules) == [{"name": "door"}, {"name": "key"}]
        assert wm.store.saved.find("t", wm.store.db.version(), "world")[0] == built  # type: ignore[attr-defined,index]
    finally:
        wm.close()
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as other:  # a world write elsewhere, no query
        delta = {"entities": [{"ref": "w", "name": "window", "type": "item"}], "states": [], "edges": [], "rules": []}
        assert other.apply_delta("t", ENV, delta).ok
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        with monkeypatch.context() as m:  # reopened, compared with the world rows, brought up to date
            m.setattr(opener_module, "build_in_child", fail)
            assert wm.cypher("t", rules) == [{"name": "door"}, {"name": "key"}, {"name": "window"}]
        assert wm.store.projections.current("t").path == built  # type: ignore[attr-defined]
        # purge after a forget deletes both scopes' files
        folder = wm.store.saved.folder  # type: ignore[attr-defined]
        wm.store.saved.remove("t")  # type: ignore[attr-defined]
        assert not [p for p in folder.iterdir() if p.name.endswith(".json")]
    finally:
        wm.close()
