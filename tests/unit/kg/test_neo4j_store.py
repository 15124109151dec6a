"""Neo4j-only behaviour: read-only tenant-scoped Cypher, schema, atomic plans, unreachable servers."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from tests.unit.kg.test_store_contract import ENV, add, edge, episode, first_plan, node, scene
from worldgraph.errors import CypherQueryError, InvalidInputError, ReadOnlyQueryError, StoreUnavailableError, TenantScopeError
from worldgraph.kg import cypher_guard
from worldgraph.kg.cypher_guard import check_text
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.store import Neo4jGraphStore
from worldgraph.kg.records import MergePlan


@pytest.fixture
def store(neo4j_server: dict[str, str]) -> Iterator[Neo4jGraphStore]:
    s = Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])
    yield s
    s.close()


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


# ------------------------------------------------------------------------- the guard (no server)
@pytest.mark.parametrize("query, word", [
    ("CREATE (n:Episode {tenant_id: $tenant_id})", "CREATE"),
    ("create (n:Episode {tenant_id: $tenant_id})", "CREATE"),
    ("MERGE (n:Episode {tenant_id: $tenant_id, id: 'x'})", "MERGE"),
    ("MATCH (n {tenant_id: $tenant_id}) SET n.name = 'x'", "SET"),
    ("match (n {tenant_id: $tenant_id}) set n.name = 'x'", "SET"),
    ("MATCH (n {tenant_id: $tenant_id}) DETACH DELETE n", "DETACH"),
    ("MATCH (n {tenant_id: $tenant_id}) delete n", "DELETE"),
    ("MATCH (n {tenant_id: $tenant_id}) REMOVE n.name", "REMOVE"),
    ("LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row, $tenant_id", "LOAD CSV"),
    ("Load Csv WITH HEADERS FROM 'https://x/y.csv' AS r RETURN $tenant_id", "LOAD CSV"),
    ("MATCH (n {tenant_id: $tenant_id}) FOREACH (x IN [1] | SET n.a = x)", "FOREACH"),
    ("MATCH (n {tenant_id: $tenant_id}) CALL (n) { RETURN 1 AS one } IN TRANSACTIONS RETURN n", "IN TRANSACTIONS"),
    ("DROP INDEX wg_episode_tenant", "DROP"),
    ("SHOW USERS YIELD user WHERE $tenant_id IS NOT NULL RETURN user", "SHOW"),
    ("USE system MATCH (n {tenant_id: $tenant_id}) RETURN n", "USE"),
    ("MATCH (n) WHERE n.tenant_id = $tenant_id /* x */ SET/**/n.a = 1", "SET"),
])
def test_writes_are_refused_before_sending(query: str, word: str) -> None:
    with pytest.raises(ReadOnlyQueryError, match=word.replace("(", r"\(")):
        check_text(query)


@pytest.mark.parametrize("query", [
    "CALL dbms.killQueries(['1']) YIELD queryId WHERE $tenant_id IS NOT NULL RETURN queryId",
    "CALL apoc.cypher.runWrite('CREATE (n)', {}) YIELD value RETURN value, $tenant_id",
    "call `db`.`createLabel`('X') RETURN $tenant_id",
    "CALL db.index.fulltext.queryNodes('wg_episode_text', 'x') YIELD node RETURN node, $tenant_id",
    "CALL db.labels() YIELD label WHERE $tenant_id IS NOT NULL RETURN label",  # labels of every tenant
])
def test_procedures_outside_the_allow_list_are_refused(query: str) -> None:
    with pytest.raises(ReadOnlyQueryError, match="procedures"):
        check_text(query)


@pytest.mark.parametrize("query", [
    "MATCH (e:Episode {tenant_id: $tenant_id}) WHERE e.task_description CONTAINS 'CREATE' RETURN e.id",
    'MATCH (e:Episode {tenant_id: $tenant_id}) WHERE e.outcome = "merge; DETACH DELETE" RETURN e.id',
    "MATCH (e:Episode {tenant_id: $tenant_id}) // set nothing, delete nothing\nRETURN e.created_at, e.`set`",
    "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e {.id, set: e.outcome} AS m, $tenant_id AS t",
    "MATCH (e:Episode {tenant_id: $tenant_id}) CALL (e) { MATCH (e)-[:PERFORMED_BY]->(a) RETURN a } RETURN a",
    "MATCH p = (start:Episode {tenant_id: $tenant_id})-[*1..2]-(stop) RETURN p",
])
def test_read_queries_pass_the_guard(query: str) -> None:
    check_text(query)


@pytest.mark.neo4j
def test_queries_must_start_from_the_tenant(store: Neo4jGraphStore, tenant: str) -> None:
    with pytest.raises(TenantScopeError, match=r"\{tenant_id: \$tenant_id\}"):
        store.cypher(tenant, "MATCH (e:Episode) RETURN e LIMIT 5")
    with pytest.raises(TenantScopeError, match=r"\{tenant_id: \$tenant_id\}"):
        store.cypher(tenant, "MATCH (e:Episode) WHERE e.note = '$tenant_id' RETURN e")  # inside a string: no


# ------------------------------------------------------------------------- cypher on the server
@pytest.mark.neo4j
def test_tenant_scoped_query_returns_plain_values(store: Neo4jGraphStore, tenant: str) -> None:
    ids = add(store, tenant, episode(tenant), episode(tenant, minutes=1, task="file receipts"))
    store.apply_plan(first_plan(tenant, episode_id=ids[0]))
    rows = store.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e, e.id AS id ORDER BY e.ts")
    assert [r["id"] for r in rows] == ids
    assert rows[0]["e"]["record"] == store.get_episodes(tenant, [ids[0]])[ids[0]]  # record decoded
    assert rows[0]["e"]["agent_id"] == "agent-1"

    rows = store.cypher(tenant, "MATCH p = (a:WorldNode {tenant_id: $tenant_id, id: $src})-[r:CONTAINS]->(b) "
                                "RETURN p, r, b.name AS name", {"src": "n-table"})
    assert len(rows) == 1 and rows[0]["name"] == "brass key"
    path = rows[0]["p"]
    assert [x["id"] for x in path] == ["n-table", "e-contains", "n-key"]
    rel = rows[0]["r"]
    assert rel["id"] == "e-contains" and rel["record"]["relation"] == "containment"
    assert rel["record"]["valid_to"] is None and "valid_to" not in rel  # Neo4j keeps no nulls; the record does
    counted = store.cypher(tenant, "MATCH (n:WorldNode {tenant_id: $tenant_id}) RETURN n.kind AS kind, count(*) AS n "
                                   "ORDER BY kind")
    assert counted == [{"kind": "entity", "n": 3}, {"kind": "state", "n": 2}]
    assert store.cypher(tenant, "RETURN $tenant_id AS t, date('2026-01-05') AS d") == [{"t": tenant, "d": "2026-01-05"}]


@pytest.mark.neo4j
def test_cross_tenant_results_are_refused(store: Neo4jGraphStore, tenant: str) -> None:
    add(store, tenant, episode(tenant))
    other = tenant + "-other"
    add(store, other, episode(other))
    leaky = "MATCH (e:Episode) WHERE e.tenant_id STARTS WITH left($tenant_id, 14) RETURN e"
    with pytest.raises(TenantScopeError, match=r"not by exactly \$tenant_id"):
        store.cypher(tenant, leaky)
    assert len(store.cypher(other, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e")) == 1


@pytest.mark.neo4j
def test_tenant_id_cannot_be_overridden(store: Neo4jGraphStore, tenant: str) -> None:
    with pytest.raises(ReadOnlyQueryError, match="tenant_id"):
        store.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e", {"tenant_id": "victim"})
    assert store.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e", {"tenant_id": tenant}) == []


@pytest.mark.neo4j
def test_server_refuses_writes_the_guard_would_miss(store: Neo4jGraphStore, tenant: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: the query runs in a READ transaction, so the server refuses writes too."""
    monkeypatch.setattr(cypher_guard, "check_text", lambda query: None)
    monkeypatch.setattr(cypher_guard, "check_plan", lambda plan, database, query_type="r": None)
    with pytest.raises(ReadOnlyQueryError, match="(?i)read access mode|not allowed"):
        store.cypher(tenant, "CREATE (n:Episode {tenant_id: $tenant_id, id: 'sneaky'}) RETURN n")
    assert store.get_episodes(tenant, ["sneaky"]) == {}


