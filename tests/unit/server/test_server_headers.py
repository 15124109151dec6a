"""HTML from the server carries its security policy as real headers: Content-Security-Policy with
frame-ancestors (a <meta> policy cannot say it), X-Content-Type-Options and X-Frame-Options."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys

DELTA = {"entities": [{"ref": "k", "type": "item", "name": "brass key"}], "states": [], "edges": [], "rules": []}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, str]]]:
    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64))
    key, _ = ApiKeys(wm.store).create("t-headers")
    try:
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            yield client, {"Authorization": f"Bearer {key}"}
    finally:
        wm.close()


def _directives(policy: str) -> dict[str, str]:
    return {d.strip().split(" ", 1)[0]: d.strip() for d in policy.split(";") if d.strip()}


def test_the_world_page_sends_its_policy_as_headers(served: tuple[TestClient, dict[str, str]]) -> None:
    client, auth = served
    assert client.post("/v1/envs/Kitchen/deltas", json=DELTA, headers=auth).status_code == 200
    r = client.get("/v1/envs/Kitchen/view", headers=auth)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    policy = _directives(r.headers["content-security-policy"])
    assert policy["frame-ancestors"] == "frame-ancestors 'none'"
    assert policy["default-src"] == "default-src 'none'"
    assert policy["script-src"].startswith("script-src 'sha256-") and "unsafe-inline" not in policy["script-src"]
    # the header's script hashes are the ones of the page's own <meta> policy
    assert f'content="{r.headers["content-security-policy"].split("; frame-ancestors")[0]}"' in r.text
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"


def test_docs_and_json_answers_carry_the_headers(served: tuple[TestClient, dict[str, str]]) -> None:
    client, auth = served
    docs = client.get("/docs")
    assert docs.status_code == 200 and docs.headers["content-type"].startswith("text/html")
    policy = _directives(docs.headers["content-security-policy"])
    assert policy["frame-ancestors"] == "frame-ancestors 'none'" and "object-src" in policy
    assert docs.headers["x-content-type-options"] == "nosniff" and docs.headers["x-frame-options"] == "DENY"
    for r in (client.get("/health"), client.get("/v1/envs/Kitchen/graph"),  # 401: no key
              client.get("/v1/agents/a/episodes", headers=auth)):
        assert r.headers["x-content-type-options"] == "nosniff", r.url
        assert "content-security-policy" not in r.headers  # JSON is not rendered: no policy needed
