"""Sealed tenants on a real Neo4j: cypher() as an attacker.

Two tenants hold the same kinds of data (episodes, canvases and their audits, feedback, scenes, a
world graph replayed from examples/text_adventure.jsonl, an API key); the victim's also carries a
secret string in every kind of record. Every attack runs as the attacker and must be refused, or return
rows that hold nothing of the victim: no secret, no victim tenant id, no ``tenant_id`` but the
attacker's. Then the victim's data changes and every attack runs again: its outcome must not
change (what the attacker sees does not depend on the victim's data at all).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from worldgraph import CypherQueryError, ReadOnlyQueryError, WorldModel
from worldgraph.cli.main import main as cli_main
from worldgraph.cli.replay import replay_log
from worldgraph.errors import InvalidInputError, TenantScopeError
from worldgraph.kg import cypher_guard
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.store import Neo4jGraphStore
from worldgraph.memory.embeddings import HashingEmbedder

pytestmark = pytest.mark.neo4j

ROOT = Path(__file__).resolve().parents[3]
ENV = "CottageEscape"


@dataclass
class Sealed:
    wm: WorldModel
    store: Neo4jGraphStore
    victim: str
    attacker: str
    secret: str
    victim_element_ids: list[str] = field(default_factory=list)
    victim_ids: list[int] = field(default_factory=list)


def _seed(wm: WorldModel, tenant: str, mark: str, n: int = 1) -> None:
    """Every kind of record the stores write, each carrying ``mark``."""
    for i in range(n):
        eid = wm.record_experience(
            tenant, {"agent_id": f"agent-{mark}", "agent_role": "Finance", "task_type": "recon",
                     "task_description": f"Reconcile {mark} {i}", "outcome": "success", "learnings": [mark]},
            canvas={"id": f"canvas-{mark}-{i}", "name": f"board {mark}",
                    "actions": [{"id": f"a-{i}", "type": "update_component", "component_id": mark}]})
        wm.submit_feedback(tenant, eid, 0.5, notes=mark, category="accuracy", created_by=mark)
    packet = wm.observe_round(tenant, ENV, {
        "round": 99 + n, "action": f"inspect {mark}", "before_observation": mark, "after_observation": mark,
        "feedback": mark, "admissible_commands": [mark],
        "response": f"ACTION: inspect\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: {mark}"})
    assert packet is not None
    delta = {"entities": [{"ref": "v", "name": f"vault {mark} {n}", "type": "room", "attributes": {"code": mark}},
                          {"ref": "g", "name": f"gem {mark} {n}", "type": "item", "evidence": mark}],
             "states": [{"ref": "s0", "name": f"vault locked {n}", "type": "lock", "entity_ref": "v"},
                        {"ref": "s1", "name": f"vault open {n}", "type": "lock", "entity_ref": "v"}],
             "edges": [{"relation": "containment", "src_ref": "v", "dst_ref": "g", "evidence": mark},
                       {"relation": "transition", "src_ref": "s0", "dst_ref": "s1", "action": f"say {mark}"},
                       {"relation": "episodic", "src_ref": "g", "dst_ref": "scene"}],
             "rules": [{"condition": f"the vault hears {mark}", "outcome": "it opens", "linked_refs": ["v"]}]}
    assert wm.apply_delta(tenant, ENV, delta, scene=packet).ok


@pytest.fixture(scope="module")
def sealed(neo4j_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sealed]:
    tag = uuid.uuid4().hex[:10]
    victim, attacker, secret = f"victim-{tag}", f"attacker-{tag}", f"VICTIMSECRET{tag}"
    wm = WorldModel.open(tmp_path_factory.mktemp("sealed"), embedder=HashingEmbedder(64), graph="neo4j",
                         neo4j_uri=neo4j_server["uri"], neo4j_user=neo4j_server["user"],
                         neo4j_password=neo4j_server["password"])
    log = ROOT / "examples" / "text_adventure.jsonl"
    for tenant, mark in ((victim, secret), (attacker, f"own-{tag}")):
        replay_log(wm, tenant, ENV, log, use_shipped_deltas=True)
        _seed(wm, tenant, mark)
        # a fact of any kind: one more relationship type (FACT), which must not cross tenants either
        fact = {"relation": "fact", "predicate": "guards", "src_ref": f"item:gem {mark} 1",
                "dst_ref": f"room:vault {mark} 1", "single_valued": True, "evidence": mark}
        assert wm.apply_delta(tenant, ENV, {"entities": [], "states": [], "edges": [fact], "rules": []}).ok
    store = wm.store
    assert isinstance(store, Neo4jGraphStore)
    for tenant in (victim, attacker):  # keys of `worldgraph serve` live in the graph too: (:ApiKey {tenant_id})
        mark = secret if tenant == victim else f"own-{tag}"
        store.add_api_key({"id": f"key-{tenant}", "tenant_id": tenant, "name": mark, "key_hash": mark,
                           "created_at": "2026-01-05T12:00:00+00:00", "revoked_at": None})
    s = Sealed(wm, store, victim, attacker, secret)
    with store.db.driver.session(database=store.database) as session:  # the operator's view, not cypher()
        rows = session.run("MATCH (n) WHERE n.tenant_id = $t RETURN elementId(n) AS e, id(n) AS i", t=victim).data()
    s.victim_element_ids = [r["e"] for r in rows]
    s.victim_ids = [r["i"] for r in rows]
    yield s
    wm.close()


# ----------------------------------------------------------------------------- the attacks
# (name, query, params); {victim} is the victim's tenant id (the attacker is assumed to know it).
ATTACKS: list[tuple[str, str, dict[str, Any]]] = [
    # the four of issue 8
    ("issue: tenant param mentioned", "MATCH (e:Episode) WHERE $tenant_id IS NOT NULL RETURN e.task_description", {}),
    ("issue: not-equal tenant", "MATCH (e:Episode) WHERE e.tenant_id <> $tenant_id RETURN properties(e)", {}),
    ("issue: count all nodes", "WITH $tenant_id AS t MATCH (e) RETURN count(e)", {}),
    ("issue: db.labels", "CALL db.labels() YIELD label WITH label, $tenant_id AS t RETURN label", {}),
    # functions over other tenants' nodes
    ("properties() via OR true", "MATCH (e:Episode) WHERE e.tenant_id = $tenant_id OR true RETURN properties(e)", {}),
    ("keys() of every node", "MATCH (n) WHERE $tenant_id IS NOT NULL RETURN DISTINCT keys(n) AS k", {}),
    ("collect() of the rest",
     "MATCH (e:Episode {tenant_id: $tenant_id}) WITH collect(e) AS mine MATCH (v:Episode) WHERE NOT v IN mine "
     "RETURN collect(v.task_description) AS theirs", {}),
    ("paths from anywhere", "MATCH p = (a)-[*1..2]->(b) WHERE a.tenant_id = $tenant_id OR b.tenant_id <> $tenant_id "
                            "RETURN p", {}),
    ("UNION with all episodes", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS t "
                                "UNION MATCH (v:Episode) RETURN v.task_description AS t", {}),
    ("UNION ALL with the victim", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS t "
                                  "UNION ALL MATCH (v:Episode {tenant_id: '{victim}'}) RETURN v.task_description AS t", {}),
    ("CALL {} subquery", "MATCH (e:Episode {tenant_id: $tenant_id}) CALL () { MATCH (v:Episode) RETURN v } "
                         "RETURN v.task_description", {}),
    ("CALL {} with UNION inside", "CALL () { MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e AS x UNION "
                                  "MATCH (x:Feedback) RETURN x } RETURN x.record", {}),
    ("OPTIONAL MATCH the victim", "MATCH (e:Episode {tenant_id: $tenant_id}) OPTIONAL MATCH (v:Episode "
                                  "{tenant_id: '{victim}'}) RETURN v.task_description", {}),
    ("OPTIONAL MATCH unscoped", "OPTIONAL MATCH (v:Feedback) RETURN v.record, $tenant_id", {}),
    ("variable-length from own node",
     "MATCH (e:Episode {tenant_id: $tenant_id})-[*0..8]-(x) RETURN DISTINCT properties(x) AS p", {}),
    ("variable-length into the victim", "MATCH (e:Episode {tenant_id: $tenant_id})-[*1..3]-(x {tenant_id: '{victim}'}) "
                                        "RETURN x", {}),
    ("shortestPath to the victim",
     "MATCH (a:Episode {tenant_id: $tenant_id}), (b:Episode {tenant_id: '{victim}'}) "
     "MATCH p = shortestPath((a)-[*]-(b)) RETURN p", {}),
    ("SHORTEST from own node", "MATCH (a:WorldNode {tenant_id: $tenant_id}) MATCH p = SHORTEST 1 (a)--+(b) "
                               "RETURN b.tenant_id AS t, b.record AS r", {}),
    ("id() seek", "MATCH (v) WHERE id(v) IN $ids RETURN properties(v)", {"ids": "victim_ids"}),
    ("id() range", "MATCH (e:Episode {tenant_id: $tenant_id}) WITH id(e) AS i MATCH (v) WHERE id(v) IN "
                   "range(0, i + 5000) RETURN v.record", {}),
    ("elementId() seek", "MATCH (v) WHERE elementId(v) IN $eids RETURN properties(v)", {"eids": "victim_element_ids"}),
    ("relationship id seek", "MATCH ()-[r]->() WHERE id(r) IN range(0, 100000) RETURN properties(r)", {}),
    ("list comprehension over COLLECT {}",
     "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN [x IN COLLECT { MATCH (v:Episode) RETURN v.task_description }"
     " | x] AS all", {}),
    ("pattern comprehension", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN "
                              "[(v:Episode)-[:PERFORMED_BY]->(a) | v.task_description] AS all", {}),
    ("pattern comprehension hidden in coalesce", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN "
                                                 "coalesce(e.nothing, [(v:Episode)-->() | v.task_description]) AS all", {}),
    ("EXISTS {} oracle", "MATCH (e:Episode {tenant_id: $tenant_id}) WHERE EXISTS { MATCH (v:Episode "
                         "{tenant_id: '{victim}'}) WHERE v.task_description CONTAINS 'VICTIM' } RETURN e.id", {}),
    ("EXISTS {} hidden in a list predicate", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN all(x IN [1] WHERE "
                                             "EXISTS { MATCH (v:Episode {tenant_id: '{victim}'}) }) AS b", {}),
    ("COUNT {} of everything", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN COUNT { MATCH (v:Episode) } AS n", {}),
    ("COUNT {} hidden in CASE", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN CASE WHEN e.id IS NULL THEN 0 "
                                "ELSE COUNT { (v:Feedback) } END AS n", {}),
    ("count store", "MATCH (e:Episode) RETURN count(e) AS n, $tenant_id AS t", {}),
    ("relationship count store", "MATCH ()-[r:RATES]->() RETURN count(r) AS n", {}),
    ("db.* fulltext procedure", "CALL db.index.fulltext.queryNodes('wg_episode_text', 'Reconcile') YIELD node "
                                "RETURN node.task_description, $tenant_id", {}),
    ("db.* schema procedure", "CALL db.schema.nodeTypeProperties() YIELD propertyName RETURN propertyName", {}),
    ("dbms.* procedure", "CALL dbms.listConnections() YIELD connectionId RETURN connectionId", {}),
    ("dbms.* config", "CALL dbms.listConfig() YIELD name, value RETURN name, value", {}),
    ("apoc.* procedure", "CALL apoc.cypher.run('MATCH (v:Episode) RETURN v', {}) YIELD value RETURN value", {}),
    ("apoc.* function", "RETURN apoc.cypher.runFirstColumnMany('MATCH (v:Episode) RETURN v.task_description', {}) "
                        "AS x, $tenant_id AS t", {}),
    ("backticked procedure", "CALL `db`.`labels`() YIELD label RETURN label", {}),
    ("EXPLAIN prefix", "EXPLAIN MATCH (v:Episode) RETURN v.task_description", {}),
    ("PROFILE prefix", "PROFILE MATCH (v:Episode) RETURN v.task_description", {}),
    ("CYPHER options", "CYPHER runtime=slotted MATCH (v:Episode) RETURN v.task_description", {}),
    ("USE this database", "USE neo4j MATCH (v:Episode) RETURN v.task_description", {}),
    ("USE system", "USE system SHOW USERS", {}),
    ("LOAD CSV", "LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row, $tenant_id", {}),
    ("SHOW TRANSACTIONS", "SHOW TRANSACTIONS YIELD currentQuery, parameters RETURN currentQuery, parameters", {}),
    ("SHOW INDEXES", "SHOW INDEXES", {}),
    ("comment holding the scope", "MATCH (v:Episode) /* {tenant_id: $tenant_id} */ RETURN v.task_description", {}),
    ("line comment holding the scope", "// MATCH (e {tenant_id: $tenant_id})\nMATCH (v:Episode) RETURN v.record", {}),
    ("scope inside a string", "MATCH (v:Episode) WHERE v.note <> '{tenant_id: $tenant_id}' RETURN v.record", {}),
    ("homoglyph parameter", "MATCH (v:Episode {tenant_id: $tenant_\u0456d}) RETURN v.task_description",
     {"tenant_\u0456d": "{victim}"}),
    ("full-width parameter key", "MATCH (v:Episode {tenant_id: $\uff54enant_id}) RETURN v.task_description",
     {"\uff54enant_id": "{victim}"}),
    ("other-case parameter", "MATCH (v:Episode {tenant_id: $Tenant_id}) RETURN v.task_description",
     {"Tenant_id": "{victim}"}),
    ("params override tenant_id", "MATCH (v:Episode {tenant_id: $tenant_id}) RETURN v.task_description",
     {"tenant_id": "{victim}"}),
    ("another parameter", "MATCH (v:Episode) USING INDEX v:Episode(tenant_id) WHERE v.tenant_id = $other "
                          "RETURN v.task_description", {"other": "{victim}"}),
    ("literal tenant string", "MATCH (v:Episode {tenant_id: '{victim}'}) RETURN v.task_description", {}),
    ("WITH $tenant_id AS t, unscoped match", "WITH $tenant_id AS t MATCH (e) WHERE e.tenant_id <> t RETURN e.record", {}),
    ("variable bound to the victim", "WITH '{victim}' AS t MATCH (e:Episode {tenant_id: t}) RETURN e.task_description", {}),
    ("tenant from another node", "MATCH (e:Episode {tenant_id: $tenant_id}) MATCH (f:Feedback) "
                                 "WHERE f.tenant_id <> e.tenant_id RETURN f.record", {}),
    ("range on tenant_id", "MATCH (e:Episode) WHERE e.tenant_id > $tenant_id RETURN e.task_description", {}),
    ("range below tenant_id", "MATCH (e:Episode) WHERE e.tenant_id < $tenant_id RETURN e.task_description", {}),
    ("prefix of tenant_id", "MATCH (e:Episode) WHERE e.tenant_id STARTS WITH left($tenant_id, 3) "
                            "RETURN e.task_description", {}),
    ("IN list", "MATCH (e:Episode) WHERE e.tenant_id IN [$tenant_id, '{victim}'] RETURN e.task_description", {}),
    # a scan forced by a hint: only a Filter on exactly $tenant_id right above it lets it through
    ("forced scan, OR true", "MATCH (e:Episode) USING SCAN e:Episode WHERE e.tenant_id = $tenant_id OR true "
                             "RETURN properties(e)", {}),
    ("forced scan, the victim's tenant", "MATCH (e:Episode) USING SCAN e:Episode WHERE e.tenant_id = '{victim}' "
                                         "RETURN e.task_description", {}),
    ("forced scan, tenant after an expansion", "MATCH (e:Episode)-[:PERFORMED_BY]->(a:Agent) USING SCAN e:Episode "
                                               "WHERE a.tenant_id = $tenant_id RETURN e.task_description", {}),
    ("OR another tenant", "MATCH (e:Episode) WHERE e.tenant_id = $tenant_id OR e.tenant_id = '{victim}' "
                          "RETURN e.task_description", {}),
    ("OR another property", "MATCH (e:Episode) WHERE e.tenant_id = $tenant_id OR e.outcome = 'success' "
                            "RETURN e.task_description", {}),
    ("expression on $tenant_id", "MATCH (e:Episode {tenant_id: replace($tenant_id, 'attacker', 'victim')}) "
                                 "RETURN e.task_description", {}),
    ("world key prefix", "MATCH (n:WorldNode) WHERE n.key STARTS WITH '{victim}' RETURN n.record, $tenant_id", {}),
    ("relationship scan", "MATCH ()-[r:TRANSITION]->() RETURN r.action, $tenant_id", {}),
    ("relationship tenant property", "MATCH ()-[r:CONTAINS]->() WHERE r.tenant_id = $tenant_id OR r.tenant_id "
                                     "<> $tenant_id RETURN r.record", {}),
    ("relationship key index", "MATCH ()-[r:EPISODIC]->() WHERE r.key STARTS WITH '{victim}' RETURN r.record", {}),
    ("error oracle", "MATCH (e:Episode {tenant_id: $tenant_id}) MATCH (v:Episode) WHERE "
                     "toInteger(v.task_description) = 1 RETURN e.id", {}),
    ("forced label scan", "MATCH (v:Episode) USING SCAN v:Episode WHERE v.tenant_id = $tenant_id RETURN v.record", {}),
    ("same id, other tenant", "MATCH (e:Canvas {tenant_id: $tenant_id}) MATCH (c:Canvas {id: e.id}) RETURN c.record", {}),
    ("schema node", "MATCH (s:WorldgraphSchema) RETURN s, $tenant_id", {}),
    ("write the victim's tenant", "MATCH (e:Episode {tenant_id: $tenant_id}) SET e.tenant_id = '{victim}'", {}),
    ("create in the victim", "CREATE (e:Episode {tenant_id: '{victim}', id: 'planted'}) RETURN e", {}),
    ("IN TRANSACTIONS", "MATCH (e:Episode {tenant_id: $tenant_id}) CALL (e) { RETURN 1 AS one } IN TRANSACTIONS "
                        "RETURN one", {}),
    ("zero-width space", "MATCH\u200b(v:Episode) RETURN v.record, $tenant_id", {}),
    ("non-breaking space", "MATCH\u00a0(v:Episode)\u00a0RETURN v.record, $tenant_id", {}),
    ("backticked names", "MATCH (`e x`:`Episode` {`tenant_id`: $`tenant_id`}) RETURN `e x`.record AS r", {}),
    ("two statements", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id; MATCH (v) RETURN v.record", {}),
    ("label union", "MATCH (e:Episode|Feedback {tenant_id: $tenant_id}) RETURN e.record AS r", {}),
    ("label negation", "MATCH (e:!Agent {tenant_id: $tenant_id}) RETURN e.record", {}),
    ("label wildcard", "MATCH (e:% {tenant_id: $tenant_id}) WHERE e.tenant_id <> $tenant_id RETURN e.record", {}),
    ("dynamic label", "MATCH (e:$($label)) RETURN e.record, $tenant_id", {"label": "Feedback"}),
    ("label conjunction with a foreign label", "MATCH (e:Episode&Feedback {tenant_id: $tenant_id}) RETURN e", {}),
    ("API keys of every tenant", "MATCH (k:ApiKey) RETURN k.key_hash, k.tenant_id, $tenant_id", {}),
    ("API keys by tenant", "MATCH (k:ApiKey {tenant_id: '{victim}'}) RETURN k.key_hash", {}),
    ("own API keys", "MATCH (k:ApiKey {tenant_id: $tenant_id}) RETURN k.key_hash", {}),
    ("expansions from own nodes", "MATCH (n:WorldNode {tenant_id: $tenant_id})-[*1..3]-(x) "
                                  "RETURN collect(DISTINCT x.tenant_id) AS owners, count(*) AS n", {}),
]


def _params(sealed: Sealed, params: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in params.items():
        if value in ("victim_ids", "victim_element_ids"):
            out[key] = getattr(sealed, value)
        else:
            out[key] = value.replace("{victim}", sealed.victim) if isinstance(value, str) else value
    return out


def _outcome(sealed: Sealed, query: str, params: dict[str, Any]) -> tuple[str, str]:
    try:
        rows = sealed.store.cypher(sealed.attacker, query.replace("{victim}", sealed.victim), _params(sealed, params))
    except (ReadOnlyQueryError, CypherQueryError, InvalidInputError) as exc:  # refused, not runnable, or too many rows
        return "refused", f"{type(exc).__name__}: {exc}"
    return "rows", json.dumps(rows, sort_keys=True, ensure_ascii=False, default=str)


def _owners(value: Any) -> Iterator[Any]:
    """Every tenant_id a returned value carries, however deeply nested."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key == "tenant_id":
                yield inner
            yield from _owners(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _owners(inner)


def _assert_sealed(sealed: Sealed, name: str, outcome: tuple[str, str]) -> None:
    kind, text = outcome
    assert sealed.secret not in text, f"{name}: the victim's secret leaked: {text[:300]}"
    if kind == "rows":
        assert sealed.victim not in text, f"{name}: the victim's tenant id came back: {text[:300]}"
        assert set(_owners(json.loads(text))) <= {sealed.attacker}, f"{name}: {text[:300]}"


def test_attacks_are_refused_or_see_only_the_attacker(sealed: Sealed) -> None:
    assert len(ATTACKS) >= 30
    before = {name: _outcome(sealed, query, params) for name, query, params in ATTACKS}
    for name, outcome in before.items():
        _assert_sealed(sealed, name, outcome)
    # the queries of issue 8 and the other plain leaks are refused outright
    for name in ("issue: tenant param mentioned", "issue: not-equal tenant", "issue: count all nodes",
                 "issue: db.labels", "elementId() seek", "id() seek", "count store", "literal tenant string",
                 "params override tenant_id", "IN list", "OR another tenant", "UNION with all episodes",
                 "COUNT {} hidden in CASE", "pattern comprehension hidden in coalesce", "write the victim's tenant",
                 "API keys of every tenant", "own API keys"):
        assert before[name][0] == "refused", f"{name}: {before[name][1][:300]}"
    refused = [n for n, (kind, _) in before.items() if kind == "refused"]
    answered = [n for n, (kind, _) in before.items() if kind == "rows"]
    assert "expansions from own nodes" in answered and "backticked names" in answered
    assert len(refused) >= 60
    # the victim's data changes: nothing the attacker sees may change with it
    _seed(sealed.wm, sealed.victim, sealed.secret + "-again", n=2)
    for name, query, params in ATTACKS:
        after = _outcome(sealed, query, params)
        _assert_sealed(sealed, name, after)
        assert after[0] == before[name][0], f"{name}: {before[name][1][:200]} then {after[1][:200]}"
        if after[0] == "rows":
            assert after == before[name], f"{name} depends on the victim's data"
    # and no attack wrote anything
    assert sealed.store.get_episodes(sealed.victim, ["planted"]) == {}
    assert sealed.store.stats(sealed.attacker)["episodes"] == 24  # 22 replayed rounds, 1 recorded, 1 observed


def test_the_plan_check_alone_holds(sealed: Sealed, monkeypatch: pytest.MonkeyPatch) -> None:
    """The text check is a convenience: without it, the plan refuses the same attacks."""
    monkeypatch.setattr(cypher_guard, "check_text", lambda query: None)
    outcomes = {name: _outcome(sealed, query, params) for name, query, params in ATTACKS}
    for name, outcome in outcomes.items():
        _assert_sealed(sealed, name, outcome)
    for name in ("issue: db.labels", "db.* fulltext procedure", "dbms.* config", "USE this database", "USE system",
                 "LOAD CSV", "SHOW TRANSACTIONS", "EXPLAIN prefix", "CYPHER options", "write the victim's tenant",
                 "create in the victim", "IN TRANSACTIONS"):
        assert outcomes[name][0] == "refused", f"{name}: {outcomes[name][1][:300]}"
    assert sealed.store.get_episodes(sealed.victim, ["planted"]) == {}


def test_expansions_return_the_attackers_own_graph(sealed: Sealed) -> None:
    """The accepted attacks are not vacuous: they return the attacker's own records."""
    rows = sealed.store.cypher(sealed.attacker, "MATCH (n:WorldNode {tenant_id: $tenant_id})-[*1..3]-(x) "
                                                "RETURN collect(DISTINCT x.tenant_id) AS owners, count(*) AS n")
    assert rows[0]["owners"] == [sealed.attacker] and rows[0]["n"] > 100
    rows = sealed.store.cypher(sealed.attacker, "MATCH (e:Episode {tenant_id: $tenant_id})-[*0..8]-(x) "
                                                "RETURN DISTINCT labels(x) AS l")
    assert {tuple(r["l"]) for r in rows} >= {("Episode",), ("Agent",), ("Canvas",), ("CanvasAudit",), ("Feedback",),
                                           ("Scene",)}


def test_without_the_plan_check_the_attacks_leak(sealed: Sealed, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite bites: with the plan check off, the attacks reach the victim (the result check,
    the second wall, catches the ones that return whole nodes, not the ones that return values).
    Required are the attacks aimed at the victim by name: those that read every tenant may hit
    the row cap or the timeout on a large shared database, which refuses them anyway."""
    monkeypatch.setattr(cypher_guard, "check_plan", lambda plan, database, query_type="r": None)
    monkeypatch.setattr(sealed.store, "cypher_timeout", 5.0)
    leaked = [name for name, query, params in ATTACKS
              if sealed.secret in _outcome(sealed, query, params)[1]]
    assert {"literal tenant string", "UNION ALL with the victim", "OPTIONAL MATCH the victim", "IN list",
            "OR another tenant", "variable bound to the victim", "expression on $tenant_id"} <= set(leaked)
    with pytest.raises(TenantScopeError, match="outside the caller's tenant"):
        sealed.store.cypher(sealed.attacker, "MATCH (e:Episode {tenant_id: '" + sealed.victim + "'}) RETURN e")


def test_no_relationship_joins_two_tenants(sealed: Sealed) -> None:
    """What the guard relies on, checked on everything the stores wrote for both tenants (replayed
    world graph, episodes, canvases, audits, feedback, scenes, rules, PRODUCED links)."""
    total, crossing, foreign_edges, types = 0, 0, 0, set()
    with sealed.store.db.driver.session(database=sealed.store.database) as session:
        for label in q.TENANT_LABELS:  # a fixed set: each query seeks that label's tenant_id index
            row = session.run(
                f"MATCH (a:{label}) WHERE a.tenant_id IN $tenants MATCH (a)-[r]-(b) "
                "RETURN count(r) AS all, "
                "  count(CASE WHEN b.tenant_id IS NULL OR b.tenant_id <> a.tenant_id THEN 1 END) AS crossing, "
                "  count(CASE WHEN r.tenant_id IS NOT NULL AND r.tenant_id <> a.tenant_id THEN 1 END) AS foreign, "
                "  collect(DISTINCT type(r)) AS types", tenants=[sealed.victim, sealed.attacker]).single()
            assert row is not None
            total, crossing, foreign_edges = total + row["all"], crossing + row["crossing"], foreign_edges + row["foreign"]
            types |= set(row["types"])
    assert crossing == 0 and foreign_edges == 0
    assert total > 200
    assert types == {"PERFORMED_BY", "ON_CANVAS", "DURING", "RATES", "FROM_EPISODE", "IN_ENV",
                     "TRANSITION", "CONTAINS", "EPISODIC", "FACT", "CONCERNS", "PRODUCED"}


# ----------------------------------------------------------------------------- what keeps working
# As the README advises, every labelled node carries {tenant_id: $tenant_id}: Neo4j may start a
# pattern from any of them, depending on the database's statistics.
LEGIT: list[tuple[str, dict[str, Any]]] = [
    ("MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.task_description AS t ORDER BY t LIMIT 5", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n", {}),
    ("MATCH (e:Episode) WHERE e.tenant_id = $tenant_id AND e.outcome = 'success' RETURN count(*) AS n", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id})-[:PERFORMED_BY]->(a:Agent {tenant_id: $tenant_id}) "
     "RETURN a.id, count(e) AS n", {}),
    ("MATCH (f:Feedback {tenant_id: $tenant_id})-[:RATES]->(e:Episode {tenant_id: $tenant_id}) "
     "RETURN e.id, avg(f.score) AS mean", {}),
    ("MATCH (c:Canvas {tenant_id: $tenant_id})<-[:ON_CANVAS]-(e) RETURN c.name, collect(e.id) AS eps", {}),
    ("MATCH (a:CanvasAudit {tenant_id: $tenant_id})-[:DURING]->(e:Episode {tenant_id: $tenant_id}) "
     "RETURN a.action_type, e.id", {}),
    ("MATCH (s:Scene {tenant_id: $tenant_id, env_name: $env}) RETURN s.status, count(*) AS n", {}),
    ("MATCH (m:Environment {tenant_id: $tenant_id}) RETURN m.env_name AS env", {}),
    # a scan and a Filter on $tenant_id: Neo4j's plan when the tenant index holds one value (forced here)
    ("MATCH (e:Episode {tenant_id: $tenant_id}) USING SCAN e:Episode RETURN e.task_description AS t", {}),
    ("MATCH (n:WorldNode {tenant_id: $tenant_id, env_name: $env}) RETURN n.kind, count(*) AS n", {}),
    ("MATCH (r:Rule {tenant_id: $tenant_id})-[:CONCERNS]->(n) RETURN r.condition, collect(n.name) AS about", {}),
    ("MATCH (s:Scene {tenant_id: $tenant_id})-[:PRODUCED]->(x) RETURN s.id, count(x) AS n", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id}) OPTIONAL MATCH (e)<-[:RATES]-(f) RETURN e.id, count(f) AS n", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id, COUNT { (e)<-[:RATES]-() } AS n, "
     "[(e)-[:ON_CANVAS]->(c) | c.name] AS canvases", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id}) CALL (e) { MATCH (e)<-[:RATES]-(f) RETURN count(f) AS n } "
     "RETURN e.id, n", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id}) WHERE EXISTS { (e)<-[:RATES]-() } RETURN e.id", {}),
    ("MATCH (a:WorldNode {tenant_id: $tenant_id, env_name: $env, name: 'kitchen'}), "
     "(b:WorldNode {tenant_id: $tenant_id, env_name: $env, name: 'brass key'}) "
     "MATCH p = shortestPath((a)-[:CONTAINS*]-(b)) RETURN length(p) AS hops", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id}) MATCH (f:Episode {tenant_id: $tenant_id}) "
     "USING INDEX f:Episode(tenant_id) WHERE f.ts > e.ts RETURN count(*) AS pairs", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id AS x UNION MATCH (a:Agent {tenant_id: $tenant_id}) "
     "RETURN a.id AS x", {}),
    ("MATCH (e:Episode {tenant_id: $tenant_id, id: $id}) RETURN e", {"id": "first"}),
    ("RETURN $tenant_id AS t, date('2026-01-05') AS d, datetime.fromepochmillis(0) AS epoch", {}),
]


def test_legitimate_queries_keep_working(sealed: Sealed) -> None:
    first = next(iter(sealed.store.iter_episodes(sealed.attacker, batch_size=1)))[0]["id"]
    for query, params in LEGIT:
        p = {"env": ENV, **{k: (first if v == "first" else v) for k, v in params.items()}}
        rows = sealed.store.cypher(sealed.attacker, query, p)
        assert rows, query
        _assert_sealed(sealed, query, ("rows", json.dumps(rows, default=str)))


def _readme_queries() -> list[tuple[str, dict[str, str]]]:
    text = (ROOT / "docs" / "cypher.md").read_text(encoding="utf-8")
    block = text.split("## Example queries", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    found = []
    for m in re.finditer(r"^Q '(?P<query>[^']*)'(?P<rest>(?:[^\n]*\\\n)*[^\n]*)", block, re.M):
        params = dict(re.findall(r"--param '(\w+)=([^']*)'", m.group("rest")))
        found.append((m.group("query"), {"env": ENV, **params}))
    return found


def assert_readme_answers(answers: list[list[dict[str, Any]]]) -> None:
    """What the README's five queries return on the replayed examples/text_adventure.jsonl world."""
    rules, transitions, taught, history, rooms = answers
    assert {"condition": "the front door is locked", "outcome": "going outside fails", "evidence": 1,
            "confidence": 0.8} in rules
    assert transitions == [{"from_state": "front door locked", "action": "unlock front door with brass key",
                            "to_state": "front door unlocked"}]
    assert [r["round"] for r in taught] == [1, 3, 10, 17]
    assert [r["container"] for r in history] == ["kitchen table", "player", "workbench"]
    assert {"room": "kitchen", "holds_now": ["kitchen table"]} in rooms


def test_readme_queries_work_through_the_cli(sealed: Sealed, neo4j_server: dict[str, str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("NEO4J_URI", neo4j_server["uri"])
    monkeypatch.setenv("NEO4J_USER", neo4j_server["user"])
    monkeypatch.setenv("NEO4J_PASSWORD", neo4j_server["password"])
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    queries = _readme_queries()
    assert len(queries) == 5
    answers = []
    for query, params in queries:
        args = ["--data", str(tmp_path), "--graph", "neo4j", "--tenant", sealed.attacker, "cypher", query, "--json"]
        for key, value in params.items():
            args += ["--param", f"{key}={value}"]
        assert cli_main(args) == 0
        rows = json.loads(capsys.readouterr().out)
        assert rows, query
        _assert_sealed(sealed, query, ("rows", json.dumps(rows)))
        answers.append(rows)
    assert_readme_answers(answers)
    # the CLI says why a query is refused and exits non-zero
    assert cli_main(["--data", str(tmp_path), "--graph", "neo4j", "--tenant", sealed.attacker, "cypher",
                     "MATCH (e:Episode) RETURN e.task_description"]) != 0
    assert "tenant_id: $tenant_id" in capsys.readouterr().err


def test_row_cap_and_timeout_come_from_config(sealed: Sealed, neo4j_server: dict[str, str]) -> None:
    store = Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"], cypher_max_rows=3,
                            cypher_timeout=1.0)
    try:
        assert len(store.cypher(sealed.attacker, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id LIMIT 3")) == 3
        with pytest.raises(InvalidInputError, match="more than 3 rows"):
            store.cypher(sealed.attacker, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id")
        with pytest.raises(CypherQueryError, match="longer than 1.0 s"):
            store.cypher(sealed.attacker, "MATCH (a:Episode {tenant_id: $tenant_id}), (b:Episode {tenant_id: "
                                          "$tenant_id}), (c:Episode {tenant_id: $tenant_id}) UNWIND range(1, 100000) "
                                          "AS i RETURN count(*) AS n")
    finally:
        store.close()