@pytest.mark.neo4j
def test_bad_cypher_is_a_clear_error(store: Neo4jGraphStore, tenant: str) -> None:
    with pytest.raises(CypherQueryError, match="Neo4j could not run the query"):
        store.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id) RETURN e")


# ------------------------------------------------------------------------- schema and atomicity
@pytest.mark.neo4j
def test_schema_is_created_once_and_versioned(store: Neo4jGraphStore, neo4j_server: dict[str, str]) -> None:
    again = Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])
    again.close()
    with store.db.driver.session(database=store.database) as session:
        names = {r["name"] for r in session.run("SHOW CONSTRAINTS YIELD name")}
        version = session.run("MATCH (s:WorldgraphSchema) RETURN s.version AS v").single()
    assert {"wg_episode_key", "wg_node_ukey", "wg_rule_ukey", "wg_contains_ukey", "wg_scene_key"} <= names
    assert not {"wg_node_key", "wg_rule_key", "wg_contains_key"} & names  # schema 1's composite keys
    assert version is not None and version["v"] == q.SCHEMA_VERSION == 4
    with store.db.driver.session(database=store.database) as session:
        tenant_indexes = {tuple(r["labelsOrTypes"]) for r in session.run(
            "SHOW INDEXES YIELD labelsOrTypes, properties WHERE properties = ['tenant_id'] RETURN labelsOrTypes")}
    assert {(label,) for label in q.TENANT_LABELS} <= tenant_indexes


