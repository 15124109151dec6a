"""A real Neo4j via the ``neo4j_server`` fixture (tests/support/neo4j_fixture.py) and the local launcher."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

neo4j = pytest.importorskip("neo4j")
from neo4j import GraphDatabase  # noqa: E402

from tests.support.neo4j_fixture import _unavailable, launcher_available, local_launcher  # noqa: E402
from worldgraph import neo4j_local  # noqa: E402

pytestmark = pytest.mark.neo4j


def _driver(server: dict[str, Any]) -> Any:
    return GraphDatabase.driver(server["uri"], auth=(server["user"], server["password"]))


def test_return_1(neo4j_server: dict[str, Any]) -> None:
    with _driver(neo4j_server) as driver:
        driver.verify_connectivity()
        records, _, _ = driver.execute_query("RETURN 1 AS one")
        assert records[0]["one"] == 1


def test_write_read_round_trip(neo4j_server: dict[str, Any]) -> None:
    key = f"t-{uuid.uuid4()}"
    with _driver(neo4j_server) as driver:
        try:
            driver.execute_query(
                "CREATE (a:WgTest {key: $key, name: 'alice'})-[:KNOWS {since: 2020}]->"
                "(:WgTest {key: $key, name: 'bob'})",
                key=key,
            )
            records, _, _ = driver.execute_query(
                "MATCH (a:WgTest {key: $key})-[r:KNOWS]->(b:WgTest {key: $key}) "
                "RETURN a.name AS a, b.name AS b, r.since AS since",
                key=key,
            )
            assert [(r["a"], r["b"], r["since"]) for r in records] == [("alice", "bob", 2020)]
        finally:
            driver.execute_query("MATCH (n:WgTest {key: $key}) DETACH DELETE n", key=key)


@pytest.fixture(scope="module")
def launched(neo4j_server: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The session's server when the launcher started it; else (NEO4J_URI set, as in CI) a
    second one of our own, so the launcher itself is always tested where Java and Maven exist."""
    if neo4j_server["source"] == "local":
        yield neo4j_server
        return
    if not launcher_available():
        _unavailable("the local launcher needs java and mvn on PATH")
    with local_launcher(tmp_path_factory.mktemp("neo4j-launcher")) as server:
        yield server


def test_local_status_and_idempotent_start(launched: dict[str, Any]) -> None:
    neo4j_server = launched
    home = neo4j_server["home"]
    st = neo4j_local.status(home=home)
    assert st["running"] is True
    assert st["uri"] == neo4j_server["uri"]
    assert st["data_dir"] == neo4j_server["data_dir"]
    # Starting again on the same port returns the same server, no second JVM.
    assert neo4j_local.start(port=neo4j_server["port"], home=home) == neo4j_server["uri"]
    assert neo4j_local.status(home=home)["pid"] == st["pid"]
    # A different port from the same state dir is refused (it would share the data dir).
    with pytest.raises(neo4j_local.Neo4jLocalError, match="already running"):
        neo4j_local.start(port=neo4j_server["port"] + 1, home=home)


@pytest.mark.slow
def test_local_stop_start_keeps_data(launched: dict[str, Any]) -> None:
    neo4j_server = launched
    home, port, data = neo4j_server["home"], neo4j_server["port"], neo4j_server["data_dir"]
    key = f"p-{uuid.uuid4()}"
    with _driver(neo4j_server) as driver:
        driver.execute_query("CREATE (:WgPersist {key: $key})", key=key)

    assert neo4j_local.stop(home=home) is True
    assert neo4j_local.status(home=home)["running"] is False
    assert neo4j_local.stop(home=home) is False  # idempotent

    assert neo4j_local.start(port=port, data_dir=data, timeout=300, home=home) == neo4j_server["uri"]
    with _driver(neo4j_server) as driver:
        try:
            records, _, _ = driver.execute_query(
                "MATCH (n:WgPersist {key: $key}) RETURN count(n) AS c", key=key
            )
            assert records[0]["c"] == 1
        finally:
            driver.execute_query("MATCH (n:WgPersist {key: $key}) DELETE n", key=key)
