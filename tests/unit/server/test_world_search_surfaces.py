"""search_world and context on every surface: REST (``POST /v1/world/search``, ``POST /v1/context``:
the closed result types, 422 naming the field, 404 for an unknown environment, another tenant's
key finding nothing) on both stores; the MCP tools (``context`` told to be called first, both
answers compact text); the CLI (``worldgraph search-world``, ``worldgraph context``, text and
``--json``); ``AsyncWorldModel``. The ranking itself is the core's tests'; here each surface
must carry the same answer as the Python API."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from tests.unit.server.test_server_api import Api, _tenant_api, client, wm  # noqa: F401 - fixtures: both stores
from worldgraph import AsyncWorldModel, WorldModel
from worldgraph.cli.main import main
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server import results
from worldgraph.server.mcp_server import build_mcp

ENV = "Office"
QUERY = "where does alice work?"


def at(hour: int) -> str:
    return f"2026-02-01T{hour:02d}:00:00.000000+00:00"


def scene(hour: int) -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "trigger_reason": "news", "created_at": at(hour), "current_round": hour}


def delta(firm: str) -> dict[str, Any]:
    """Alice works at ``firm`` (one firm at a time), and a rule about her badge."""
    return {"entities": [{"ref": "a", "name": "alice", "type": "person"},
                         {"ref": "f", "name": firm, "type": "company"}],
            "states": [],
            "edges": [{"relation": "fact", "predicate": "works_at", "single_valued": True, "src_ref": "a",
                       "dst_ref": "f", "evidence": f"Alice started at {firm}.", "confidence": 0.9}],
            "rules": [{"condition": "alice loses her badge", "outcome": "the office door stays shut",
                       "linked_refs": ["a"], "confidence": 0.7}]}


def grow(wm: WorldModel, tenant: str) -> None:
    """acme corp from 1 h, beta labs from 5 h (closing acme corp), an episode; indexed."""
    assert wm.apply_delta(tenant, ENV, delta("acme corp"), scene=scene(1)).ok
    assert wm.apply_delta(tenant, ENV, delta("beta labs"), scene=scene(5)).ok
    wm.record_experience(tenant, {"agent_id": "hr-1", "agent_role": "HR", "task_type": "lookup",
                                  "task_description": "find where alice works for the payroll", "outcome": "success",
                                  "learnings": ["alice moved to beta labs in February"]})
    assert wm.wait_for_updates(120)


def facts(hits: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """(firm, current) of each works_at fact, in rank order."""
    return [("beta labs" if "beta labs" in h["text"] else "acme corp", h["current"]) for h in hits
            if h["kind"] == "fact"]


# ------------------------------------------------------------------------------ REST, both stores
def test_rest_search_and_context(wm: WorldModel, client: TestClient) -> None:  # noqa: F811
    api = _tenant_api(wm, client)
    grow(wm, api.tenant)
    hits = api("POST", "/v1/world/search", json={"query": QUERY, "env_name": ENV, "k": 10})["hits"]
    assert hits == [h.model_dump() for h in wm.search_world(api.tenant, QUERY, ENV, 10)]  # the Python answer
    assert facts(hits)[:2] == [("beta labs", True), ("acme corp", False)]  # current first, the closed one kept
    closed = next(h for h in hits if h["kind"] == "fact" and not h["current"])
    assert closed["valid_to"] == at(5) and closed["evidence"] == ["Alice started at acme corp."]
    for h in hits:
        assert set(h) == set(results.WorldHitOut.model_fields), h  # every field, none undeclared
    # a past moment: what held then ranks first
    past = api("POST", "/v1/world/search", json={"query": QUERY, "as_of": "2026-02-01T03:00:00Z"})["hits"]
    assert facts(past)[0][0] == "acme corp"

    ctx = api("POST", "/v1/context", json={"query": QUERY, "env_name": ENV, "max_tokens": 300})
    assert set(ctx) == {"text", "citations", "tokens"} and 0 < ctx["tokens"] <= 300
    assert ctx == wm.context(api.tenant, QUERY, None, ENV, 300).model_dump()
    assert "beta labs" in ctx["text"]
    kinds = {c["kind"] for c in ctx["citations"]}
    assert {"fact", "episode"} <= kinds, ctx
    for c in ctx["citations"]:
        assert f"[{c['id'][:8]}" in ctx["text"], c
    small = api("POST", "/v1/context", json={"query": QUERY, "max_tokens": 20})
    assert small["tokens"] <= 20

    # another tenant finds nothing of this one, and is told about its own environments only
    other = _tenant_api(wm, client)
    assert other("POST", "/v1/world/search", json={"query": QUERY})["hits"] == []
    assert other("POST", "/v1/context", json={"query": QUERY})["citations"] == []
    err = other("POST", "/v1/world/search", 404, json={"query": QUERY, "env_name": ENV})["error"]
    assert err["type"] == "not_found" and err["field"] == "env_name"


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/world/search", {"query": QUERY, "k": 0}, "k"),
    ("/v1/world/search", {"query": QUERY, "k": 101}, "k"),
    ("/v1/world/search", {"query": ""}, "query"),
    ("/v1/world/search", {"k": 3}, "query"),
    ("/v1/world/search", {"query": QUERY, "as_of": "last tuesday"}, "as_of"),
    ("/v1/world/search", {"query": QUERY, "env_name": "no/such"}, "env_name"),
    ("/v1/world/search", {"query": QUERY, "limit": 3}, "limit"),
    ("/v1/context", {"query": QUERY, "max_tokens": 0}, "max_tokens"),
    ("/v1/context", {"query": QUERY, "max_tokens": 100_001}, "max_tokens"),
    ("/v1/context", {"query": 5}, "query"),
    ("/v1/context", {"query": QUERY, "agent_role": ["HR"]}, "agent_role"),
])
def test_rest_422_names_the_field(tmp_path: Path, path: str, body: dict[str, Any], field: str) -> None:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as model, \
            TestClient(__import__("worldgraph.server.app", fromlist=["create_app"]).create_app(model),
                       raise_server_exceptions=False) as c:
        api = _tenant_api(model, c)
        err = api("POST", path, 422, json=body)["error"]
        assert err["type"] == "invalid_input" and err["field"] == field, err


# ------------------------------------------------------------------------------ MCP, CLI, asyncio
@pytest.fixture
def grown(tmp_path: Path) -> Any:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(384)) as model:  # the CLI's hashing embedder
        grow(model, "acme")
    return data


def mcp_call(wm: WorldModel, name: str, args: dict[str, Any]) -> Any:  # noqa: F811
    async def run() -> Any:
        async with Client(build_mcp(lambda: wm, tenant="acme")) as c:
            if name == "list_tools":
                return (await c.list_tools()).tools
            return await c.call_tool(name, args)
    return asyncio.run(run())


def test_mcp_tools(grown: Path) -> None:
    with WorldModel.open(grown, embedder=HashingEmbedder(384)) as model:
        tools = {t.name: t for t in mcp_call(model, "list_tools", {})}
        assert tools["context"].description.startswith("Call this first")
        assert tools["context"].annotations.read_only_hint and tools["search_world"].annotations.read_only_hint
        from worldgraph.server.mcp_server import INSTRUCTIONS
        assert "call context first" in " ".join(INSTRUCTIONS.split())

        got = mcp_call(model, "context", {"query": QUERY, "env_name": ENV, "max_tokens": 300})
        assert not got.is_error and got.structured_content is None and len(got.content) == 1
        assert got.content[0].text == model.context("acme", QUERY, None, ENV, 300).text

        text = mcp_call(model, "search_world", {"query": QUERY, "k": 5}).content[0].text
        lines = text.splitlines()
        assert lines[0] == f"5 world record(s) for {QUERY!r}, best first:", text
        first_fact = next(line for line in lines if re.match(r"\d+\. fact ", line))
        assert "current" in first_fact and "beta labs" in first_fact, text
        assert any("closed 2026-02-01T05:00:00" in line and "acme corp" in line for line in lines), text
        assert "evidence: 'Alice started at beta labs.'" in text
        assert len(text.encode()) < 4000  # compact: no JSON of every field
        as_json = json.loads(mcp_call(model, "search_world", {"query": QUERY, "k": 5, "format": "json"}).content[0].text)
        assert as_json == {"hits": [h.model_dump() for h in model.search_world("acme", QUERY, None, 5)]}

        for name, args, field in (("search_world", {"query": QUERY, "k": 0}, "k"),
                                  ("search_world", {"query": QUERY, "as_of": "soon"}, "as_of"),
                                  ("context", {"query": QUERY, "max_tokens": 0}, "max_tokens"),
                                  ("context", {"query": QUERY, "env_name": "Attic"}, "env_name")):
            bad = mcp_call(model, name, args)
            assert bad.is_error and json.loads(bad.content[0].text)["error"]["field"] == field, bad.content


def test_cli(grown: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    base = ["--data", str(grown), "--tenant", "acme"]
    assert main([*base, "context", QUERY, "--env", ENV, "--max-tokens", "300"]) == 0
    text = capsys.readouterr().out
    with WorldModel.open(grown, embedder=HashingEmbedder(384)) as model:
        want = model.context("acme", QUERY, None, ENV, 300)
        hits = model.search_world("acme", QUERY, ENV, 3)
    assert text == want.text + "\n"
    assert main([*base, "context", QUERY, "--env", ENV, "--max-tokens", "300", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == want.model_dump()

    assert main([*base, "search-world", QUERY, "--env", ENV, "-k", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"3 world record(s) for {QUERY!r}") and hits[0].id in out
    assert main([*base, "search-world", QUERY, "--env", ENV, "--limit", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [h.model_dump() for h in hits]
    assert main([*base, "search-world", QUERY, "--as-of", "2026-02-01T03:00:00Z", "--json"]) == 0
    past = json.loads(capsys.readouterr().out)
    assert facts(past)[0][0] == "acme corp"

    for args, field in ((["search-world", QUERY, "-k", "0"], "k"), (["context", QUERY, "--max-tokens", "0"],
                                                                     "max_tokens"),
                        (["search-world", QUERY, "--env", "Attic"], "env_name")):
        assert main([*base, *args, "--json"]) == 1
        assert json.loads(capsys.readouterr().err)["error"]["field"] == field


def test_async_world_model(grown: Path) -> None:
    async def run() -> tuple[Any, Any]:
        async with await AsyncWorldModel.open(grown, embedder=HashingEmbedder(384)) as model:
            return (await model.search_world("acme", QUERY, env_name=ENV, k=3),
                    await model.context("acme", QUERY, env_name=ENV, max_tokens=300))

    hits, ctx = asyncio.run(run())
    with WorldModel.open(grown, embedder=HashingEmbedder(384)) as model:
        assert hits == model.search_world("acme", QUERY, ENV, 3)
        assert ctx == model.context("acme", QUERY, None, ENV, 300) and str(ctx) == ctx.text