@pytest.mark.neo4j
def test_processes_creating_the_fact_schema_at_once_all_write(neo4j_server: dict[str, str]) -> None:
    """Several processes' first world writes on a database without the FACT key (N update workers
    started together): their CREATE CONSTRAINTs deadlock and Neo4j aborts all but one. Each write
    must still succeed (a failed one left its scene packet failed, never merged)."""
    def fresh() -> Neo4jGraphStore:
        return Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])

    for _ in range(3):
        stores = [fresh() for _ in range(6)]
        tenants = [f"t-{uuid.uuid4().hex[:12]}" for _ in stores]
        with stores[0].db.driver.session(database=stores[0].database) as session:
            session.run("DROP CONSTRAINT wg_fact_ukey IF EXISTS").consume()
        start, errors = threading.Barrier(len(stores)), []

        def write(store: Neo4jGraphStore, tenant: str) -> None:
            start.wait()
            try:
                store.apply_plan(first_plan(tenant))
            except Exception as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)
        threads = [threading.Thread(target=write, args=pair) for pair in zip(stores, tenants)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        try:
            assert errors == []
            assert all(len(s.world_graph(t, ENV)["nodes"]) == 5 for s, t in zip(stores, tenants))
            with stores[0].db.driver.session(database=stores[0].database) as session:
                assert "wg_fact_ukey" in {r["name"] for r in session.run("SHOW CONSTRAINTS YIELD name")}
        finally:
            for s in stores:
                s.close()


@pytest.mark.neo4j
def test_schema_1_databases_are_given_keys(store: Neo4jGraphStore, neo4j_server: dict[str, str], tenant: str) -> None:
    """A database written by schema 1 (composite keys, no `key` property) is migrated on open."""
    plan = MergePlan(tenant_id=tenant, env_name=ENV, nodes=[node(tenant, "n-a", "a"), node(tenant, "n-b", "b")],
                     edges=[edge(tenant, "e-ab", "containment", "n-a", "n-b")],
                     meta={"env_name": ENV, "graph_version": 1})
    store.apply_plan(plan)
    before = store.world_graph(tenant, ENV)
    with store.db.driver.session(database=store.database) as session:
        session.run("MATCH (n:WorldNode {tenant_id: $t}) REMOVE n.key", t=tenant).consume()
        session.run("MATCH ()-[r:CONTAINS {tenant_id: $t}]->() REMOVE r.key", t=tenant).consume()
        session.run("CREATE CONSTRAINT wg_node_key IF NOT EXISTS FOR (n:WorldNode) "
                    "REQUIRE (n.tenant_id, n.env_name, n.id) IS UNIQUE").consume()
        session.run("MATCH (s:WorldgraphSchema {name: 'worldgraph'}) SET s.version = 1").consume()
    assert store.world_graph(tenant, ENV)["nodes"] == []  # found by key only
    again = Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])
    try:
        assert again.world_graph(tenant, ENV) == before
        with again.db.driver.session(database=again.database) as session:
            names = {r["name"] for r in session.run("SHOW CONSTRAINTS YIELD name")}
            key = session.run("MATCH (n:WorldNode {tenant_id: $t, id: 'n-a'}) RETURN n.key AS k", t=tenant).single()
        assert "wg_node_key" not in names and "wg_node_ukey" in names
        assert key is not None and key["k"] == q.world_key(tenant, ENV, "n-a")
    finally:
        again.close()


