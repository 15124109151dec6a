"""The cypher() guard without a server: parameters, and plans shaped like Neo4j 5.26's EXPLAIN
output (operatorType "Name@db", args.Details), including shapes our server cannot produce
(user-defined functions need APOC, a foreign database needs Enterprise).
The same guard against a real server: tests/unit/kg/test_cypher_tenants.py."""

from __future__ import annotations

from typing import Any

import pytest

from worldgraph.errors import ReadOnlyQueryError, TenantScopeError
from worldgraph.kg.cypher_guard import bind_params, check_plan

SEEK = "RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $tenant_id, cache[e.tenant_id]"


def op(name: str, details: str | None = None, *children: dict[str, Any], db: str = "neo4j") -> dict[str, Any]:
    return {"operatorType": f"{name}@{db}", "args": {"Details": details} if details is not None else {},
            "identifiers": [], "children": list(children)}


def plan_of(details: str, name: str = "NodeIndexSeek") -> dict[str, Any]:
    return op("ProduceResults", "e", op("Projection", "e.id AS id", op(name, details)))


# ----------------------------------------------------------------------------- parameters
def test_tenant_id_is_bound_and_cannot_be_overridden() -> None:
    assert bind_params("acme", None) == {"tenant_id": "acme"}
    assert bind_params("acme", {"env": "x", "tenant_id": "acme"}) == {"env": "x", "tenant_id": "acme"}
    for params in ({"tenant_id": "victim"}, {"tenant_id": None}, {"Tenant_ID": "victim"},
                   {"\uff54enant_id": "victim"}, {" tenant_id ": "victim"}):
        with pytest.raises(TenantScopeError, match="tenant"):
            bind_params("acme", params)
    with pytest.raises(ReadOnlyQueryError, match="strings"):
        bind_params("acme", {1: "x"})  # type: ignore[dict-item]


