"""Browse and forget on every surface: REST (cursor pages, an unknown ?offset= is 400, 404 across
tenants, DELETE routes need the forget scope), key scopes, MCP tools, and the CLI."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from tests.unit.server.test_server_api import DELTA, EXPERIENCE, Api, _tenant_api, client, wm  # noqa: F401 - fixtures
from worldgraph import InvalidInputError, WorldModel
from worldgraph.cli.main import main
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp


def _keyed(wm: WorldModel, client: TestClient, tenant: str, scopes: list[str] | None,  # noqa: F811
           name: str | None = None) -> Api:
    key, record = ApiKeys(wm.store).create(tenant, name=name, scopes=scopes)
    assert record["scopes"] == (scopes or ["read", "write"])
    return Api(client, key, tenant)


def test_rest_browse_and_forget(wm: WorldModel, client: TestClient) -> None:  # noqa: F811
    api = _tenant_api(wm, client)
    ids = api("POST", "/v1/experiences", json={"experiences": [
        {**EXPERIENCE, "task_description": f"task {i}", "timestamp": f"2026-01-0{i + 1}T00:00:00Z"} for i in range(5)]}
    )["episode_ids"]
    seen, cursor = [], None
    while True:
        page = api("GET", "/v1/episodes", params={"limit": 2, **({"cursor": cursor} if cursor else {})})
        seen += [e["id"] for e in page["episodes"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]
    err = api("GET", "/v1/episodes", 400, params={"offset": 2})["error"]
    assert err["field"] == "offset" and "cursor" in err["message"]
    assert api("GET", "/v1/episodes", 422, params={"cursor": "nope"})["error"]["field"] == "cursor"
    assert api("GET", "/v1/episodes", params={"agent_id": "nobody"}) == {"episodes": [], "next_cursor": None}
    assert api("GET", f"/v1/episodes/{ids[0]}")["id"] == ids[0]
    assert api("GET", "/v1/agents")["agents"][0]["episodes"] == 5
    api("POST", "/v1/envs/Kitchen/deltas", json=DELTA)
    assert [e["env_name"] for e in api("GET", "/v1/envs")["envs"]] == ["Kitchen"]
    assert api("GET", "/v1/stats")["episodes"] == 5

    # the default key reads and writes, and cannot forget
    assert api("DELETE", f"/v1/episodes/{ids[0]}", 403)["error"]["type"] == "forbidden"
    forgetter = _keyed(wm, client, api.tenant, ["forget"], name="privacy-desk")
    report = forgetter("DELETE", f"/v1/episodes/{ids[0]}")
    assert report["kind"] == "episode" and report["removed"]["episodes"] == 1
    assert report["forgotten_by"] == "privacy-desk", "the audit names the key"
    assert wm.store.forget_log(api.tenant)[-1]["forgotten_by"] == "privacy-desk"
    assert forgetter("GET", "/v1/episodes", 403)["error"]["field"] == "scope"  # forget only: no reading
    api("GET", f"/v1/episodes/{ids[0]}", 404)
    forgetter("DELETE", f"/v1/episodes/{ids[0]}", 404)
    assert forgetter("DELETE", "/v1/envs/Kitchen")["removed"]["nodes"] == 2
    forgetter("DELETE", "/v1/envs/Kitchen", 404)
    # by person: an agent, a session (ids with a slash too); an unnamed key is named by its id
    unnamed = _keyed(wm, client, api.tenant, ["read", "write", "forget"])
    turns = unnamed("POST", "/v1/conversations", json={"session_id": "chat/7", "turns": [
        {"speaker": "Ann", "text": "hello"}, {"speaker": "Bo B", "text": "hi"}, {"speaker": "Ann", "text": "bye"}]})
    report = unnamed("DELETE", "/v1/agents/Bo B")
    assert report["kind"] == "agent" and report["removed"]["episodes"] == 1
    assert report["removed"]["turn_contexts_rederived"] == 1 and report["forgotten_by"].startswith("key ")
    unnamed("DELETE", "/v1/agents/Bo B", 404)
    assert unnamed("DELETE", "/v1/sessions/chat/7")["removed"]["episodes"] == 2
    assert unnamed("GET", f"/v1/episodes/{turns['episode_ids'][0]}", 404)["error"]["type"] == "not_found"
    unnamed("DELETE", "/v1/sessions/chat/7", 404)
    api("DELETE", "/v1/agents/agent-1", 403)
    api("DELETE", "/v1/sessions/s", 403)

    # sealed: another tenant's full key finds nothing to read or forget
    other = _keyed(wm, client, api.tenant + "-x", ["read", "write", "forget"])
    other("GET", f"/v1/episodes/{ids[1]}", 404)
    other("DELETE", f"/v1/episodes/{ids[1]}", 404)
    assert other("GET", "/v1/episodes")["episodes"] == []

    # the tenant, with its name spelled out
    assert forgetter("DELETE", "/v1/tenant", 422, json={"confirm": "someone-else"})["error"]["field"] == "confirm"
    forgetter("DELETE", "/v1/tenant", 422, json={})
    report = forgetter("DELETE", "/v1/tenant", json={"confirm": api.tenant})
    assert report["removed"]["episodes"] == 4 and report["removed"]["api_keys"] == 3
    api("GET", "/v1/episodes", 401)  # its keys went with it
    assert other("GET", f"/v1/episodes/{ids[1]}", 404)


def test_a_read_only_key_reads_and_cannot_write(wm: WorldModel, client: TestClient) -> None:  # noqa: F811
    writer = _tenant_api(wm, client)
    eid = writer("POST", "/v1/experiences", json=EXPERIENCE)["episode_ids"][0]
    reader = _keyed(wm, client, writer.tenant, ["read"])
    assert reader("GET", f"/v1/episodes/{eid}")["id"] == eid
    reader("POST", "/v1/recall", json={"query": "inventory"})
    assert reader("POST", "/v1/experiences", 403, json=EXPERIENCE)["error"]["field"] == "scope"
    reader("DELETE", f"/v1/episodes/{eid}", 403)
    reader("DELETE", "/v1/tenant", 403, json={"confirm": writer.tenant})
    with pytest.raises(InvalidInputError):
        ApiKeys(wm.store).create(writer.tenant, scopes=["admin"])
    paths = client.get("/openapi.json").json()["paths"]
    assert {"get", "delete"} <= set(paths["/v1/episodes/{episode_id}"]) and "delete" in paths["/v1/tenant"]
    assert "delete" in paths["/v1/agents/{agent_id}"] and "delete" in paths["/v1/sessions/{session_id}"]
    assert {"/v1/episodes", "/v1/agents", "/v1/envs", "/v1/envs/{env}", "/v1/stats"} <= set(paths)


def test_mcp_tools(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as model:
        eid = model.record_experience("acme", EXPERIENCE)
        turns = model.record_conversation("acme", "chat-9", [{"speaker": "Ann", "text": "hi"},
                                                             {"speaker": "Bo", "text": "yo"}])
        server = build_mcp(lambda: model, tenant="acme", actor="ops-user")

        async def run() -> None:
            async with Client(server) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert {"get_episode", "list_episodes", "forget_episode", "forget_agent", "forget_session"} <= names
                got = await c.call_tool("get_episode", {"episode_id": eid})
                assert got.structured_content["id"] == eid
                page = await c.call_tool("list_episodes", {"limit": 5})
                assert {e["id"] for e in page.structured_content["episodes"]} == {eid, *turns}
                gone = await c.call_tool("forget_episode", {"episode_id": eid})
                assert gone.structured_content["removed"]["episodes"] == 1
                assert gone.structured_content["forgotten_by"] == "ops-user"
                gone = await c.call_tool("forget_agent", {"agent_id": "Bo"})
                assert gone.structured_content["removed"]["episodes"] == 1
                gone = await c.call_tool("forget_session", {"session_id": "chat-9"})
                assert gone.structured_content["removed"]["episodes"] == 1
                assert model.list_episodes("acme").items == []
                assert turns[0] not in model.store.get_episodes("acme", turns)
                missing = await c.call_tool("get_episode", {"episode_id": eid})
                text = missing.content[0].text  # type: ignore[union-attr]
                assert missing.is_error and json.loads(text[text.index("{"):])["error"]["type"] == "not_found"
        asyncio.run(run())


def test_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = tmp_path / "data"

    def run(*args: str, ok: bool = True) -> Any:
        code = main(["--data", str(data), "--tenant", "acme", *args, "--json"])
        captured = capsys.readouterr()
        assert (code == 0) == ok, captured
        out = captured.out if ok else captured.err
        return json.loads(out) if out.strip() else None

    f = tmp_path / "e.jsonl"
    f.write_text("\n".join(json.dumps({**EXPERIENCE, "task_description": f"task {i} clisecret{i}"}) for i in range(3)))
    ids = run("record", str(f))["episode_ids"]
    page = run("episodes", "list", "--limit", "2")
    assert len(page["episodes"]) == 2 and page["next_cursor"]
    rest = run("episodes", "list", "--limit", "2", "--cursor", page["next_cursor"])
    assert len(rest["episodes"]) == 1 and rest["next_cursor"] is None
    assert run("episodes", "show", ids[0][:8])["id"] == ids[0]
    assert len(run("episodes", EXPERIENCE["agent_id"])) == 3  # an agent's newest, as before
    out = run("forget", "episode", ids[0][:8])
    assert out["removed"]["episodes"] == 1 and out["purge"]["forgets_purged"] == 1
    import pwd

    assert out["forgotten_by"] == pwd.getpwuid(os.getuid()).pw_name, "the audit names the OS user"
    assert not any(b"clisecret0" in p.read_bytes() for p in data.rglob("*") if p.is_file())
    assert run("forget", "env", "Nowhere", ok=False)["error"]["type"] == "not_found"
    t = tmp_path / "t.json"
    t.write_text(json.dumps([{"speaker": "Ann", "text": "one"}, {"speaker": "Bo", "text": "two clisecretbo"},
                             {"speaker": "Ann", "text": "three"}]))
    run("record-conversation", str(t), "--session", "chat-1")
    out = run("forget", "agent", "Bo")
    assert out["kind"] == "agent" and out["removed"]["turn_contexts_rederived"] == 1 and out["purge"]
    assert not any(b"clisecretbo" in p.read_bytes() for p in data.rglob("*") if p.is_file())
    assert run("forget", "agent", "Nobody", ok=False)["error"]["field"] == "agent_id"
    assert run("forget", "session", "chat-1")["removed"]["episodes"] == 2
    assert run("forget", "session", "chat-1", ok=False)["error"]["type"] == "not_found"
    assert run("forget", "tenant", ok=False)["error"]["field"] == "--yes"
    assert run("forget", "tenant", "--yes")["removed"]["episodes"] == 2
    assert run("purge")["forgets_purged"] == 0
    assert run("episodes", "list")["episodes"] == []
    key = run("keys", "create", "--tenant", "acme", "--scope", "read,forget")
    assert key["scopes"] == ["read", "forget"]
    assert run("keys", "create", "--tenant", "acme", "--scope", "root", ok=False)["error"]["field"] == "scope"


@pytest.mark.slow
def test_mcp_forget_over_http_needs_the_forget_scope(tmp_path: Path) -> None:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    from tests.support.live_server import LiveServer, worldgraph

    with LiveServer(tmp_path) as srv:
        full = str(worldgraph(srv.data, "keys", "create", "--tenant", srv.tenant, "--scope", "read,write,forget",
                              env=srv.env)["key"])

        async def forget_with(key: str) -> tuple[bool, str]:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=120) as http:
                async with Client(streamable_http_client(f"{srv.url}/mcp", http_client=http)) as c:
                    rec = await c.call_tool("record_experience", {"experience": EXPERIENCE})
                    eid = rec.structured_content["episode_id"]
                    gone = await c.call_tool("forget_episode", {"episode_id": eid})
                    return gone.is_error, gone.content[0].text  # type: ignore[union-attr]

        named = str(worldgraph(srv.data, "keys", "create", "--tenant", srv.tenant, "--name", "mcp-desk", "--scope",
                               "read,write,forget", env=srv.env)["key"])

        refused, text = asyncio.run(forget_with(srv.key))  # the default key: read + write
        assert refused and json.loads(text[text.index("{"):])["error"]["type"] == "forbidden"
        refused, text = asyncio.run(forget_with(full))
        assert not refused and json.loads(text)["removed"]["episodes"] == 1
        assert json.loads(text)["forgotten_by"].startswith("key ")
        refused, text = asyncio.run(forget_with(named))
        assert not refused and json.loads(text)["forgotten_by"] == "mcp-desk", "the audit names the key"
