"""cypher() on a real Neo4j ends on time whatever the query, ends its server-side transaction,
caps the bytes it reads, and turns hostile parameters into ``invalid_input`` (never a 500).

Timeouts are 1 s so the suite stays quick; the distribution over many hostile queries at once
is bench/bench_cypher.py --hostile. The checks that need no server: tests/unit/kg/test_cypher_limits.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from worldgraph import CypherQueryError, WorldModel
from worldgraph.errors import CypherBusyError, InvalidInputError
from worldgraph.kg.neo4j.store import Neo4jGraphStore
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp

pytestmark = pytest.mark.neo4j

TIMEOUT = 1.0
# One row that takes far longer than TIMEOUT even on a warm, quiet server (range() is lazy: no list is built).
# 100 million once finished inside the 1 s deadline after the JIT had warmed up.
LONG = "reduce(s = 0, i IN range(1, 10000000000) | s + i)"
SLACK = 2.0  # the promise: every cypher() returns or fails within cypher_timeout + 2 s
HUGE = 123456789012345678901234567890


def deep_list(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


@pytest.fixture(scope="module")
def wm(neo4j_server: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorldModel]:
    with WorldModel.open(tmp_path_factory.mktemp("deadline"), embedder=HashingEmbedder(64), graph="neo4j",
                         neo4j_uri=neo4j_server["uri"], neo4j_user=neo4j_server["user"],
                         neo4j_password=neo4j_server["password"], cypher_timeout_seconds=TIMEOUT,
                         cypher_max_result_bytes=10_000) as model:
        yield model


@pytest.fixture
def tenant() -> str:
    return f"deadline-{uuid.uuid4().hex[:10]}"


def store_of(wm: WorldModel) -> Neo4jGraphStore:
    assert isinstance(wm.store, Neo4jGraphStore)
    return wm.store


def ended_in_time(fn: Any) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(CypherQueryError) as info:
        fn()
    return info.value, time.monotonic() - started


def running(store: Neo4jGraphStore, mark: str) -> list[str]:
    """Statuses of the server's transactions whose query holds ``mark`` that are still running."""
    with store.db.driver.session(database="system") as session:
        return [r["status"] for r in session.run(
            "SHOW TRANSACTIONS YIELD currentQuery, status WHERE currentQuery CONTAINS $mark "
            "AND NOT currentQuery STARTS WITH 'SHOW' RETURN status", mark=mark) if r["status"] == "Running"]


