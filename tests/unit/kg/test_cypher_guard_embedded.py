"""The embedded store's text guard (``cypher/guard.py``) on its tokens (``kg/cypher_lexer.py``): it
splits as the engine does, refuses what is not one read query, lets the read queries through, and
its function list is the installed engine's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from worldgraph.errors import CypherQueryError, ReadOnlyQueryError
from worldgraph.kg.cypher_lexer import LexError, tokens, words
from worldgraph.kg.embedded.cypher.dialect import ENGINE_FUNCTIONS, TABLE_FUNCTIONS
from worldgraph.kg.embedded.cypher.guard import check_text


def test_the_function_lists_are_the_installed_engines() -> None:
    import ladybug

    db = ladybug.Database(":memory:")
    try:
        rows = ladybug.Connection(db).execute("CALL show_functions() RETURN name, type").get_all()
    finally:
        db.close()
    engine = {(n.lower(), t) for n, t in rows if n[:1].isalpha() or n[:1] == "_"}
    scalar = {n for n, t in engine if t in ("SCALAR FUNCTION", "AGGREGATE FUNCTION", "REWRITE FUNCTION")}
    table = {n for n, t in engine if t not in ("SCALAR FUNCTION", "AGGREGATE FUNCTION", "REWRITE FUNCTION")}
    # a new engine's functions are read (and allowed or not) before the guard lets them through
    assert ENGINE_FUNCTIONS == scalar - {"nextval", "currval", "setseed"}
    assert TABLE_FUNCTIONS == table


@pytest.mark.parametrize(("text", "expected"), [
    ("1LOAD", ["1", "LOAD"]), ("1EXPLAIN", ["1", "EXPLAIN"]), ("1e5x", ["1e5", "x"]), ("1.LOAD", ["1", ".", "LOAD"]),
    (".5CREATE", [".5", "CREATE"]), ("x//CREATE\nRETURN", ["x", "RETURN"]), ("'a\\'CREATE'", ["'a\\'CREATE'"]),
    ("`a``CREATE`", ["`a``CREATE`"]), ("$x1CALL", ["$x1CALL"]), ("a/*x*/b", ["a", "b"]),
])
def test_tokens_split_as_the_engine_does(text: str, expected: list[str]) -> None:
    assert [t.text for t in words(tokens(text))] == expected


@pytest.mark.parametrize("text", ["'a\\q'", "'open", "`open", "/* open", "x\u00a0y", "\u0435", "a\x00b"])
def test_what_two_lexers_may_read_apart_is_refused(text: str) -> None:
    with pytest.raises(LexError):
        tokens(text)


@pytest.mark.parametrize("query", [
    "MATCH (n) WHERE n.x = 1LOAD FROM '/etc/passwd' RETURN *",
    "MATCH (n:Entity) WHERE n.id = 'x' 1CREATE (m:Entity {key: 'k'})",
    "MATCH (n) WITH n 1SET n.name = 'x'",
    "MATCH (n) RETURN n 1CALL READ_CSV_SERIAL('x') RETURN *",
    "COMMENT ON TABLE Episode IS 'x'",
    "RETURN 1; RETURN 2",
    "RETURN show_tables()",
    "RETURN current_setting('threads')",
    "MATCH (n) RETURN apoc.text.join(['a'], '')",
    "MATCH (n) WITH * CREATE (x)",
    "MATCH (n) foo (x)",
    "UNWIND [1] AS x INSTALL httpfs",
    "RETURN 1 UNION CALL show_tables() RETURN *",
])
def test_what_is_not_one_read_query_is_refused(query: str) -> None:
    with pytest.raises((ReadOnlyQueryError, CypherQueryError)):
        check_text(query)


@pytest.mark.parametrize(("query", "meant"), [
    ("MATCH (n) RETRN n", "RETURN"), ("MACH (n) RETURN n", "MATCH"), ("MATCH (n) WHRE n.x = 1 RETURN n", "WHERE"),
    ("MATCH (n) RETURN n LIMT 3", "LIMIT"), ("UNWIND [1] AS x RETURN x UNOIN RETURN 2 AS x", "UNION")])
def test_a_misspelt_keyword_is_an_invalid_query_naming_the_one_meant(query: str, meant: str) -> None:
    with pytest.raises(CypherQueryError, match=f"did you mean {meant}"):
        check_text(query)


@pytest.mark.parametrize("query", ["MATCH (n) CRATE (m)", "MATCH (n) CREAT (m)", "MATCH (n) 1LOD FROM 'x' RETURN *"])
def test_a_word_near_no_read_keyword_is_still_refused_as_not_read(query: str) -> None:
    with pytest.raises(ReadOnlyQueryError):
        check_text(query)


@pytest.mark.parametrize("query", [
    "MATCH (r:Rule {tenant_id: $tenant_id, env_name: $env}) WHERE r.valid_to IS NULL "
    "RETURN r.condition AS condition, r.outcome AS outcome ORDER BY r.confidence DESC LIMIT 10",
    "MATCH (a:Entity)-[c:CONTAINS*1..3]->(b) WHERE c.valid_to IS NULL RETURN a.name, count(DISTINCT b) AS n",
    "OPTIONAL MATCH (n:Entity) WHERE n.name STARTS WITH 'a' AND NOT n.kind IS NULL RETURN n.load, n.set",
    "UNWIND [1, 2] AS x RETURN x UNION ALL RETURN 3 AS x",
    "MATCH (n:Entity) RETURN CASE WHEN n.x THEN 1 ELSE 2 END AS y, list_transform([1], x -> x + 1) AS l",
    "RETURN CAST(1 AS DECIMAL(10, 2)) AS d, date('2020-01-01') AS day;",
    "MATCH (n:`Entity`) RETURN n.name AS `load` ORDER BY `load`",
])
def test_read_queries_pass(query: str) -> None:
    check_text(query)


def test_the_checks_are_linear_in_the_query() -> None:
    from worldgraph.kg.embedded.cypher.reach import world_only
    from worldgraph.kg.embedded.cypher.text import translate

    def cost(n: int) -> float:
        query = "MATCH (e:Episode {tenant_id: $tenant_id}) " + " ".join(f"WITH e, {i} AS x{i}" for i in range(n)) \
            + " RETURN " + ", ".join(f"e.id AS a{i}" for i in range(n // 10)) + " ORDER BY a1"
        best = float("inf")
        for _ in range(5):
            started = time.perf_counter()
            check_text(query)
            translate(query)
            world_only(query)
            best = min(best, time.perf_counter() - started)
        return best
    small, large = cost(1000), cost(4000)
    assert large < 8 * small + 0.05, (small, large)  # 4x the text: ~4x the time (quadratic would be 16x)


def test_values_and_errors_round_trip(tmp_path: Path) -> None:
    """Lists come back as lists (nested ones too); what the engine cannot bind or build is a 400
    naming it, on Python and REST: a list parameter mixing types, a lone surrogate in a literal."""
    from fastapi.testclient import TestClient

    from worldgraph import WorldModel
    from worldgraph.errors import CypherInputError
    from worldgraph.memory.embeddings import HashingEmbedder
    from worldgraph.server.app import create_app
    from worldgraph.server.keys import ApiKeys

    with WorldModel.open(tmp_path, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience("t", {"agent_id": "a", "agent_role": "r", "task_type": "t", "task_description": "x",
                                   "outcome": "success"})
        assert wm.cypher("t", "RETURN $x AS x, [[1, 2], [3]] AS y", {"x": [[1, 2], [3]]}) == [
            {"x": [[1, 2], [3]], "y": [[1, 2], [3]]}]
        assert wm.cypher("t", "RETURN $m AS m", {"m": {"a": [1, 2], "b": "s"}}) == [{"m": {"a": [1, 2], "b": "s"}}]
        with pytest.raises(CypherInputError, match="params.x.*mixes values of different types"):
            wm.cypher("t", "RETURN $x AS x", {"x": [1, "a"]})
        with pytest.raises(CypherInputError, match=r"params.x\b.*list of number, list of string"):
            wm.cypher("t", "RETURN $x AS x", {"x": [[1], ["a"]]})
        with pytest.raises(CypherQueryError, match="not valid Unicode"):
            wm.cypher("t", "RETURN CAST('\\uD800' AS INT64) AS x")
        key, _ = ApiKeys(wm.store).create("t")
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            for body, status, kind in (({"query": "RETURN '\\uD800' AS x"}, 400, "invalid_query"),
                                       ({"query": "RETURN $x AS x", "params": {"x": [1.5, "a"]}}, 400, "invalid_input"),
                                       ({"query": "COMMENT ON TABLE Episode IS 'x'"}, 403, "query_refused"),
                                       ({"query": "RETURN $x AS x", "params": {"x": [[1], [2, 3]]}}, 200, None)):
                r = client.post("/v1/cypher", json=body, headers={"Authorization": f"Bearer {key}"})
                assert r.status_code == status, r.text
                if kind:
                    assert r.json()["error"]["type"] == kind
                else:
                    assert r.json() == {"rows": [{"x": [[1], [2, 3]]}]}
