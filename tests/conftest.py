"""Shared fixtures: a real Neo4j (see tests/support/neo4j_fixture.py), a local OpenAI-compatible server
(tests/support/fake_openai.py), and a clean environment so no test reaches a real LLM by accident."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from tests.support.fake_openai import fake_openai  # noqa: E402,F401
from tests.support.s3_fixture import s3_env, s3_server  # noqa: E402,F401

try:
    from tests.support.neo4j_fixture import neo4j_server  # noqa: E402,F401
except ImportError:  # pragma: no cover - while the launcher is being written
    pass


@pytest.fixture(autouse=True)
def _no_real_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests that want an LLM start the fake server, which sets these again."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID", "OPENAI_ADMIN_KEY",
                "OPENAI_CUSTOM_HEADERS"):
        monkeypatch.delenv(var, raising=False)
    for var in list(os.environ):
        if var.startswith("WORLDGRAPH_") or var.startswith("AWS_"):  # s3_env sets the AWS_* of its server
            monkeypatch.delenv(var, raising=False)


@pytest.fixture(autouse=True)
def _neo4j_env(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test marked ``neo4j`` sees the session's server (the ``neo4j_server`` fixture) in
    NEO4J_URI / NEO4J_USER / NEO4J_PASSWORD, so everything it opens without naming a server --
    ``WorldModel.open(graph="neo4j")``, the CLI, the child processes it starts with
    ``dict(os.environ)`` -- reaches that server, not the default bolt://127.0.0.1:7687 (where the
    launcher's server does not run, or a different one does)."""
    if request.node.get_closest_marker("neo4j") is None:
        return
    server = request.getfixturevalue("neo4j_server")
    monkeypatch.setenv("NEO4J_URI", server["uri"])
    monkeypatch.setenv("NEO4J_USER", server["user"])
    monkeypatch.setenv("NEO4J_PASSWORD", server["password"])
