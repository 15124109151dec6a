"""Where Landlock is unavailable (another OS, an old kernel; simulated here with the test switch
``testing_no_landlock``, not skipped): local calls still run in a query child, on a read-only
projection, behind the guard (the guard-off switch is ignored); ``serve`` refuses Cypher from API
keys unless the operator sets ``cypher_allow_unsandboxed``; ``stats``, ``/health`` and the serve
log say which mode is in force."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from worldgraph import WorldModel
from worldgraph.errors import ReadOnlyQueryError
from worldgraph.kg.embedded.cypher.pool import ChildPool, PoolSettings
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys

Q = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN count(e) AS n"


def _open(path: Path, **kw: object) -> WorldModel:
    wm = WorldModel.open(path, embedder=HashingEmbedder(64), testing_no_landlock=True, **kw)
    wm.record_experience("acme", {"agent_id": "a", "agent_role": "r", "task_type": "t", "task_description": "x",
                                  "outcome": "success"})
    return wm


def test_local_calls_run_in_an_unconfined_child_behind_the_guard(tmp_path: Path) -> None:
    wm = _open(tmp_path, testing_cypher_guard_off=True)
    try:
        assert wm.stats("acme")["cypher_sandbox"] == "unsandboxed"
        assert wm.cypher("acme", Q) == [{"n": 1}]
        kids = wm.store.cypher_runner.children.children("acme")  # type: ignore[attr-defined]
        assert kids and kids[0]["ready"]["landlock"] == 0 and not kids[0]["ready"]["seccomp"]
        with pytest.raises(ReadOnlyQueryError):  # the guard-off switch is not honoured without the sandbox
            wm.cypher("acme", "CALL show_tables() RETURN *")
    finally:
        wm.close()


def test_the_engine_is_read_only_in_an_unconfined_child(tmp_path: Path) -> None:
    """Past the guard, the engine itself refuses writes: the child opens the projection read-only."""
    wm = _open(tmp_path)
    try:
        wm.cypher("acme", Q)
        path = wm.store.projections.current("acme").path  # type: ignore[attr-defined]
        pool = ChildPool(PoolSettings(sandbox=False, roots=[str(path.parent)]))
        try:
            answer = pool.query("acme", path, {"op": "query", "text": "MATCH (e:Episode) DETACH DELETE e", "params": {},
                                               "max_rows": 10, "max_bytes": 1 << 20},
                                deadline=time.monotonic() + 10, limit=1 << 20, opening={})
        finally:
            pool.shutdown()
        assert "read-only" in answer["error"]
        assert wm.cypher("acme", Q) == [{"n": 1}]
    finally:
        wm.close()


def test_serve_refuses_api_keys_unless_the_operator_allows(tmp_path: Path) -> None:
    for allowed in (False, True):
        wm = _open(tmp_path / str(allowed), cypher_allow_unsandboxed=allowed)
        try:
            key, _ = ApiKeys(wm.store).create("acme")
            with TestClient(create_app(wm), raise_server_exceptions=False) as client:
                health = client.get("/health").json()
                assert health["cypher_sandbox"] == f"unsandboxed, {'allowed' if allowed else 'refused'} for API keys"
                r = client.post("/v1/cypher", json={"query": Q}, headers={"Authorization": f"Bearer {key}"})
                if allowed:
                    assert r.status_code == 200 and r.json() == {"rows": [{"n": 1}]}
                else:
                    err = r.json()["error"]
                    assert r.status_code == 501 and err["type"] == "not_supported", r.text
                    assert "Landlock" in err["message"] and "WORLDGRAPH_CYPHER_ALLOW_UNSANDBOXED" in err["message"]
                assert client.get("/v1/stats", headers={"Authorization": f"Bearer {key}"}).json()[
                    "cypher_sandbox"] == "unsandboxed"
        finally:
            wm.close()


@pytest.mark.slow
def test_serve_logs_the_mode_and_mcp_refuses_too(tmp_path: Path) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.support.live_server import LiveServer

    with LiveServer(tmp_path, env={"WORLDGRAPH_TESTING_NO_LANDLOCK": "true"}) as srv:
        async def ask() -> tuple[bool, str]:
            async with httpx2.AsyncClient(headers=srv.headers(), timeout=120) as http:
                async with Client(streamable_http_client(f"{srv.url}/mcp", http_client=http)) as c:
                    got = await c.call_tool("cypher", {"query": Q})
                    return got.is_error, got.content[0].text  # type: ignore[union-attr]
        refused, text = asyncio.run(ask())
        assert refused and json.loads(text[text.index("{"):])["error"]["type"] == "not_supported"
    assert "Cypher: unsandboxed, refused for API keys" in srv.log.read_text()
