"""The ``neo4j_server`` fixture: a real Neo4j 5.26 for the tests marked ``@pytest.mark.neo4j``.

Import it from ``tests/conftest.py`` (``from tests.support.neo4j_fixture import neo4j_server``). The server
is chosen, once per session, in this order:

1. env ``NEO4J_URI`` (with ``NEO4J_USER`` / ``NEO4J_PASSWORD``, defaults ``neo4j`` / ``worldgraph-dev``):
   an existing server, e.g. ``docker compose up -d neo4j``; the tests do not stop it.
2. the local launcher (:mod:`worldgraph.neo4j_local`) if ``java`` and ``mvn`` are on PATH: a fresh
   server on a free port with a temporary data dir, stopped at the end of the session. The first run
   builds ``tools/neo4j-local`` (about 2 minutes while Maven downloads Neo4j).
3. testcontainers (``neo4j:5.26-community``) if the package is installed and a Docker engine answers.

With none of these the Neo4j tests are skipped -- except when env ``CI`` is ``true``, where they fail:
Neo4j tests must run in CI.

The fixture returns ``{"uri", "user", "password", "source"}`` (``source`` is ``env``, ``local`` or
``testcontainers``; for ``local`` also ``home``, the launcher's state dir, and ``data_dir``).
"""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

DEFAULT_USER = "neo4j"
DEFAULT_PASSWORD = "worldgraph-dev"
IMAGE = "neo4j:5.26-community"
NO_NEO4J = (
    "no Neo4j available: set NEO4J_URI (and NEO4J_USER/NEO4J_PASSWORD) to a running server "
    "(e.g. `docker compose up -d neo4j`), or put Java 17 + Maven on PATH for the local launcher "
    "(tools/neo4j-local), or install testcontainers with a running Docker engine"
)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-not-found]  # installed with testcontainers

        client = docker.from_env(timeout=5)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def _testcontainers_available() -> bool:
    try:
        from testcontainers.neo4j import Neo4jContainer  # noqa: F401
    except Exception:
        return False
    return _docker_answers()


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: Neo4j tests must run in CI)", pytrace=False)
    pytest.skip(reason)


@contextmanager
def local_launcher(home: Path) -> Iterator[dict[str, Any]]:
    """A server of our own from tools/neo4j-local on a free port, stopped on exit."""
    from worldgraph import neo4j_local

    data = home / "data"
    port = _free_port()
    uri = neo4j_local.start(port=port, data_dir=data, timeout=300, home=home)
    try:
        yield {
            "uri": uri,
            "user": DEFAULT_USER,  # auth is disabled: any credentials work
            "password": DEFAULT_PASSWORD,
            "source": "local",
            "home": str(home),
            "data_dir": str(data),
            "port": port,
        }
    finally:
        neo4j_local.stop(home=home)


def launcher_available() -> bool:
    return bool(shutil.which("java") and shutil.which("mvn"))


@pytest.fixture(scope="session")
def neo4j_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A running Neo4j for the whole session: ``{"uri", "user", "password", "source", ...}``."""
    uri = os.environ.get("NEO4J_URI")
    if uri:
        yield {
            "uri": uri,
            "user": os.environ.get("NEO4J_USER") or DEFAULT_USER,
            "password": os.environ.get("NEO4J_PASSWORD") or DEFAULT_PASSWORD,
            "source": "env",
        }
        return

    if launcher_available():
        with local_launcher(tmp_path_factory.mktemp("neo4j-local")) as server:
            yield server
        return

    if _testcontainers_available():
        from testcontainers.neo4j import Neo4jContainer

        container = Neo4jContainer(IMAGE, username=DEFAULT_USER, password=DEFAULT_PASSWORD)
        with container:
            yield {
                "uri": container.get_connection_url(),
                "user": getattr(container, "username", DEFAULT_USER) or DEFAULT_USER,
                "password": getattr(container, "password", DEFAULT_PASSWORD) or DEFAULT_PASSWORD,
                "source": "testcontainers",
            }
        return

    _unavailable(NO_NEO4J)
