"""The MCP server through the official SDK's own client, over both transports: stdio (a
``worldgraph mcp`` subprocess, tenant from --tenant) and streamable HTTP (``/mcp`` of a running
``worldgraph serve``, tenant from the bearer key; refused without a valid one)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.support.live_server import LiveServer
from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder

pytestmark = pytest.mark.slow

TOOLS = {"record_experience", "recall_experiences", "submit_feedback", "get_agent_episodes", "observe_round",
          "get_episode", "list_episodes", "forget_episode", "forget_agent", "forget_session",
         "apply_delta", "world_graph", "cypher", "readiness", "record_conversation", "context", "search_world"}
EXPERIENCE = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
              "task_description": "Reconcile SKU-123 inventory discrepancy", "outcome": "success",
              "learnings": ["count twice"]}
DELTA = {"entities": [{"ref": "k", "name": "brass key", "type": "item"},
                      {"ref": "t", "name": "kitchen table", "type": "furniture"}],
         "states": [], "edges": [{"relation": "containment", "src_ref": "t", "dst_ref": "k"}], "rules": []}
ROUND = {"round": 1, "action": "take brass key", "after_observation": "Taken.",
         "response": "ok\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: a key"}


async def _call(client: Client, name: str, args: dict[str, Any]) -> Any:
    result = await client.call_tool(name, args)
    assert not result.is_error, result.content
    return result.structured_content


async def _error(client: Client, name: str, args: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, args)
    assert result.is_error
    text = result.content[0].text  # type: ignore[union-attr]
    return json.loads(text[text.index("{"):])["error"]  # type: ignore[no-any-return]


async def _exercise(client: Client, neo4j: bool) -> str:
    """Every tool once, success and a failure; returns the recorded episode id."""
    listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    for tool in listed:  # usable without docs: a description, and described arguments
        assert tool.description and len(tool.description) > 40, tool.name
        props = tool.input_schema["properties"]
        assert "tenant_id" not in props and all("ctx" != p for p in props)
        assert any("description" in p for p in props.values()), tool.name
    record = next(t for t in listed if t.name == "record_experience")
    exp_schema = record.input_schema["$defs"]["AgentExperience"]["properties"]
    assert "tenant_id" not in exp_schema and exp_schema["task_description"]["description"]

    eid = (await _call(client, "record_experience", {"experience": EXPERIENCE}))["episode_id"]
    results = (await _call(client, "recall_experiences", {"query": "reconcile inventory", "agent_role": "Finance",
                                                          "options": {"min_similarity": 0}}))["results"]
    assert [r["episode_id"] for r in results] == [eid]
    fb = await _call(client, "submit_feedback", {"episode_id": eid, "score": 1, "category": "accuracy"})
    assert fb["average"] == 1.0 and fb["count"] == 1
    assert [e["episode_id"] for e in (await _call(client, "get_agent_episodes", {"agent_id": "fin-1"}))["episodes"]
            ] == [eid]
    packet = (await _call(client, "observe_round", {"env_name": "Kitchen", "round": ROUND}))["packet"]
    assert packet["status"] == "pending" and packet["trigger_reason"] == "a key"
    report = await _call(client, "apply_delta", {"env_name": "Kitchen", "delta": DELTA, "scene": "mcp test"})
    assert report["ok"] and len(report["created"]["nodes"]) == 2
    text = (await client.call_tool("world_graph", {"env_name": "Kitchen"})).content[0].text  # type: ignore[union-attr]
    assert "item:brass key: in furniture:kitchen table" in text
    full = await client.call_tool("world_graph", {"env_name": "Kitchen", "format": "json"})
    graph = json.loads(full.content[0].text)  # type: ignore[union-attr]
    assert sorted(n["name"] for n in graph["nodes"]) == ["brass key", "kitchen table"]
    query = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id AS id ORDER BY id"
    rows = (await _call(client, "cypher", {"query": query}))["rows"]  # both stores (embedded: issue 22)
    assert eid in [r["id"] for r in rows]
    assert (await _error(client, "cypher", {"query": "MATCH (n) DETACH DELETE n"}))["type"] == "query_refused"

    err = await _error(client, "submit_feedback", {"episode_id": "nope", "score": 0.5})
    assert err["type"] == "not_found" and err["field"] == "episode_id"
    bad = await client.call_tool("record_experience", {"experience": {**EXPERIENCE, "outcome": "meh"}})
    assert bad.is_error and "experience.outcome" in bad.content[0].text  # type: ignore[union-attr]  # the SDK's check
    err = await _error(client, "world_graph", {"env_name": "bad env"})
    assert err == {"type": "invalid_input", "field": "env_name", "message": err["message"]}
    return str(eid)


@pytest.mark.parametrize("graph", ["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def test_stdio(graph: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    tenant = f"t-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, "WORLDGRAPH_EMBEDDING_PROVIDER": "hashing"}
    kw: dict[str, Any] = {}
    if graph == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        env.update(NEO4J_URI=server["uri"], NEO4J_USER=server["user"], NEO4J_PASSWORD=server["password"])
        kw = {"graph": "neo4j", "neo4j_uri": server["uri"], "neo4j_user": server["user"],
              "neo4j_password": server["password"]}
    params = StdioServerParameters(command=sys.executable, env=env, args=[
        "-m", "worldgraph.cli", "--data", str(tmp_path / "data"), "--graph", graph, "mcp", "--tenant", tenant])

    async def run() -> str:
        async with Client(params, read_timeout_seconds=120) as client:
            return await _exercise(client, neo4j=graph == "neo4j")

    eid = asyncio.run(run())
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384), **kw) as wm:
        assert wm.get_episode(tenant, eid)["agent_id"] == "fin-1"  # stored under --tenant


def test_streamable_http_with_and_without_a_key(tmp_path: Path) -> None:
    with LiveServer(tmp_path) as srv:
        url = f"{srv.url}/mcp"

        async def run(key: str | None) -> str:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    return await _exercise(client, neo4j=False)

        eid = asyncio.run(run(srv.key))
        mine = httpx.get(f"{srv.url}/v1/agents/fin-1/episodes", headers=srv.headers(), timeout=30).json()
        assert eid in [e["id"] for e in mine["episodes"]]  # the key's tenant
        other = srv.create_key("globex")
        r = httpx.get(f"{srv.url}/v1/agents/fin-1/episodes", headers=srv.headers(other), timeout=30)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"  # another tenant's agent

        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "0"}}}
        for headers in ({}, {"Authorization": "Bearer wg_0000000000000000_" + "a" * 43},
                        {"Authorization": f"Basic {srv.key}"}):
            r = httpx.post(url, json=init, headers={**headers, "accept": "application/json, text/event-stream"},
                           timeout=30)
            assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"
            with pytest.raises(BaseException):  # noqa: B017 - the SDK raises an ExceptionGroup of its MCPError
                asyncio.run(run(headers.get("Authorization", "").removeprefix("Bearer ") or None))
