"""Every surface checks key scopes alike, from one table (``worldgraph.server.scopes.OPERATIONS``):
every /v1 route and every MCP tool has a row, and both matrices below read the table, so a new
route or tool is tested as soon as its row is added (and fails the first test until it is)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from mcp import Client

from tests.unit.server.test_server_api import DELTA, EXPERIENCE, ROUND
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import SCOPES, ApiKeys
from worldgraph.server.mcp_server import build_mcp
from worldgraph.server.scopes import OPERATIONS, rest_scope, tool_scope

# what a call needs to get past its argument checks (a route's path parameters, a tool's arguments)
PATH_VALUES = {"episode_id": "nope", "agent_id": "nobody", "env": "Kitchen", "session_id": "no/chat"}
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/experiences"): EXPERIENCE, ("POST", "/v1/conversations"): {"session_id": "s", "turns": [
        {"speaker": "a", "text": "hi"}]}, ("POST", "/v1/recall"): {"query": "reconcile"},
    ("POST", "/v1/episodes/{episode_id}/feedback"): {"score": 0.5}, ("POST", "/v1/envs/{env}/rounds"): ROUND,
    ("POST", "/v1/envs/{env}/deltas"): DELTA, ("POST", "/v1/cypher"): {"query": "MATCH (r:Rule) RETURN r.id LIMIT 1"},
    ("PUT", "/v1/envs/{env}/snapshot"): {}, ("DELETE", "/v1/tenant"): {"confirm": "other"},
    ("POST", "/v1/world/search"): {"query": "where is the key"}, ("POST", "/v1/context"): {"query": "open the door"},
}
TOOL_ARGS: dict[str, dict[str, Any]] = {
    "record_experience": {"experience": EXPERIENCE}, "recall_experiences": {"query": "reconcile"},
    "submit_feedback": {"episode_id": "nope", "score": 0.5}, "get_agent_episodes": {"agent_id": "nobody"},
    "readiness": {"agent_id": "nobody"}, "record_conversation": {"session_id": "s", "turns": [
        {"speaker": "a", "text": "hi"}]}, "get_episode": {"episode_id": "nope"}, "list_episodes": {},
    "forget_episode": {"episode_id": "nope"}, "forget_agent": {"agent_id": "nobody"},
    "forget_session": {"session_id": "no-chat"}, "observe_round": {"env_name": "Kitchen", "round": ROUND},
    "apply_delta": {"env_name": "Kitchen", "delta": DELTA}, "world_graph": {"env_name": "Kitchen"},
    "cypher": {"query": "MATCH (r:Rule) RETURN r.id LIMIT 1"},
    "search_world": {"query": "where is the key"}, "context": {"query": "open the door"},
}


def _api_routes(routes: list[Any]) -> list[APIRoute]:
    out = []
    for r in routes:
        if isinstance(r, APIRoute):
            out.append(r)
        elif hasattr(r, "original_router"):  # an included router
            out += _api_routes(r.original_router.routes)
    return out


def test_every_route_and_tool_has_a_row() -> None:
    app = create_app(None)
    routes = {(m, r.path) for r in _api_routes(app.routes) if r.path.startswith("/v1") for m in r.methods - {"HEAD"}}
    assert len(routes) >= 20
    assert {r for r in routes if rest_scope(*r) is None} == set(), "add a row to worldgraph.server.scopes.OPERATIONS"
    assert {op.rest for op in OPERATIONS if op.rest is not None} <= routes, "a row names a route the app lacks"
    tools = {t.name for t in asyncio.run(build_mcp(lambda: None, tenant="t").list_tools())}  # type: ignore[arg-type,return-value]
    assert {t for t in tools if tool_scope(t) is None} == set(), "add a row to worldgraph.server.scopes.OPERATIONS"
    assert {op.mcp for op in OPERATIONS if op.mcp is not None} == tools
    assert set(TOOL_ARGS) == tools  # this file's matrix calls every tool


def test_rest_matrix(tmp_path: Path) -> None:
    """Each route answers 403 (field scope) to a key without its row's scope, and lets a key with
    only that scope past the check."""
    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64))
    try:
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            keys = {scope: ApiKeys(wm.store).create("acme", scopes=[scope])[0] for scope in SCOPES}
            for op in OPERATIONS:
                if op.rest is None:
                    continue
                method, template = op.rest
                path = re.sub(r"\{(\w+)(?::path)?\}", lambda m: PATH_VALUES[m.group(1)], template)
                for scope, key in keys.items():
                    body = BODIES.get(op.rest)
                    r = client.request(method, path, headers={"Authorization": f"Bearer {key}"},
                                       **({"json": body} if body is not None else {}))
                    refused = r.status_code == 403 and r.json()["error"]["field"] == "scope"
                    assert refused == (scope != op.scope), (op, scope, r.status_code, r.text[:300])
    finally:
        wm.close()


@pytest.mark.slow
def test_mcp_matrix(tmp_path: Path) -> None:
    """The same over MCP (HTTP, the bearer key's scopes): every tool of the table, every scope."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tests.support.live_server import LiveServer, worldgraph

    with LiveServer(tmp_path) as srv:
        keys = {scope: str(worldgraph(srv.data, "keys", "create", "--tenant", srv.tenant, "--scope", scope,
                                      env=srv.env)["key"]) for scope in SCOPES}

        async def answers(key: str) -> dict[str, tuple[bool, str]]:
            out = {}
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
                async with Client(streamable_http_client(f"{srv.url}/mcp", http_client=http)) as c:
                    for tool, args in TOOL_ARGS.items():
                        got = await c.call_tool(tool, args)
                        out[tool] = (got.is_error, got.content[0].text if got.content else "")  # type: ignore[union-attr]
            return out

        for scope, key in keys.items():
            got = asyncio.run(answers(key))
            for op in OPERATIONS:
                if op.mcp is None:
                    continue
                is_error, text = got[op.mcp]
                refused = is_error and json.loads(text[text.index("{"):]).get("error", {}).get("field") == "scope"
                assert refused == (scope != op.scope), (op, scope, text[:300])


def test_cypher_refusals_carry_retry_after_and_are_counted(tmp_path: Path) -> None:
    """Past a tenant's 2 queries in flight REST answers 429 with Retry-After (the Neo4j store
    shares the same admission, kg.cypher_limits); /metrics counts the 429s, the children killed at
    their deadline and those a crash ended."""
    from worldgraph.kg.cypher_limits import ADMISSION, COUNTERS, REFUSED_BUSY

    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64))
    try:
        key, _ = ApiKeys(wm.store).create("acme")
        settings = wm.store.cypher_settings  # type: ignore[attr-defined]
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            before = COUNTERS.get(REFUSED_BUSY)
            with ADMISSION.admit("acme", settings), ADMISSION.admit("acme", settings):  # two queries running
                r = client.post("/v1/cypher", json={"query": "RETURN 1 AS one"},
                                headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 429 and r.headers["Retry-After"] == "1", r.text
            assert r.json()["error"]["type"] == "too_many_requests"
            assert COUNTERS.get(REFUSED_BUSY) == before + 1
            metrics = client.get("/metrics").text
            for name in ("worldgraph_cypher_children_killed_total", "worldgraph_cypher_children_crashed_total",
                         "worldgraph_cypher_refused_busy_total"):
                assert name in metrics
            assert f"worldgraph_cypher_refused_busy_total {float(before + 1)}" in metrics
    finally:
        wm.close()
