"""Fixtures shared by the recall tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(params=["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """WorldModel.open settings for each graph store: the test runs once on the embedded store and
    once on Neo4j (each store answers the session order, episodes and feedback its own way)."""
    if request.param == "embedded":
        return {}
    server = request.getfixturevalue("neo4j_server")
    return {"graph": "neo4j", "neo4j_uri": server["uri"], "neo4j_user": server["user"],
            "neo4j_password": server["password"]}
