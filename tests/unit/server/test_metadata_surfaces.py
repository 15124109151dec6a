"""Metadata, upsert and chat turns on every surface: REST (?replace=, ?metadata= as JSON, roles and
empty text in /v1/conversations), MCP (record_experience replace, list_episodes metadata) and the
CLI (record --replace, recall and episodes list --metadata)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from tests.unit.server.test_server_api import EXPERIENCE, _tenant_api, client, wm  # noqa: F401 - fixtures
from worldgraph import WorldModel
from worldgraph.cli.main import main
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.mcp_server import build_mcp


def test_rest(wm: WorldModel, client: TestClient) -> None:  # noqa: F811
    api = _tenant_api(wm, client)
    item = {**EXPERIENCE, "episode_id": "item-1", "metadata": {"user": "u1", "n": 1}}
    api("POST", "/v1/experiences", json=item)
    assert api("POST", "/v1/experiences", 422, json=item)["error"]["field"] == "experience.episode_id"
    api("POST", "/v1/experiences", params={"replace": "true"}, json={**item, "metadata": {"user": "u1", "n": 2}})
    api("POST", "/v1/experiences", json={"experiences": [{**EXPERIENCE, "metadata": {"user": "u2"}}]})
    page = api("GET", "/v1/episodes", params={"metadata": json.dumps({"user": "u1"})})
    assert [(e["id"], e["metadata"]) for e in page["episodes"]] == [("item-1", {"user": "u1", "n": 2})]
    assert api("GET", "/v1/episodes", 422, params={"metadata": "{nope"})["error"]["field"] == "metadata"
    err = api("GET", "/v1/episodes", 422, params={"metadata": json.dumps({"n": {"$near": 1}})})["error"]
    assert err["field"] == "metadata.n.$near"
    hits = api("POST", "/v1/recall", json={"query": EXPERIENCE["task_description"],
                                           "options": {"metadata": {"user": "u2"}, "min_similarity": 0}})["results"]
    assert [h["metadata"] for h in hits] == [{"user": "u2"}]
    err = api("POST", "/v1/recall", 422, json={"query": "x", "options": {"metadata": {"a": {"$x": 1}}}})["error"]
    assert err["field"].startswith("options.metadata")
    api("POST", "/v1/conversations", json={"session_id": "chat-9", "turns": [
        {"role": "user", "text": "what is 6 x 7?"},
        {"role": "assistant", "text": "", "metadata": {"tool_calls": [{"name": "calc"}]}},
        {"role": "tool", "speaker": "calc", "text": "42"}]})
    turns = api("GET", "/v1/episodes", params={"session_id": "chat-9"})["episodes"][::-1]
    assert [(t["agent_role"], t["agent_id"], t["task_description"]) for t in turns] == [
        ("user", "user", "what is 6 x 7?"), ("assistant", "assistant", ""), ("tool", "calc", "42")]
    assert turns[1]["metadata"] == {"tool_calls": [{"name": "calc"}]}


def test_mcp(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as model:
        server = build_mcp(lambda: model, tenant="acme")

        async def run() -> None:
            async with Client(server) as c:
                item = {**EXPERIENCE, "episode_id": "item-1", "metadata": {"user": "u1"}}
                await c.call_tool("record_experience", {"experience": item})
                again = await c.call_tool("record_experience", {"experience": item})
                assert again.is_error
                await c.call_tool("record_experience", {"experience": {**item, "metadata": {"user": "u2"}},
                                                        "replace": True})
                page = await c.call_tool("list_episodes", {"metadata": {"user": "u2"}})
                assert [e["id"] for e in page.structured_content["episodes"]] == ["item-1"]
                page = await c.call_tool("list_episodes", {"metadata": {"user": "u1"}})
                assert page.structured_content["episodes"] == []
                await c.call_tool("record_conversation", {"session_id": "s", "turns": [
                    {"role": "user", "text": "hi"}, {"role": "assistant", "text": ""}]})
                page = await c.call_tool("list_episodes", {"session_id": "s"})
                assert [e["agent_role"] for e in page.structured_content["episodes"]] == ["assistant", "user"]
        asyncio.run(run())


def test_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = tmp_path / "data"

    def run(*args: str, ok: bool = True) -> Any:
        code = main(["--data", str(data), "--tenant", "acme", *args, "--json"])
        captured = capsys.readouterr()
        assert (code == 0) == ok, captured
        return json.loads(captured.out if ok else captured.err)

    f = tmp_path / "e.json"
    f.write_text(json.dumps({**EXPERIENCE, "episode_id": "item-1", "metadata": {"user": "u1"}}))
    run("record", str(f))
    assert run("record", str(f), ok=False)["error"]["field"] == "experience.episode_id"
    f.write_text(json.dumps({**EXPERIENCE, "episode_id": "item-1", "metadata": {"user": "u2"}}))
    run("record", str(f), "--replace")
    assert [e["id"] for e in run("episodes", "list", "--metadata", '{"user": "u2"}')["episodes"]] == ["item-1"]
    assert run("episodes", "list", "--metadata", '{"user": "u1"}')["episodes"] == []
    hits = run("recall", EXPERIENCE["task_description"], "--metadata", '{"user": "u2"}', "--min-similarity", "0")
    assert [h["episode_id"] for h in hits] == ["item-1"]
    assert run("recall", "x", "--metadata", "{bad", ok=False)["error"]["field"] == "--metadata"
