"""Cypher on the embedded store (``worldgraph.kg.embedded.cypher``).

The contract suite loads the same records into the embedded store and into Neo4j and asserts that
every query returns the same rows on both (order-insensitive unless the query orders them
totally). The rest runs without a server: the README's queries, freshness, limits, refusals.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.kg.test_cypher_tenants import ATTACKS, _owners, _readme_queries, _seed, assert_readme_answers
from worldgraph import CypherQueryError, ReadOnlyQueryError, WorldModel
from worldgraph.cli.replay import replay_log
from worldgraph.errors import InvalidInputError
from worldgraph.kg.embedded.store import EmbeddedGraphStore
from worldgraph.kg.store import GraphStore
from worldgraph.memory.embeddings import HashingEmbedder

ROOT = Path(__file__).resolve().parents[3]
ENV = "CottageEscape"


def copy_tenant(src: GraphStore, dst: GraphStore, src_tenant: str, dst_tenant: str) -> None:
    """Every record of ``src_tenant`` in ``src`` written to ``dst_tenant`` in ``dst`` through the
    store API, so both stores of the contract suite hold exactly the same records."""
    def move(rec: dict[str, Any]) -> dict[str, Any]:
        return {**rec, "tenant_id": dst_tenant} if "tenant_id" in rec else dict(rec)
    episodes = [move(e) for batch in src.iter_episodes(src_tenant) for e in batch]
    canvases = [move(c) for c in (src.get_canvas(src_tenant, cid)
                                  for cid in dict.fromkeys(e.get("canvas_id") for e in episodes) if cid) if c]
    audits = [move(a) for e in episodes for a in src.canvas_audits(src_tenant, e["id"])]
    dst.add_episodes(dst_tenant, episodes, canvases, audits)
    for e in episodes:
        for fb in src.feedback_for(src_tenant, e["id"]):
            dst.add_feedback(dst_tenant, move(fb))
    for env in src.environments(src_tenant):
        graph = src.world_graph(src_tenant, env)
        graph = {k: ([move(r) for r in v] if isinstance(v, list) else (move(v) if isinstance(v, dict) else v))
                 for k, v in graph.items()}
        dst.replace_world(dst_tenant, env, graph)


FACTS = [
    {"relation": "fact", "predicate": "unlocks", "src_ref": "brass key", "dst_ref": "front door",
     "evidence": "The brass key fits the front door.", "confidence": 0.9},
    {"relation": "fact", "predicate": "stored_in", "src_ref": "bolt cutters", "dst_ref": "workbench",
     "single_valued": True},
    {"relation": "fact", "predicate": "stored_in", "src_ref": "bolt cutters", "dst_ref": "sofa", "single_valued": True},
    {"relation": "fact", "predicate": "adjacent_to", "src_ref": "kitchen", "dst_ref": "hallway"},
]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WorldModel, str]]:
    """An embedded store with the demo's world (replayed) plus every other kind of record."""
    wm = WorldModel.open(tmp_path_factory.mktemp("emb"), embedder=HashingEmbedder(384))  # the CLI's hashing
    tenant = f"src-{uuid.uuid4().hex[:8]}"
    replay_log(wm, tenant, ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
    _seed(wm, tenant, "mark", n=2)
    # facts of any kind (one FACT type, the predicate a property): one current, one closed by a
    # single-valued successor, one between rooms
    for edges in (FACTS[:2], FACTS[2:]):
        report = wm.apply_delta(tenant, ENV, {"entities": [], "states": [], "rules": [], "edges": edges})
        assert report.ok and report.dropped == [], report.to_dict()
    for i in range(3):  # a session: NEXT chains
        wm.record_experience(tenant, {"agent_id": "sess-agent", "agent_role": "Finance", "task_type": "recon",
                                      "task_description": f"session step {i}", "outcome": "success",
                                      "session_id": "s-1"})
    yield wm, tenant
    wm.close()


# ----------------------------------------------------------------------------- contract queries
# (query, params, ordered): ordered = the ORDER BY orders the rows totally, so the order must match
T = "{tenant_id: $tenant_id}"
W = "{tenant_id: $tenant_id, env_name: $env}"
CONTRACT: list[tuple[str, dict[str, Any], bool]] = [
    # rules by confidence
    (f"MATCH (r:Rule {W}) RETURN r.condition AS c, r.outcome AS o, r.confidence AS conf "
     "ORDER BY conf DESC, c, o", {}, True),
    (f"MATCH (r:Rule {W}) WHERE r.confidence >= $min RETURN r.condition, r.evidence_count", {"min": 0.8}, False),
    (f"MATCH (r:Rule {W})-[:CONCERNS]->(n:WorldNode {T}) RETURN r.condition AS rule, collect(n.name) AS about",
     {}, False),
    (f"MATCH (r:Rule {W}) RETURN count(r) AS n, avg(r.confidence) AS mean, max(r.evidence_count) AS most", {}, False),
    (f"MATCH (s:Scene {T})-[:PRODUCED]->(r:Rule {T}) RETURN s.current_round AS round, r.condition AS rule", {}, False),
    # containment trees with var-length paths
    ("MATCH (room:Entity {tenant_id: $tenant_id, env_name: $env, type: 'room'})-[:CONTAINS*1..4]->(x) "
     "RETURN room.name AS room, x.name AS thing", {}, False),
    (f"MATCH p = (room:Entity {W})-[:CONTAINS*1..3]->(x:Entity {T}) WHERE room.name = 'kitchen' "
     "RETURN x.name AS thing, length(p) AS depth", {}, False),
    ("MATCH (room:Entity {tenant_id: $tenant_id, name: 'shed'})-[c:CONTAINS]->(x) WHERE c.valid_to IS NULL "
     "RETURN x.name AS now ORDER BY now", {}, True),
    (f"MATCH (p:WorldNode {W})-[c:CONTAINS]->(x:WorldNode {T}) RETURN p.name AS parent, count(x) AS children "
     "ORDER BY children DESC, parent", {}, True),
    (f"MATCH p = (a:Entity {W})-[:CONTAINS*]->(b:Entity {T}) WHERE NOT (b)-[:CONTAINS]->() "
     "RETURN a.name, b.name, length(p)", {}, False),
    ("MATCH p = (a:Entity {tenant_id: $tenant_id, name: 'shed'})-[:CONTAINS*0..2]->(b) RETURN b.name, length(p)",
     {}, False),
    # transitions with their actions
    (f"MATCH (s:State {W})-[t:TRANSITION]->(n:State {T}) RETURN s.name AS src, t.action AS action, n.name AS dst",
     {}, False),
    (f"MATCH (s:State {W}) OPTIONAL MATCH (s)-[t:TRANSITION]->(n:State {T}) "
     "RETURN s.name AS state, collect(t.action) AS actions", {}, False),
    (f"MATCH (a:State {W})-[t1:TRANSITION]->(b:State {T})-[t2:TRANSITION]->(c:State {T}) "
     "RETURN a.name, t1.action, b.name, t2.action, c.name", {}, False),
    (f"MATCH (s:State {W})-[t:TRANSITION]-(n:State {T}) RETURN s.name, n.name, t.action", {}, False),
    (f"MATCH (s:State {W})-[t:TRANSITION]->(n:State {T}) WHERE t.action CONTAINS 'key' "
     "RETURN t.action AS action, t.valid_from IS NOT NULL AS dated", {}, False),
    # history of a state (closed edges)
    (f"MATCH (p:WorldNode {T})-[c:CONTAINS]->(x:WorldNode {{tenant_id: $tenant_id, env_name: $env, name: $name}}) "
     "RETURN p.name AS container, c.valid_from AS since, c.valid_to AS until ORDER BY since", {"name": "brass key"},
     True),
    (f"MATCH (a:WorldNode {W})-[c:CONTAINS]->(b:WorldNode {T}) WHERE c.valid_to IS NOT NULL "
     "RETURN a.name, b.name, c.valid_to", {}, False),
    (f"MATCH (n:WorldNode {W}) WHERE n.valid_to IS NOT NULL RETURN n.name, n.kind", {}, False),
    (f"MATCH ()-[c:CONTAINS]->(x:WorldNode {W}) RETURN x.name AS thing, count(c) AS moves, "
     "sum(CASE WHEN c.valid_to IS NULL THEN 1 ELSE 0 END) AS current ORDER BY moves DESC, thing", {}, True),
    # facts of any kind: one type, FACT, with the predicate a property (Neo4j may plan a rare
    # type as a scan across tenants, which it refuses: USING INDEX pins the start, and the embedded
    # store takes the same text)
    (f"MATCH (a:Entity {T})-[f:FACT {{predicate: 'stored_in'}}]->(b:Entity {T}) USING INDEX a:Entity(tenant_id) "
     "RETURN a.name AS thing, b.name AS place, f.valid_to IS NULL AS now, f.single_valued AS one", {}, False),
    (f"MATCH (a:Entity {W})-[f:FACT]->(b:Entity {T}) USING INDEX a:Entity(tenant_id) WHERE f.valid_to IS NULL "
     "RETURN a.name AS subject, f.predicate AS predicate, b.name AS object ORDER BY subject, predicate, object",
     {}, True),
    (f"MATCH (a:Entity {T})-[f:FACT]->(b:Entity {T}) USING INDEX a:Entity(tenant_id) "
     "RETURN f.predicate AS predicate, count(*) AS n, type(f) AS rel ORDER BY predicate", {}, True),
    (f"MATCH (a:Entity {T})-[f:FACT]-(b:Entity {T}) USING INDEX a:Entity(tenant_id) WHERE a.name = 'front door' "
     "RETURN b.name AS other, f.predicate AS p", {}, False),
    (f"MATCH (a:Entity {T})-[f:FACT]->(b:Entity {T}) USING INDEX a:Entity(tenant_id) WHERE f.predicate = 'unlocks' "
     "RETURN f", {}, False),
    # scenes a fact came from
    (f"MATCH (n:WorldNode {{tenant_id: $tenant_id, env_name: $env, name: 'brass key'}})-[:EPISODIC]->(s:Scene {T})"
     f"-[:FROM_EPISODE]->(e:Episode {T}) "
     "RETURN s.current_round AS round, s.trigger_reason AS why, e.task_description AS episode ORDER BY round", {},
     True),
    (f"MATCH (s:Scene {T})-[:PRODUCED]->(n:WorldNode {W}) RETURN s.id, n.name", {}, False),
    (f"MATCH (s:Scene {T})-[:PRODUCED]->(n:Entity {T}) RETURN s.status, count(n) AS learned", {}, False),
    (f"MATCH (s:Scene {T})-[:IN_ENV]->(m:Environment {T}) RETURN m.env_name, count(s) AS scenes", {}, False),
    (f"MATCH (s:Scene {T}) RETURN s.status AS status, count(*) AS n ORDER BY status", {}, True),
    # NEXT chains of a session
    (f"MATCH (a:Episode {{tenant_id: $tenant_id, session_id: 's-1'}})-[:NEXT]->(b:Episode {T}) "
     "RETURN a.task_description AS first, "
     "b.task_description AS following", {}, False),
    (f"MATCH p = (a:Episode {{tenant_id: $tenant_id, session_id: 's-1'}})-[:NEXT*]->(b:Episode {T}) "
     "RETURN a.task_description, b.task_description, length(p)", {}, False),
    ("MATCH (e:Episode {tenant_id: $tenant_id, session_id: 's-1'}) WHERE NOT ()-[:NEXT]->(e) "
     "RETURN e.task_description AS start", {}, False),
    (f"MATCH (s:Session {T}) RETURN s.id, s.last_seq", {}, False),
    # episodes near a canvas
    (f"MATCH (e:Episode {T})-[:ON_CANVAS]->(c:Canvas {T}) RETURN c.name AS canvas, e.task_description AS episode",
     {}, False),
    (f"MATCH (a:CanvasAudit {T})-[:DURING]->(e:Episode {T})-[:ON_CANVAS]->(c:Canvas {T}) "
     "RETURN c.id, a.action_type, e.id", {}, False),
    (f"MATCH (f:Feedback {T})-[:RATES]->(e:Episode {T}) RETURN e.id, f.score, f.category", {}, False),
    (f"MATCH (e:Episode {T})-[:PERFORMED_BY]->(a:Agent {T}) RETURN a.id AS agent, a.agent_role AS role, "
     "count(e) AS episodes ORDER BY agent", {}, True),
    # aggregations and whole records
    (f"MATCH (e:Episode {T}) RETURN e.outcome AS outcome, count(*) AS n, min(e.ts) IS NOT NULL AS any_ts "
     "ORDER BY outcome", {}, True),
    (f"MATCH (e:Episode {T}) RETURN count(DISTINCT e.agent_id) AS agents, count(e) AS episodes", {}, False),
    (f"MATCH (n:WorldNode {W}) RETURN labels(n) AS labels, count(*) AS n", {}, False),
    (f"MATCH (n:WorldNode {W}) RETURN n.kind, n.type, count(*)", {}, False),
    (f"MATCH (n:Entity {W}) RETURN n ORDER BY n.id", {}, True),
    (f"MATCH (r:Rule {W}) RETURN r", {}, False),
    (f"MATCH (e:Episode {T}) RETURN e ORDER BY e.id LIMIT 3", {}, True),
    (f"MATCH (s:State {W})-[t:TRANSITION]->(n:State {T}) RETURN t", {}, False),
    (f"MATCH (x:Entity {W}) RETURN toUpper(x.name) AS up, size(x.name) AS len, toString(x.evidence_count) AS ev",
     {}, False),
    (f"MATCH (x:Entity {W}) WITH x.type AS type, count(*) AS n WHERE n > 1 RETURN type, n ORDER BY type", {}, True),
    (f"MATCH (x:Entity {W}) RETURN x.name AS name ORDER BY name SKIP 2 LIMIT 3", {}, True),
    (f"MATCH (x:Entity {W}) RETURN DISTINCT x.type AS type ORDER BY type", {}, True),
    (f"MATCH (a:Entity {W}) RETURN a.name AS name UNION MATCH (b:State {W}) RETURN b.name AS name", {}, False),
    (f"MATCH (n:WorldNode {W})-[r]->(m) RETURN type(r) AS rel, count(*) AS n ORDER BY rel", {}, True),
    (f"MATCH (n:WorldNode {W}) WHERE n.name STARTS WITH 'front' OR n.name ENDS WITH 'key' RETURN n.name, n.kind",
     {}, False),
    (f"MATCH (e:Episode {T}) WHERE e.task_description =~ '.*round 1.*' RETURN e.task_description", {}, False),
    (f"MATCH (e:Episode {T}) UNWIND [e.outcome, e.task_type] AS v RETURN v, count(*) AS n", {}, False),
    # an alias named like a pattern variable, then ordered by (Neo4j orders by the alias)
    (f"MATCH (x:Entity {W}) RETURN x.name AS x, x.type AS t ORDER BY t, x DESC LIMIT 5", {}, True),
]


def _norm(value: Any) -> Any:
    """Numbers as both engines may compute them: integral floats as ints, the rest to 12 digits
    (a sum or mean depends on the order of its terms)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    return value


def _key(row: Any) -> str:
    return json.dumps(_norm(row), sort_keys=True, default=str)


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]], ordered: bool) -> bool:
    """Equal rows; in any order unless ``ordered``. A list in a row (collect(), a path) compares as
    a multiset: neither engine defines the order collect() gathers in."""
    def rows(x: list[dict[str, Any]]) -> list[Any]:
        out = [{k: sorted(v, key=_key) if isinstance(v, list) else v for k, v in r.items()} for r in _norm(x)]
        return out if ordered else sorted(out, key=_key)
    return bool(rows(a) == rows(b))


@pytest.mark.neo4j
def test_contract_same_rows_on_both_stores(world: tuple[WorldModel, str], neo4j_server: dict[str, str],
                                           tmp_path: Path) -> None:
    from worldgraph.kg.neo4j.store import Neo4jGraphStore

    wm, src = world
    tenant = f"contract-{uuid.uuid4().hex[:8]}"
    neo = Neo4jGraphStore(neo4j_server["uri"], neo4j_server["user"], neo4j_server["password"])
    emb = wm.store
    assert isinstance(emb, EmbeddedGraphStore)
    try:
        copy_tenant(emb, emb, src, tenant)
        copy_tenant(emb, neo, src, tenant)
        assert len(CONTRACT) >= 30
        queries = [(q, {"env": ENV, **p}, o) for q, p, o in CONTRACT]
        queries += [(q, p, "ORDER BY" in q) for q, p in _readme_queries()]
        mismatched = []
        for query, params, ordered in queries:
            try:
                want = neo.cypher(tenant, query, params)
            except Exception as exc:  # noqa: BLE001 - listed with the others below
                mismatched.append(f"{query}\n  neo4j refused: {exc}")
                continue
            try:
                got = emb.cypher(tenant, query, params)
            except Exception as exc:  # noqa: BLE001
                mismatched.append(f"{query}\n  embedded refused: {exc}")
                continue
            if not want:
                mismatched.append(f"{query}\n  the contract data gives no rows")
            elif not _same(got, want, ordered):
                mismatched.append(f"{query}\n  neo4j:    {_key(want)[:400]}\n  embedded: {_key(got)[:400]}")
        assert not mismatched, "\n".join(mismatched)
    finally:
        neo.close()


# ----------------------------------------------------------------------------- without a server
def test_readme_queries_run_on_the_embedded_default(world: tuple[WorldModel, str], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The example queries of docs/cypher.md, as written, through the CLI of the default store."""
    from worldgraph.cli.main import main as cli_main

    wm, tenant = world
    data = Path(wm.store.path).parent  # type: ignore[attr-defined]
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    answers = []
    for query, params in _readme_queries():
        args = ["--data", str(data), "--tenant", tenant, "cypher", query, "--json"]
        for key, value in params.items():
            args += ["--param", f"{key}={value}"]
        assert cli_main(args) == 0, capsys.readouterr().err
        answers.append(json.loads(capsys.readouterr().out))
    assert_readme_answers(answers)


def test_read_your_writes_and_other_processes(tmp_path: Path) -> None:
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    q = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n"
    try:
        assert wm.cypher("t1", q) == [{"n": 0}]
        wm.record_experience("t1", {"agent_id": "a", "agent_role": "r", "task_type": "x",
                                    "task_description": "first", "outcome": "success"})
        assert wm.cypher("t1", q) == [{"n": 1}]  # the write of this process, at once
        code = ("import sys; from worldgraph import WorldModel; from worldgraph.memory.embeddings import "
                "HashingEmbedder; wm = WorldModel.open(sys.argv[1], embedder=HashingEmbedder(64)); "
                "wm.record_experience('t1', {'agent_id': 'b', 'agent_role': 'r', 'task_type': 'x', "
                "'task_description': 'second', 'outcome': 'success'}); wm.close()")
        subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, timeout=120)
        assert wm.cypher("t1", q) == [{"n": 2}]  # another process's commit, on the next query
    finally:
        wm.close()