@pytest.mark.neo4j
def test_index_state_is_kept_out_of_the_record_json(store: Neo4jGraphStore, tenant: str) -> None:
    """Marking episodes indexed sets two properties (no record rewrite); the JSON never holds a
    stale state, and cypher() returns the record with the current one."""
    ids = add(store, tenant, episode(tenant, minutes=0), episode(tenant, minutes=1))
    store.set_index_status(tenant, ids, "failed", "embedder timed out")
    with store.db.driver.session(database=store.database) as session:
        stored = session.run("MATCH (e:Episode {tenant_id: $t}) RETURN e.record AS r", t=tenant).value()
    assert all("index_status" not in json.loads(r) and "index_error" not in json.loads(r) for r in stored)
    rows = store.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e")
    assert {(r["e"]["record"]["index_status"], r["e"]["record"]["index_error"]) for r in rows} == {
        ("failed", "embedder timed out")}


@pytest.mark.neo4j
def test_schema_2_index_errors_move_to_the_property(store: Neo4jGraphStore, neo4j_server: dict[str, str],
                                                    tenant: str) -> None:
    """Schema 2 kept index_error only in the record JSON; opening the database copies it over."""
    ids = add(store, tenant, episode(tenant, minutes=0))
    with store.db.driver.session(database=store.database) as session:
        session.run("MATCH (e:Episode {tenant_id: $t}) SET e.index_status = 'failed', "
                    "e.record = $record REMOVE e.index_error", t=tenant,
                    record=json.dumps({**store.get_episodes(tenant, ids)[ids[0]], "index_status": "failed",
                                       "index_error": "old timeout"})).consume()
        session.run("MATCH (s:WorldgraphSchema {name: 'worldgraph'}) SET s.version = 2").consume()
    again = Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])
    try:
        got = again.get_episodes(tenant, ids)[ids[0]]
        assert (got["index_status"], got["index_error"]) == ("failed", "old timeout")
    finally:
        again.close()


def test_world_keys_are_injective() -> None:
    parts = [("a", "b", "c"), ("a\u001fb", "c", "d"), ("a", "b\u001fc", "d"), ("a\u001e", "b", "c"),
             ("a", "\u001eb", "c"), ("a\u001e\u001f", "b", "c"), ("a", "\u001f\u001eb", "c")]
    keys = {q.world_key(*p) for p in parts}
    assert len(keys) == len(parts)
    for p in parts:
        for other in parts:
            assert q.world_key(*other).startswith(q.env_prefix(p[0], p[1])) == (other[:2] == p[:2])
            assert q.world_key(*other).startswith(q.tenant_prefix(p[0])) == (other[0] == p[0])


@pytest.mark.neo4j
def test_plan_with_a_dangling_edge_writes_nothing(store: Neo4jGraphStore, tenant: str) -> None:
    plan = MergePlan(tenant_id=tenant, env_name=ENV, nodes=[node(tenant, "n-a", "a")],
                     edges=[edge(tenant, "e-x", "containment", "n-a", "n-nowhere")],
                     meta={"env_name": ENV, "graph_version": 1})
    with pytest.raises(InvalidInputError, match="e-x"):
        store.apply_plan(plan)
    assert store.world_graph(tenant, ENV) == {"nodes": [], "edges": [], "rules": [], "scenes": [], "meta": None}


