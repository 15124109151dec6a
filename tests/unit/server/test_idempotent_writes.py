"""Idempotency-Key on REST writes and idempotency_key on MCP's write tools: a retry returns the
first answer and stores nothing new; the same key with another body is a 422 naming the key; a
request still being answered is a 409."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from worldgraph import WorldModel
from worldgraph.facade.idempotency import request_hash
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp
from worldgraph.server.models import AgentExperience

RUN = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
       "task_description": "Reconcile SKU-123 inventory", "outcome": "success"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WorldModel, TestClient, dict[str, str]]]:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as wm:
        key, _ = ApiKeys(wm.store).create("acme")
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            yield wm, client, {"Authorization": f"Bearer {key}"}


def test_rest_writes_with_an_idempotency_key(served: Any) -> None:
    wm, client, auth = served
    once = {**auth, "Idempotency-Key": "7f0c1d2e-retry-1"}
    first = client.post("/v1/experiences", json=RUN, headers=once)
    again = client.post("/v1/experiences", json=RUN, headers=once)
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    assert wm.stats("acme")["episodes"] == 1
    other = client.post("/v1/experiences", json={**RUN, "task_description": "something else"}, headers=once)
    assert other.status_code == 422, other.text
    assert other.json()["error"]["field"] == "idempotency_key"
    eid = first.json()["episode_ids"][0]
    rate = {**auth, "Idempotency-Key": "rate-1"}
    a = client.post(f"/v1/episodes/{eid}/feedback", json={"score": 0.5, "notes": "ok"}, headers=rate).json()
    b = client.post(f"/v1/episodes/{eid}/feedback", json={"score": 0.5, "notes": "ok"}, headers=rate).json()
    assert a == b and b["count"] == 1
    rnd = {"round": 1, "action": "look", "response": "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: new"}
    r1 = client.post("/v1/envs/Attic/rounds", json=rnd, headers={**auth, "Idempotency-Key": "round-1"}).json()
    r2 = client.post("/v1/envs/Attic/rounds", json=rnd, headers={**auth, "Idempotency-Key": "round-1"}).json()
    assert r1["packet"]["id"] == r2["packet"]["id"]
    delta = {"entities": [{"name": "box", "type": "item"}], "states": [], "edges": [], "rules": []}
    d1 = client.post("/v1/envs/Attic/deltas", json=delta, headers={**auth, "Idempotency-Key": "delta-1"}).json()
    d2 = client.post("/v1/envs/Attic/deltas", json=delta, headers={**auth, "Idempotency-Key": "delta-1"}).json()
    assert d1 == d2
    conv = {"session_id": "c1", "turns": [{"speaker": "bob", "text": "hi"}]}
    c1 = client.post("/v1/conversations", json=conv, headers={**auth, "Idempotency-Key": "conv-1"}).json()
    assert client.post("/v1/conversations", json=conv, headers={**auth, "Idempotency-Key": "conv-1"}).json() == c1
    assert wm.stats("acme")["episodes"] == 3  # the run, the round, the turn
    bad = client.post("/v1/experiences", json=RUN, headers={**auth, "Idempotency-Key": "two words"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "idempotency_key"


def test_rest_conflict_while_the_first_request_runs(served: Any) -> None:
    wm, client, auth = served
    now = datetime.now(timezone.utc)
    digest = request_hash("record_experiences", {"experiences": [AgentExperience(**RUN)], "canvases": None})
    wm.store.begin_idempotent("acme", "busy", digest, now.isoformat(), (now + timedelta(days=1)).isoformat(),
                              (now - timedelta(minutes=10)).isoformat())
    r = client.post("/v1/experiences", json=RUN, headers={**auth, "Idempotency-Key": "busy"})
    assert r.status_code == 409, r.text
    assert r.json()["error"]["type"] == "conflict" and r.json()["error"]["field"] == "idempotency_key"
    assert wm.stats("acme")["episodes"] == 0


def test_mcp_write_tools_take_an_idempotency_key(served: Any) -> None:
    wm, _, _ = served

    async def run() -> list[Any]:
        async with Client(build_mcp(lambda: wm, tenant="acme")) as client:
            args = {"experience": RUN, "idempotency_key": "mcp-1"}
            return [await client.call_tool("record_experience", args),
                    await client.call_tool("record_experience", args)]

    first, second = asyncio.run(run())
    assert first.structured_content == second.structured_content
    assert wm.stats("acme")["episodes"] == 1