def test_limits(world: tuple[WorldModel, str], tmp_path: Path) -> None:
    wm, tenant = world
    store = EmbeddedGraphStore(Path(wm.store.path), cypher_max_rows=3, cypher_timeout=0.5)  # type: ignore[attr-defined]
    try:
        assert len(store.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id LIMIT 3")) == 3
        with pytest.raises(InvalidInputError, match="more than 3 rows"):
            store.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id")
        with pytest.raises(CypherQueryError, match="longer than 0.5 s"):
            store.cypher(tenant, "UNWIND range(1, 3000) AS a UNWIND range(1, 3000) AS b UNWIND range(1, 100) AS c "
                                 "WITH a + b + c AS s WHERE s % 3 = 0 RETURN count(*) AS n")
        with pytest.raises(InvalidInputError, match="params.x"):
            store.cypher(tenant, "RETURN $x AS x", {"x": object()})
    finally:
        store.close()


@pytest.mark.parametrize(("query", "match"), [
    ("MATCH (e:Episode) RETURN e.id[0]", "list indexing"),
    ("MATCH (e:Episode) RETURN collect(e.id)[1..2]", "list indexing"),
    ("MATCH (a:Entity), (b:Entity) MATCH p = shortestPath((a)-[*]-(b)) RETURN p", "shortestPath"),
    ("MATCH (a:Entity)-[r:CONTAINS*1..3]->(b) RETURN r", "named var-length"),
    ("MATCH (a:Entity|State) RETURN a", "label expressions"),
    ("MATCH (a:Entity)-[:CONTAINS*1..3]->(b)-[:CONTAINS]->(c) RETURN c", "var-length relationship and a fixed"),
    ("MATCH (a:Nope) RETURN a", "no label 'Nope'"),
    ("MATCH (a:Entity) RETURN head(collect(a.name))", "HEAD"),
    ("MATCH (a:Entity) RETURN properties(a)", "properties"),
    ("UNWIND range(1, 300000000) AS i RETURN count(*)", "range"),
    ("MATCH (e:Episode) UNWIND range(1, size(e.id) * 1000000) AS i RETURN count(*)", "range"),
    ("MATCH (a:Entity) RETURN a.name AS then", "reserved word.*`then`"),
])
def test_unsupported_features_are_named(world: tuple[WorldModel, str], query: str, match: str) -> None:
    wm, tenant = world
    with pytest.raises(CypherQueryError, match=match):
        wm.cypher(tenant, query)


@pytest.mark.parametrize("query", [
    "CREATE (:Episode {id: 'x', tenant_id: 'other'})",
    "MATCH (e:Episode) SET e.outcome = 'x'",
    "MATCH (e:Episode) DETACH DELETE e",
    "COPY Episode FROM '/etc/passwd'",
    "COPY (MATCH (e:Episode) RETURN e.record) TO '/tmp/leak.csv'",
    "LOAD FROM '/etc/passwd' (header=false) RETURN *",
    "LOAD FROM wm RETURN *",
    "CALL show_tables() RETURN *",
    "CALL current_setting('threads') RETURN *",
    "INSTALL httpfs",
    "ATTACH '/tmp/x.db' AS other (dbtype lbug)",
    "EXPORT DATABASE '/tmp/dump'",
    "IMPORT DATABASE '/tmp/dump'",
    "BEGIN TRANSACTION",
    "CHECKPOINT",
    "CREATE MACRO leak(x) AS x",
    "MATCH (e:Episode) RETURN e.id; MATCH (e:Episode) DELETE e",
])
def test_writes_files_and_settings_are_refused(world: tuple[WorldModel, str], query: str) -> None:
    wm, tenant = world
    before = wm.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n")
    with pytest.raises((ReadOnlyQueryError, CypherQueryError)):
        wm.cypher(tenant, query)
    assert wm.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n") == before
    assert not Path("/tmp/leak.csv").exists()


def test_the_adversarial_suite_sees_only_the_attacker(tmp_path: Path) -> None:
    """tests/unit/kg/test_cypher_tenants.py's attacks on the embedded store: each is refused or returns
    the attacker's own rows only, and its outcome does not move when the victim's data changes."""
    tag = uuid.uuid4().hex[:8]
    victim, attacker, secret = f"victim-{tag}", f"attacker-{tag}", f"VICTIMSECRET{tag}"
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        log = ROOT / "examples" / "text_adventure.jsonl"
        for tenant, mark in ((victim, secret), (attacker, f"own-{tag}")):
            replay_log(wm, tenant, ENV, log, use_shipped_deltas=True)
            _seed(wm, tenant, mark)
        wm.store.add_api_key({"id": f"key-{victim}", "tenant_id": victim, "name": secret, "key_hash": secret,
                              "created_at": "2026-01-05T12:00:00+00:00", "revoked_at": None})

        def outcome(query: str, params: dict[str, Any]) -> tuple[str, str]:
            p = {k: (v.replace("{victim}", victim) if isinstance(v, str) else v) for k, v in params.items()
                 if v not in ("victim_ids", "victim_element_ids")}
            try:
                rows = wm.cypher(attacker, query.replace("{victim}", victim), p)
            except (ReadOnlyQueryError, CypherQueryError, InvalidInputError) as exc:
                return "refused", f"{type(exc).__name__}: {exc}"
            # unordered queries may list rows in another order after a rebuild: compare them as a set
            return "rows", json.dumps(sorted(rows, key=_key), sort_keys=True, default=str)

        def sealed(name: str, result: tuple[str, str]) -> None:
            kind, text = result
            assert secret not in text, f"{name}: the victim's secret leaked: {text[:300]}"
            if kind == "rows":
                assert victim not in text, f"{name}: {text[:300]}"
                assert set(_owners(json.loads(text))) <= {attacker}, f"{name}: {text[:300]}"

        before = {name: outcome(query, params) for name, query, params in ATTACKS}
        for name, result in before.items():
            sealed(name, result)
        for name in ("issue: db.labels", "write the victim's tenant", "create in the victim", "LOAD CSV",
                     "params override tenant_id"):
            assert before[name][0] == "refused", f"{name}: {before[name][1][:300]}"
        assert sum(kind == "rows" for kind, _ in before.values()) >= 10  # not vacuous: they ran, on the attacker
        _seed(wm, victim, secret + "-again", n=2)
        for name, query, params in ATTACKS:
            after = outcome(query, params)
            sealed(name, after)
            if "cypher_timeout_seconds" in after[1] + before[name][1]:
                continue  # the 8-hop trail enumerations run near the timeout: which side of it is the machine's load
            assert after == before[name], f"{name} depends on the victim's data"
        assert wm.store.get_episodes(victim, ["planted"]) == {}
        assert wm.store.stats(attacker)["episodes"] == 24
    finally:
        wm.close()


def test_the_demo_ends_with_a_cypher_exploration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from worldgraph.cli.main import main as cli_main

    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert cli_main(["--data", str(tmp_path / "demo"), "demo"]) == 0
    out = capsys.readouterr().out
    step = out.split("6. exploring the learned rules with Cypher", 1)[1]
    assert "store: embedded" in step
    assert "if the lamp is off -> the shed is too dark to search" in step
    assert "cypher 'MATCH (r:Rule" in out  # single quotes: the shell leaves $tenant_id alone


def test_a_world_delta_reloads_only_the_world_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.kg.embedded.cypher import projection as embedded_cypher

    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        replay_log(wm, "t1", ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
        nodes = "MATCH (n:WorldNode {tenant_id: $tenant_id, env_name: $env}) RETURN count(n) AS n"
        taught = ("MATCH (n:WorldNode {tenant_id: $tenant_id, name: 'brass key'})-[:EPISODIC]->(s:Scene)"
                  "-[:FROM_EPISODE]->(e:Episode) RETURN count(e) AS n")
        before, taught_before = wm.cypher("t1", nodes, {"env": ENV}), wm.cypher("t1", taught)
        built = []
        monkeypatch.setattr(embedded_cypher.Projection, "__init__",
                            lambda self, *a, **k: built.append(1) or pytest.fail("rebuilt whole"))
        delta = {"entities": [{"ref": "c", "name": "copper coin", "type": "item"}], "states": [], "edges": [],
                 "rules": []}
        assert wm.apply_delta("t1", ENV, delta).ok
        assert wm.cypher("t1", nodes, {"env": ENV}) == [{"n": before[0]["n"] + 1}]  # the world part, reloaded
        assert wm.cypher("t1", taught) == taught_before  # its links to the episode part are back
        assert wm.cypher("t1", "MATCH (n:Entity {tenant_id: $tenant_id, name: 'copper coin'}) RETURN n.type AS t") \
            == [{"t": "item"}]
        monkeypatch.undo()
        wm.record_experience("t1", {"agent_id": "a", "agent_role": "r", "task_type": "x",
                                    "task_description": "new one", "outcome": "success"})
        assert wm.cypher("t1", "MATCH (e:Episode {tenant_id: $tenant_id, task_description: 'new one'}) "
                               "RETURN e.outcome AS o") == [{"o": "success"}]  # an episode write: built anew
        assert not built
    finally:
        wm.close()


def test_queries_while_another_thread_writes(tmp_path: Path) -> None:
    """A projection replaced while a query of another thread runs on it is let go only after that
    query; the query after each write sees it. (One reader beside the writer's own queries: a
    tenant runs at most cypher_max_in_flight_per_tenant, 2, queries at once.)"""
    import threading

    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    errors: list[BaseException] = []
    stop = threading.Event()
    q = "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN count(n) AS n"

    def reader() -> None:
        while not stop.is_set():
            try:
                wm.cypher("t1", q)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
    try:
        threads = [threading.Thread(target=reader) for _ in range(1)]
        for t in threads:
            t.start()
        for i in range(8):
            delta = {"entities": [{"ref": "x", "name": f"thing {i}", "type": "item"}], "states": [], "edges": [],
                     "rules": []}
            assert wm.apply_delta("t1", ENV, delta).ok
            assert wm.cypher("t1", q) == [{"n": i + 1}]
            if i % 3 == 0:
                wm.record_experience("t1", {"agent_id": "a", "agent_role": "r", "task_type": "x",
                                            "task_description": f"ep {i}", "outcome": "success"})
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
    finally:
        stop.set()
        wm.close()


def assert_as_built_fresh(wm: WorldModel, incremental: dict[str, list[dict[str, Any]]]) -> None:
    """Every contract query returned ``incremental`` (on a refreshed projection), the rows a
    projection built from scratch by another store object returns."""
    assert isinstance(wm.store, EmbeddedGraphStore)
    fresh = EmbeddedGraphStore(wm.store.path)
    try:
        for q, p, _ordered in CONTRACT:
            want = fresh.cypher("t1", q, {"env": ENV, **p})
            assert sorted(map(json.dumps, incremental[q])) == sorted(map(json.dumps, want)), q
    finally:
        fresh.close()


def coin_delta(container: str) -> dict[str, Any]:
    """A delta that adds a node, a state, a rule linked to it, and a containment edge from an
    existing entity named ``container``."""
    return {"entities": [{"ref": "c", "name": "copper coin", "type": "item"},
                         {"ref": "k", "name": container, "type": "item"}],
            "states": [{"ref": "s", "entity_ref": "c", "name": "copper coin shiny"}],
            "edges": [{"src_ref": "k", "dst_ref": "c", "relation": "containment", "confidence": 0.9}],
            "rules": [{"condition": "if the coin shines", "outcome": "it is seen", "linked_refs": ["c"],
                       "confidence": 0.7}]}


def test_a_small_world_delta_is_applied_row_by_row_with_the_rows_of_a_fresh_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delta that adds, changes and links world nodes, edges and rules updates the projection in
    place (no world part reloaded) and every contract query then returns what a projection built
    from scratch returns."""
    from worldgraph.kg.embedded.cypher import projection as embedded_cypher

    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        replay_log(wm, "t1", ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
        wm.cypher("t1", "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN count(n) AS n")
        monkeypatch.setattr(embedded_cypher.Projection, "replace_world",
                            lambda *a, **k: pytest.fail("reloaded the whole world part"))
        monkeypatch.setattr(embedded_cypher.Projection, "__init__",
                            lambda *a, **k: pytest.fail("rebuilt the whole projection"))
        # the delta's writes name their rows: only those are read again, not the tenant's world
        from worldgraph.kg.embedded.cypher import opener as opener_module

        monkeypatch.setattr(opener_module, "read_world_rows", lambda *a, **k: pytest.fail("read every world row"))
        some = wm.cypher("t1", "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS name ORDER BY name LIMIT 2")
        assert wm.apply_delta("t1", ENV, coin_delta(some[0]["name"])).ok
        incremental = {q: wm.cypher("t1", q, {"env": ENV, **p}) for q, p, _ordered in CONTRACT}
        monkeypatch.undo()
        assert_as_built_fresh(wm, incremental)
        assert wm.cypher("t1", "MATCH (k:Entity {tenant_id: $tenant_id})-[:CONTAINS]->(c:Entity {tenant_id: "
                               "$tenant_id, name: 'copper coin'}) RETURN k.name AS k") == [{"k": some[0]["name"]}]
        assert wm.cypher("t1", "MATCH (r:Rule {tenant_id: $tenant_id, condition: 'if the coin shines'})"
                               "-[:CONCERNS]->(n) RETURN n.name AS n") == [{"n": "copper coin"}]
    finally:
        wm.close()


def test_a_world_write_not_named_by_its_parameters_is_seen(tmp_path: Path) -> None:
    """forget_environment deletes by environment (no row keys in its parameters): the next query
    compares the tenant's world rows instead and sees the environment gone."""
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    q = "MATCH (n:WorldNode {tenant_id: $tenant_id, env_name: $env}) RETURN count(n) AS n"
    try:
        replay_log(wm, "t1", ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
        assert wm.cypher("t1", q, {"env": ENV})[0]["n"] > 0
        wm.forget_environment("t1", ENV)
        assert wm.cypher("t1", q, {"env": ENV}) == [{"n": 0}]
        assert wm.cypher("t1", "MATCH (r:Rule {tenant_id: $tenant_id}) RETURN count(r) AS n") == [{"n": 0}]
    finally:
        wm.close()


def test_a_delta_that_changes_facts_of_existing_rows_updates_them_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-stating existing entities, an existing edge and an existing rule with new confidences
    changes those rows' properties in place (nothing deleted: their links are as they
    were), and every contract query then returns what a projection built from scratch returns."""
    from worldgraph.kg.embedded.cypher import projection as embedded_cypher

    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        replay_log(wm, "t1", ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
        pair = wm.cypher("t1", "MATCH (a:Entity {tenant_id: $tenant_id})-[c:CONTAINS]->(b:Entity) WHERE c.valid_to "
                               "IS NULL RETURN a.name AS an, b.name AS bn, a.type AS ta, b.type AS tb ORDER BY an, bn LIMIT 1")[0]
        rules = "MATCH (r:Rule {tenant_id: $tenant_id}) RETURN r.condition AS c, r.outcome AS o, r.record AS r ORDER BY c, o"
        rules_before = wm.cypher("t1", rules)
        rule = rules_before[0]
        edges = "MATCH (:Entity {tenant_id: $tenant_id})-[c:CONTAINS]->() RETURN c.record AS r ORDER BY r"
        edges_before = wm.cypher("t1", edges)
        deleted: list[str] = []
        real_delete = embedded_cypher.Projection.delete_nodes
        monkeypatch.setattr(embedded_cypher.Projection, "delete_nodes",
                            lambda self, label, pks: (deleted.extend(pks), real_delete(self, label, pks)))
        monkeypatch.setattr(embedded_cypher.Projection, "replace_world",
                            lambda *a, **k: pytest.fail("reloaded the whole world part"))
        delta = {"entities": [{"ref": "a", "name": pair["an"], "type": pair["ta"]},
                              {"ref": "b", "name": pair["bn"], "type": pair["tb"]}],
                 "states": [],
                 "edges": [{"src_ref": "a", "dst_ref": "b", "relation": "containment", "confidence": 0.42}],
                 "rules": [{"condition": rule["c"], "outcome": rule["o"], "confidence": 0.33}]}
        report = wm.apply_delta("t1", ENV, delta)
        assert report.ok and not report.dropped and report.merged["edges"] and report.merged["rules"], report
        incremental = {q: wm.cypher("t1", q, {"env": ENV, **p}) for q, p, _ordered in CONTRACT}
        assert not deleted  # in place
        monkeypatch.undo()
        assert_as_built_fresh(wm, incremental)
        # the rule and the edge did change (and the same rows are there)
        assert wm.cypher("t1", rules) != rules_before and len(wm.cypher("t1", rules)) == len(rules_before)
        assert wm.cypher("t1", edges) != edges_before and len(wm.cypher("t1", edges)) == len(edges_before)
    finally:
        wm.close()


def test_episode_writes_are_applied_row_by_row_with_the_rows_of_a_fresh_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Episodes recorded into a session (NEXT pairs, the session's last seq), a new agent and
    canvas, feedback, a forgotten episode in the middle of a session (its neighbours relinked),
    a round with its scene and delta: the projection is brought up to date without a rebuild, and
    every contract query then returns what a projection built from scratch returns."""

    def step(i: int, agent: str = "sess-agent", **extra: Any) -> str:
        return wm.record_experience("t1", {"agent_id": agent, "agent_role": "Finance", "task_type": "recon",
                                           "task_description": f"session step {i}", "outcome": "success",
                                           "session_id": "s-1", **extra})
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        replay_log(wm, "t1", ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
        _seed(wm, "t1", "mark", n=2)
        steps = [step(i) for i in range(3)]
        before = wm.cypher("t1", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n")[0]["n"]
        from worldgraph.kg.embedded.cypher import opener as opener_module

        monkeypatch.setattr(opener_module, "load_tenant", lambda *a, **k: pytest.fail("rebuilt the projection"))
        steps += [step(3), step(4, agent="new-agent")]
        assert wm.cypher("t1", "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n") == [{"n": before + 2}]
        wm.submit_feedback("t1", steps[3], 0.9, notes="good", category="accuracy", created_by="me")
        wm.forget_episode("t1", steps[2])  # its session neighbours are linked to each other
        _seed(wm, "t1", "later", n=1)  # an episode with a canvas and feedback, a round, its scene and delta
        chain = wm.cypher("t1", "MATCH (a:Episode {tenant_id: $tenant_id})-[:NEXT]->(b:Episode) "
                                "WHERE a.task_description STARTS WITH 'session' "
                                "RETURN a.task_description AS a, b.task_description AS b ORDER BY a")
        assert chain == [{"a": f"session step {a}", "b": f"session step {b}"} for a, b in ((0, 1), (1, 3), (3, 4))]
        incremental = {q: wm.cypher("t1", q, {"env": ENV, **p}) for q, p, _ordered in CONTRACT}
        monkeypatch.undo()
        assert_as_built_fresh(wm, incremental)
    finally:
        wm.close()


def test_a_saved_projection_behind_in_its_world_is_reopened_with_the_rows_of_a_fresh_build(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A world delta written (by another store object, or process) after the projection was saved:
    the next open reads the world rows the saved database holds from its own tables, compares
    them with the tenant's rows and applies the difference row by row, and every contract query
    returns what a projection built from scratch returns."""
    from worldgraph.kg.embedded.cypher import opener
    from worldgraph.kg.embedded.cypher import projection as embedded_cypher

    monkeypatch.setattr(opener, "SAVE_MIN_ROWS", 0)
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        replay_log(wm, "t1", ENV, ROOT / "examples" / "text_adventure.jsonl", use_shipped_deltas=True)
        some = wm.cypher("t1", "MATCH (n:Entity {tenant_id: $tenant_id}) RETURN n.name AS name ORDER BY name LIMIT 2")
        saved = wm.store.projections.current("t1").path  # type: ignore[attr-defined]
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:  # writes, no query
        assert wm.apply_delta("t1", ENV, coin_delta(some[0]["name"])).ok
        wm.record_experience("t1", {"agent_id": "a", "agent_role": "r", "task_type": "t", "task_description": "late",
                                    "outcome": "success"})
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        with monkeypatch.context() as m:
            m.setattr(embedded_cypher.Projection, "replace_world", lambda *a, **k: pytest.fail("reloaded the world"))
            m.setattr(opener, "load_tenant", lambda *a, **k: pytest.fail("rebuilt the whole projection"))
            incremental = {q: wm.cypher("t1", q, {"env": ENV, **p}) for q, p, _ordered in CONTRACT}
            assert wm.store.projections.current("t1").path == saved  # type: ignore[attr-defined]
        assert_as_built_fresh(wm, incremental)
        assert wm.cypher("t1", "MATCH (r:Rule {tenant_id: $tenant_id, condition: 'if the coin shines'})"
                               "-[:CONCERNS]->(n) RETURN n.name AS n") == [{"n": "copper coin"}]
    finally:
        wm.close()


def test_neo4j_planner_hints_are_taken_out_not_obeyed() -> None:
    """USING INDEX / SCAN / JOIN ON choose how Neo4j finds rows, never which: the embedded store
    runs the same text without them; inside a string or a comment they are text."""
    from worldgraph.kg.embedded.cypher.text import without_hints

    assert without_hints("MATCH (a:Entity {tenant_id: $tenant_id})-[f:FACT]->(b) USING INDEX a:Entity(tenant_id) "
                         "WHERE f.valid_to IS NULL RETURN a") == \
        "MATCH (a:Entity {tenant_id: $tenant_id})-[f:FACT]->(b)   WHERE f.valid_to IS NULL RETURN a"
    assert without_hints("MATCH (a:Entity), (b:Rule) using index seek a:Entity(tenant_id, name) USING SCAN b:Rule "
                         "USING JOIN ON a, b RETURN a") == "MATCH (a:Entity), (b:Rule)       RETURN a"
    kept = "MATCH (a) WHERE a.name = 'USING SCAN a:Entity' RETURN a.using // USING INDEX a:Entity(x)"
    assert without_hints(kept) == kept


def test_a_hint_does_not_smuggle_a_clause_past_the_guard(tmp_path: Path) -> None:
    wm = WorldModel.open(tmp_path, embedder=HashingEmbedder(64))
    try:
        for query in ("MATCH (a:Entity) USING INDEX a:Entity(tenant_id) SET a.name = 'x' RETURN a",
                      "MATCH (a:Entity) USING SCAN a:Entity CALL show_tables() RETURN a",
                      "MATCH (a:Entity) USING INDEX a:Entity(tenant_id) DELETE a"):
            with pytest.raises(ReadOnlyQueryError):
                wm.cypher("t1", query)
        assert wm.cypher("t1", "MATCH (a:Entity {tenant_id: $tenant_id}) USING INDEX a:Entity(tenant_id) "
                               "RETURN count(a) AS n") == [{"n": 0}]
    finally:
        wm.close()