@pytest.mark.neo4j
def test_only_the_dangling_edges_are_named(store: Neo4jGraphStore, tenant: str) -> None:
    plan = MergePlan(tenant_id=tenant, env_name=ENV, nodes=[node(tenant, "n-a", "a"), node(tenant, "n-b", "b")],
                     edges=[edge(tenant, "e-ok", "containment", "n-a", "n-b"),
                            edge(tenant, "e-gone", "transition", "n-a", "n-nowhere"),
                            edge(tenant, "e-scene", "episodic", "n-a", "scene-nowhere")],
                     meta={"env_name": ENV, "graph_version": 1})
    with pytest.raises(InvalidInputError) as info:
        store.apply_plan(plan)
    assert "['e-gone', 'e-scene']" in str(info.value) and "e-ok" not in str(info.value)
    assert store.stats(tenant)["nodes"] == 0


def _operators(store: Neo4jGraphStore, query: str) -> list[str]:
    with store.db.driver.session(database=store.database) as session:
        plan = session.run("EXPLAIN " + query, {}).consume().plan
    out: list[str] = []
    todo = [plan]
    while todo:
        op = todo.pop()
        out.append(op["operatorType"].split("@")[0])
        todo += op.get("children", [])
    return out


@pytest.mark.neo4j
def test_bulk_writes_stream_their_rows(store: Neo4jGraphStore) -> None:
    """An Eager operator buffers every row of a batch before writing (a read/set conflict the
    planner sees, e.g. MATCH on row.props.src_id while SETting r.src_id): 2-3x slower plans."""
    queries = [q.UPSERT_EPISODES, q.UPSERT_AUDITS, q.LINK_SCENE_RULES,
               *(q.upsert_nodes(kind) for kind in q.NODE_LABELS), *(q.upsert_edges(rel) for rel in q.EDGE_TYPES),
               *(q.create_nodes(kind) for kind in q.NODE_LABELS), q.create_edges("containment"),
               q.create_edges("transition")]
    for query in queries:
        assert "Eager" not in _operators(store, query), query


@pytest.mark.neo4j
def test_episode_pages_come_in_index_order(store: Neo4jGraphStore) -> None:
    """iter_episodes (reindex) reads one page per query: an index seek that gives the order, no
    scan and no sort of the rest of the episodes behind the page."""
    operators = _operators(store, q.ITER_EPISODES)
    assert "NodeUniqueIndexSeek" in operators and "Limit" in operators, operators
    assert not [op for op in operators if "Scan" in op or op in ("Sort", "Top", "PartialSort")], operators


@pytest.mark.neo4j
def test_neighborhood_seeks_indexes_only(store: Neo4jGraphStore) -> None:
    operators = _operators(store, q.NEIGHBORHOOD)
    assert not [op for op in operators if "Scan" in op], operators
    assert operators.count("NodeIndexSeek") + operators.count("NodeUniqueIndexSeek") >= 5


# ------------------------------------------------------------------------- no server
def test_unreachable_server_names_the_uri_and_the_fix() -> None:
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as info:
        Neo4jGraphStore("bolt://127.0.0.1:1", "neo4j", "secret", connection_timeout=2.0)
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert "bolt://127.0.0.1:1" in message
    assert "worldgraph neo4j start" in message and "docker compose up -d neo4j" in message
    assert "NEO4J_URI" in message



@pytest.mark.neo4j
def test_a_plan_into_an_environment_without_nodes_counts_like_a_full_count(store: Neo4jGraphStore,
                                                                           tenant: str) -> None:
    """Into an environment without world nodes, apply_plan CREATEs and counts only rules and scenes
    (it knows it wrote every node and edge there is): the meta's counts equal a full count, with
    the rules and scenes of an earlier plan that had no nodes."""
    plan = first_plan(tenant)
    store.apply_plan(MergePlan(tenant_id=tenant, env_name=ENV, rules=plan.rules,
                               scene=scene(tenant, "scene-0", status="merged"),
                               meta={"env_name": ENV, "graph_version": 1}))
    store.apply_plan(plan)
    counts = store.world_graph(tenant, ENV)["meta"]["counts"]
    with store.db.driver.session(database=store.database) as session:
        full = session.run(q.ENV_COUNTS, tenant_id=tenant, env_name=ENV, prefix=q.env_prefix(tenant, ENV)).single()
    assert full is not None
    assert counts == {k: full[k] for k in ("nodes", "edges", "rules", "scenes")} == \
        {"nodes": 5, "edges": 3, "rules": 1, "scenes": 2}