# ----------------------------------------------------------------------------- plans that pass
@pytest.mark.parametrize("details, name", [
    (SEEK, "NodeIndexSeek"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $tenant_id", "NodeIndexSeekByRange"),
    ("UNIQUE e:Episode(tenant_id, id) WHERE tenant_id = $tenant_id AND id = $x, cache[e.id]", "NodeUniqueIndexSeek"),
    ("UNIQUE e:Episode(tenant_id, id) WHERE tenant_id = $tenant_id AND id IS NOT NULL", "NodeUniqueIndexSeek"),
    ("RANGE INDEX a:Episode(tenant_id, agent_id) WHERE tenant_id = $tenant_id AND agent_id IN $ids", "NodeIndexSeek"),
    ("RANGE INDEX `e x`:State(tenant_id) WHERE tenant_id = $tenant_id", "NodeIndexSeek"),
    ("RANGE INDEX `a``b`:Rule(tenant_id) WHERE tenant_id = $tenant_id", "NodeIndexSeek"),
])
def test_tenant_seeks_pass(details: str, name: str) -> None:
    check_plan(plan_of(details, name), "neo4j")


def test_row_operators_over_tenant_seeks_pass() -> None:
    plan = op("ProduceResults", "p", op("Apply", None,
              op("NodeIndexSeek", SEEK),
              op("VarLengthExpand(Pruning,BFS,All)", "(e)-[anon_0*..3]-(x)", op("Argument", "e"))))
    check_plan(plan, "neo4j")
    check_plan(op("ProduceResults", "t", op("Projection", "$tenant_id AS t, datetime.fromepochmillis($x) AS d, "
                                                          "point.distance(a, b) AS p")), "neo4j")


# ----------------------------------------------------------------------------- plans that are refused
@pytest.mark.parametrize("details, why", [
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $autostring_0", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $tenant_idx", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $tenant_id + $autostring_0", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $tenant_id AND true", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $tenant_id OR tenant_id = $x", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = $tenant_id.x", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id IN [$tenant_id, $autostring_0]", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id >= $tenant_id", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id STARTS WITH $tenant_id", "exactly"),
    ("RANGE INDEX e:Episode(tenant_id) WHERE tenant_id = t", "exactly"),
    ("RANGE INDEX e:Episode(ts) WHERE ts > $x", "not scoped by tenant"),
    ("UNIQUE n:WorldNode(key) WHERE key STARTS WITH $autostring_0", "not scoped by tenant"),
    ("RANGE INDEX e:Secret(tenant_id) WHERE tenant_id = $tenant_id", "not scoped by tenant"),
    ("RANGE INDEX e:Episode(agent_id, tenant_id) WHERE agent_id = $x AND tenant_id = $tenant_id", "not scoped"),
    # a quoted variable that imitates a tenant seek: the real index is Rule(key)
    ("RANGE INDEX `x:Episode(tenant_id) WHERE tenant_id = $tenant_id, `:Rule(key) WHERE key = $k", "not scoped"),
    ("TEXT INDEX e:Episode(tenant_id) WHERE tenant_id CONTAINS $tenant_id", "cannot read"),
])
def test_seeks_not_bound_to_the_tenant_are_refused(details: str, why: str) -> None:
    with pytest.raises(TenantScopeError, match=why):
        check_plan(plan_of(details), "neo4j")


@pytest.mark.parametrize("leaf, why", [
    (op("NodeByLabelScan", "e:Episode"), "every node of a label"),
    (op("AllNodesScan", "e"), "every node"),
    (op("NodeIndexScan", "RANGE INDEX e:Episode(tenant_id) WHERE tenant_id IS NOT NULL"), "whole index"),
    (op("NodeByIdSeek", "e WHERE id(e) = $autoint_0"), "by id"),
    (op("NodeByElementIdSeek", "e WHERE elementId(e) = $x"), "elementId"),
    (op("NodeCountFromCountStore", "count( (:Episode) ) AS n"), "count store"),
    (op("RelationshipCountFromCountStore", "count( ()-[:RATES]->() ) AS n"), "count store"),
    (op("DirectedRelationshipTypeScan", "(a)-[r:CONTAINS]->(b)"), "across tenants"),
    (op("UndirectedRelationshipByElementIdSeek", "(a)-[r]-(b) WHERE elementId(r) = $x"), "across tenants"),
    (op("DirectedRelationshipIndexSeek", "RANGE INDEX (a)-[r:CONTAINS(tenant_id)]->(b) WHERE tenant_id = "
                                         "$tenant_id"), "across tenants"),
    (op("ProcedureCall", "db.labels() :: (label :: STRING)"), "procedure"),
    (op("LoadCSV", "row"), "loads a file"),
    (op("ShowIndexes", "allIndexes, defaultColumns"), "administration"),
    (op("AdministrationCommand", None, db="system"), "database 'system'"),
    (op("Create", "(e:Episode)"), "allow-list"),
    (op("SetProperty", "e.tenant_id = $x"), "allow-list"),
    (op("TransactionApply", "IN TRANSACTIONS OF $autoint_0 ROWS ON ERROR FAIL"), "allow-list"),
    (op("PartitionedNodeByLabelScan", "e:Episode"), "across tenants"),
    (op("SomeFutureOperator", "e"), "allow-list"),
])
def test_operators_that_read_across_tenants_are_refused(leaf: dict[str, Any], why: str) -> None:
    plan = op("ProduceResults", "e", op("Apply", None, op("NodeIndexSeek", SEEK), leaf))
    with pytest.raises(TenantScopeError, match=why):
        check_plan(plan, "neo4j")


@pytest.mark.parametrize("details", [
    "CASE WHEN e.x IS NULL THEN COUNT { MATCH (v) WHERE v:Agent } ELSE $autoint_0 END AS z",
    "coalesce(e.x, COLLECT { MATCH (v)-[`anon_1`]->(b) WHERE v:Agent RETURN v.id AS `anon_0` }) AS z",
    "all(x IN $autolist_0 WHERE EXISTS { MATCH (v) }) AS z",
    "exists {match (v)} AS z",
    "NestedPlanCollectExpression(...) AS z",
])
def test_subqueries_hidden_in_expressions_are_refused(details: str) -> None:
    plan = op("ProduceResults", "z", op("Projection", details, op("NodeIndexSeek", SEEK)))
    with pytest.raises(TenantScopeError, match="subquery the plan does not show"):
        check_plan(plan, "neo4j")


@pytest.mark.parametrize("call", [
    "apoc.cypher.runFirstColumnMany($autostring_0, {})",
    "apoc.cypher.runFirstColumnSingle ($autostring_0, $automap_0)",
    "`apoc`.`cypher`.run($autostring_0)",
    "`apoc.cypher.run`($autostring_0)",
    "custom.read(e)",
    "graph.byName($x)",
])
def test_user_defined_functions_are_refused(call: str) -> None:
    plan = op("ProduceResults", "x", op("Projection", f"{call} AS x", op("NodeIndexSeek", SEEK)))
    with pytest.raises(TenantScopeError, match="built-in functions"):
        check_plan(plan, "neo4j")


def test_other_databases_and_query_types_are_refused() -> None:
    with pytest.raises(TenantScopeError, match="database 'other'"):
        check_plan(op("ProduceResults", "e", op("NodeIndexSeek", SEEK, db="other")), "neo4j")
    with pytest.raises(ReadOnlyQueryError, match="read queries"):
        check_plan(plan_of(SEEK), "neo4j", query_type="rw")
    with pytest.raises(TenantScopeError, match="no plan"):
        check_plan(None, "neo4j")


# ----------------------------------------------------------------------------- scans a Filter pins
# What Neo4j plans for a scoped pattern when its statistics give the tenant index one value (a
# database of one tenant, or a fresh one): a scan, then a Filter on $tenant_id.
INDEX_SCAN = "RANGE INDEX a:Episode(tenant_id) WHERE tenant_id IS NOT NULL, cache[a.tenant_id]"
NEXT_SCAN = "(a)-[anon_0:NEXT]->(b)"


@pytest.mark.parametrize("predicate, leaf", [
    ("cache[a.tenant_id] = $tenant_id", op("NodeIndexScan", INDEX_SCAN)),
    ("a.tenant_id = $tenant_id AND a.ts > $since", op("NodeByLabelScan", "a:Episode")),
    ("$tenant_id = a.tenant_id", op("NodeByLabelScan", "a:Episode")),
    ("a.tenant_id = $tenant_id AND (a:Episode AND b:Episode)", op("DirectedRelationshipTypeScan", NEXT_SCAN)),
    ("b:Episode AND b.tenant_id = $tenant_id", op("UndirectedRelationshipTypeScan", "(a)-[r:NEXT]-(b)")),
    ("a.name = 'x OR y' AND a.tenant_id = $tenant_id", op("NodeIndexScan", INDEX_SCAN)),
    ("`odd ``name`.tenant_id = $tenant_id",
     op("NodeIndexScan", "RANGE INDEX `odd ``name`:Episode(tenant_id) WHERE tenant_id IS NOT NULL")),
])
def test_a_scan_pinned_by_the_filter_above_it_passes(predicate: str, leaf: dict[str, Any]) -> None:
    check_plan(op("ProduceResults", "a", op("Projection", "a.id AS id", op("Filter", predicate, leaf))), "neo4j")


@pytest.mark.parametrize("predicate, leaf", [
    ("a.tenant_id = $tenant_id OR true", op("NodeIndexScan", INDEX_SCAN)),
    ("a.tenant_id = $tenant_id XOR a.x = 1", op("NodeIndexScan", INDEX_SCAN)),
    ("a.x = 1 AND a.tenant_id = $tenant_id OR a.y = 2", op("NodeIndexScan", INDEX_SCAN)),
    ("NOT a.tenant_id = $tenant_id", op("NodeIndexScan", INDEX_SCAN)),
    ("NOT (a.tenant_id = $tenant_id AND a.x = 1)", op("NodeIndexScan", INDEX_SCAN)),
    ("a.tenant_id = 'victim'", op("NodeIndexScan", INDEX_SCAN)),
    ("a.tenant_id = $tenant_id2", op("NodeIndexScan", INDEX_SCAN)),
    ("a.tenant_id = $tenant_id + 'x'", op("NodeIndexScan", INDEX_SCAN)),
    ("b.tenant_id = $tenant_id", op("NodeIndexScan", INDEX_SCAN)),  # another node than the scanned one
    ("a.name = 'x AND a.tenant_id = $tenant_id'", op("NodeIndexScan", INDEX_SCAN)),  # inside a string
    ("anon_0.tenant_id = $tenant_id", op("DirectedRelationshipTypeScan", NEXT_SCAN)),  # not an end
    ("a.tenant_id = $tenant_id", op("AllNodesScan", "a")),  # no label: still refused
    ("k.tenant_id = $tenant_id", op("NodeByLabelScan", "k:ApiKey")),  # not a label a tenant explores
    ("cache[k.tenant_id] = $tenant_id",
     op("NodeIndexScan", "RANGE INDEX k:ApiKey(tenant_id) WHERE tenant_id IS NOT NULL, cache[k.tenant_id]")),
    ("a.tenant_id = $tenant_id", op("DirectedAllRelationshipsScan", "(a)-[r]->(b)")),
])
def test_a_scan_the_filter_does_not_pin_is_refused(predicate: str, leaf: dict[str, Any]) -> None:
    with pytest.raises(TenantScopeError):
        check_plan(op("ProduceResults", "a", op("Filter", predicate, leaf)), "neo4j")


def test_a_pinning_filter_must_be_the_scans_parent() -> None:
    scan = op("NodeIndexScan", INDEX_SCAN)
    with pytest.raises(TenantScopeError, match="NodeIndexScan"):  # the expansion reads other tenants' rows first
        check_plan(op("ProduceResults", "b", op("Filter", "a.tenant_id = $tenant_id",
                                                op("Expand(All)", "(a)-[:NEXT]->(b)", scan))), "neo4j")
    with pytest.raises(TenantScopeError, match="NodeIndexScan"):  # a pinned scan does not pin a second one
        check_plan(op("ProduceResults", "a", op("CartesianProduct", None,
                                                op("Filter", "a.tenant_id = $tenant_id", op("NodeIndexScan", INDEX_SCAN)),
                                                op("NodeIndexScan", INDEX_SCAN.replace("a:", "c:").replace("[a.", "[c.")))),
                   "neo4j")
