"""Neo4j through a routing URI (neo4j://) and a named database: every session of the store names
the database (schema, reads, writes, cypher, keys), a routing URI works against one Community
server, and a database the server does not have is a clear error naming the setting."""

from __future__ import annotations

import uuid
from typing import Any

import neo4j
import pytest

from worldgraph import WorldModel
from worldgraph.errors import InvalidInputError
from worldgraph.kg.neo4j import store as neo4j_store
from worldgraph.memory.embeddings import HashingEmbedder

pytestmark = pytest.mark.neo4j


def _routing(uri: str) -> str:
    scheme, rest = uri.split("://", 1)
    return "neo4j://" + rest if scheme in ("bolt", "neo4j") else uri


def test_routing_uri_and_named_database_reach_every_session(neo4j_server: dict[str, Any], tmp_path: Any,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sessions: list[dict[str, Any]] = []
    real_driver = neo4j.GraphDatabase.driver

    def recording_driver(*args: Any, **kwargs: Any) -> Any:
        driver = real_driver(*args, **kwargs)
        real_session = driver.session

        def session(**config: Any) -> Any:
            sessions.append(config)
            return real_session(**config)
        driver.session = session  # type: ignore[method-assign]
        return driver
    monkeypatch.setattr(neo4j_store.GraphDatabase, "driver", recording_driver)
    uri = _routing(neo4j_server["uri"])
    tenant = f"route-{uuid.uuid4().hex[:8]}"
    with WorldModel.open(tmp_path, graph="neo4j", embedder=HashingEmbedder(64), neo4j_uri=uri,
                         neo4j_user=neo4j_server["user"], neo4j_password=neo4j_server["password"],
                         neo4j_database="neo4j") as wm:
        assert wm.store.uri.startswith("neo4j://") and wm.store.database == "neo4j"
        ids = wm.record_experiences(tenant, [{"agent_id": "a", "agent_role": "r", "task_type": "t",
                                              "task_description": "route the packets", "outcome": "success"}])
        assert [r["episode_id"] for r in wm.recall_experiences(tenant, "r", "route packets",
                                                               options={"min_similarity": 0.0})] == ids
        report = wm.apply_delta(tenant, "net", {"entities": [{"name": "router", "type": "device"}], "states": [],
                                                "edges": [], "rules": []})
        assert report.ok and report.graph_version == 1
        rows = wm.cypher(tenant, "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n")
        assert rows == [{"n": 1}]
        wm.store.add_api_key({"id": f"k-{tenant}", "tenant_id": tenant, "name": None, "key_hash": "h",
                              "created_at": "2026-01-01T00:00:00+00:00", "revoked_at": None})
    assert len(sessions) >= 5
    assert all(s.get("database") == "neo4j" for s in sessions), [s for s in sessions if s.get("database") != "neo4j"]


@pytest.mark.parametrize("scheme", ["bolt", "neo4j"])
def test_a_database_the_server_does_not_have_names_the_setting(scheme: str, neo4j_server: dict[str, Any],
                                                              tmp_path: Any) -> None:
    uri = scheme + "://" + neo4j_server["uri"].split("://", 1)[1]
    with pytest.raises(InvalidInputError) as err:
        WorldModel.open(tmp_path, graph="neo4j", embedder=HashingEmbedder(64), neo4j_uri=uri,
                        neo4j_user=neo4j_server["user"], neo4j_password=neo4j_server["password"],
                        neo4j_database="no-such-db")
    assert err.value.field == "neo4j_database"
    text = str(err.value)
    assert "'no-such-db'" in text and "NEO4J_DATABASE" in text and "Community" in text and uri in text