def test_a_long_expression_ends_at_the_deadline_and_its_transaction_is_ended(wm: WorldModel, tenant: str) -> None:
    """Neo4j checks its own timeout between rows: this one row (one reduce) ran 26 s with a 5 s
    timeout. Now the caller stops waiting at the deadline and the transaction is terminated."""
    mark = f"mark-{uuid.uuid4().hex}"
    err, took = ended_in_time(lambda: wm.cypher(tenant, f"RETURN {LONG} AS x, '{mark}' AS m"))
    assert "cypher_timeout_seconds" in str(err) and took < TIMEOUT + SLACK, took
    store = store_of(wm)
    deadline = time.monotonic() + 2
    while running(store, mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert running(store, mark) == []  # terminated (Neo4j drops it at its next check) or gone
    assert wm.cypher(tenant, "RETURN 1 AS one") == [{"one": 1}]  # the pool is still healthy


def test_a_query_the_parser_chokes_on_ends_at_the_deadline(wm: WorldModel, tenant: str) -> None:
    """3,000 nested lists made Neo4j's parser overflow its stack: the request hung 241 s with a 5 s
    timeout (900: 152 s with 30 s; how deep it must be depends on the server's JIT state). The
    store alone (below the text limits, which refuse it first) ends it on time."""
    query = "RETURN " + "[" * 3000 + "1" + "]" * 3000 + " AS x"
    _, took = ended_in_time(lambda: store_of(wm).cypher(tenant, query))
    assert took < TIMEOUT + SLACK, took
    assert wm.cypher(tenant, "RETURN 1 AS one") == [{"one": 1}]


def test_several_at_once_each_end_on_time_and_another_tenant_is_served(wm: WorldModel, tenant: str) -> None:
    """8 at once made one request never answer and another tenant wait 22.5 s. Now a tenant runs at
    most 2 at once (cypher_max_in_flight_per_tenant): the others are refused at once (429, with
    Retry-After on REST), the two end on time, and another tenant is served meanwhile."""
    store = store_of(wm)
    hostile = ["RETURN reduce(s = 0, i IN range(1, 50000000) | s + i) AS x",
               "RETURN " + "[" * 3000 + "1" + "]" * 3000 + " AS x"] * 2
    took: list[tuple[str, float]] = []

    def one(query: str) -> None:
        started = time.monotonic()
        try:
            store.cypher(tenant, query)
            outcome = "rows"
        except CypherBusyError:
            outcome = "busy"
        except CypherQueryError:
            outcome = "stopped"
        took.append((outcome, time.monotonic() - started))

    threads = [threading.Thread(target=one, args=(q,)) for q in hostile]
    for t in threads:
        t.start()
        time.sleep(0.05)
    time.sleep(0.2)
    started = time.monotonic()
    assert wm.cypher(f"{tenant}-other", "RETURN 1 AS one") == [{"one": 1}]
    other = time.monotonic() - started
    for t in threads:
        t.join()
    assert len(took) == len(hostile) and max(t for _, t in took) < TIMEOUT + SLACK, took
    busy = [t for outcome, t in took if outcome == "busy"]
    assert len(busy) == 2 and max(busy) < 0.5, took
    assert other < TIMEOUT + SLACK, other


def test_the_text_limits_refuse_it_before_the_server(wm: WorldModel, tenant: str) -> None:
    started = time.monotonic()
    with pytest.raises(InvalidInputError, match="cypher_max_nesting_depth") as info:
        wm.cypher(tenant, "RETURN " + "[" * 900 + "1" + "]" * 900 + " AS x")
    assert info.value.field == "query" and time.monotonic() - started < 0.5


def test_results_stop_at_the_byte_cap(wm: WorldModel, tenant: str) -> None:
    """The row cap counted rows: RETURN range(1, 3000000) is one row of 3 million numbers."""
    assert len(wm.cypher(tenant, "UNWIND range(1, 100) AS i RETURN i")) == 100
    for query in ("UNWIND range(1, 5000) AS i RETURN i", "RETURN range(1, 100000) AS x",
                  "UNWIND range(1, 100) AS i RETURN i, reduce(s = '', j IN range(1, 100) | s + 'x') AS s"):
        with pytest.raises(InvalidInputError, match="cypher_max_result_bytes") as info:
            wm.cypher(tenant, query)
        assert info.value.field == "query"


def test_a_deeply_nested_result_is_an_error_not_a_crash(wm: WorldModel, tenant: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Shallow text, deep value: the result converter recursed until RecursionError (a 500)."""
    monkeypatch.setattr(store_of(wm), "cypher_timeout", 30.0)  # a busy machine: the value must arrive
    with pytest.raises(CypherQueryError, match="nested too deep"):
        wm.cypher(tenant, "RETURN reduce(x = [], i IN range(1, 1500) | [x]) AS x")


def test_params_never_cause_a_500(wm: WorldModel, tenant: str) -> None:
    """A 30-digit integer (OverflowError in the driver) and a 900-deep list (RecursionError)
    were 500s; now invalid_input naming the parameter, in Python, REST and MCP."""
    with pytest.raises(InvalidInputError) as info:
        wm.cypher(tenant, "RETURN $x AS x", {"x": HUGE})
    assert info.value.field == "params.x" and "64-bit" in info.value.rule
    with pytest.raises(InvalidInputError) as info:
        wm.cypher(tenant, "RETURN $x AS x", {"x": deep_list(900)})
    assert info.value.field.startswith("params.x") and "cypher_max_nesting_depth" in info.value.rule
    assert wm.cypher(tenant, "RETURN $x AS x", {"x": (1 << 63) - 1}) == [{"x": (1 << 63) - 1}]

    key, _ = ApiKeys(wm.store).create(tenant)
    with TestClient(create_app(wm), raise_server_exceptions=False) as client:
        for params in ({"x": HUGE}, {"x": deep_list(900)}):
            r = client.post("/v1/cypher", json={"query": "RETURN $x AS x", "params": params},
                            headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 400, r.text
            err = r.json()["error"]
            assert err["type"] == "invalid_input" and err["field"].startswith("params.x"), err

    async def mcp_errors() -> list[dict[str, Any]]:
        out = []
        async with Client(build_mcp(lambda: wm, tenant=tenant)) as mcp:
            for params in ({"x": HUGE}, {"x": deep_list(100)}):  # the SDK's client serializes at most ~100 deep
                result = await mcp.call_tool("cypher", {"query": "RETURN $x AS x", "params": params})
                assert result.is_error
                text = result.content[0].text  # type: ignore[union-attr]
                out.append(json.loads(text[text.index("{"):])["error"])
        return out

    for err in asyncio.run(mcp_errors()):
        assert err["type"] == "invalid_input" and err["field"].startswith("params.x"), err


def test_the_cli_ends_on_time(wm: WorldModel, tenant: str, neo4j_server: dict[str, str], tmp_path: Path,
                              capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.cli.main import main as cli_main

    monkeypatch.setenv("WORLDGRAPH_CYPHER_TIMEOUT_SECONDS", str(TIMEOUT))
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    for k, v in (("NEO4J_URI", "uri"), ("NEO4J_USER", "user"), ("NEO4J_PASSWORD", "password")):
        monkeypatch.setenv(k, neo4j_server[v])

    def cli(query: str) -> tuple[int, float]:
        started = time.monotonic()
        code = cli_main(["--data", str(tmp_path / "cli"), "--graph", "neo4j", "--tenant", tenant, "cypher", query])
        return code, time.monotonic() - started

    code, opening = cli("RETURN 1 AS one")  # what opening the store and a trivial query cost
    assert code == 0
    capsys.readouterr()
    code, took = cli(f"RETURN {LONG} AS x")
    assert code != 0 and "cypher_timeout_seconds" in capsys.readouterr().err
    assert took < opening + TIMEOUT + SLACK, (took, opening)
