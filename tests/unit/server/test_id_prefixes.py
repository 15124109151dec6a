"""An episode id may be given by a unique start of it on every surface that takes one: Python,
REST (feedback, GET and DELETE /v1/episodes/<id>), MCP and the CLI. At least 4 characters, 8 for a
forget; a start several ids share is a 409 ``ambiguous_id`` listing them; another tenant's ids
never match."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from worldgraph import WorldModel
from worldgraph.errors import AmbiguousIdError, NotFoundError
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp

TWINS = ["1234abcd-0000-4000-8000-000000000001", "1234abce-0000-4000-8000-000000000002"]
LONE = "99990000-1111-4000-8000-000000000003"


@pytest.fixture
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384)) as model:  # as the CLI below
        model.record_experiences("t", [{"agent_id": "a", "agent_role": "r", "task_type": "x", "outcome": "success",
                                        "task_description": f"task {i}", "episode_id": eid}
                                       for i, eid in enumerate([*TWINS, LONE])])
        yield model


def test_python(wm: WorldModel) -> None:
    assert wm.get_episode("t", "9999")["id"] == LONE
    assert wm.submit_feedback("t", "99990000", 0.5)["episode_id"] == LONE
    with pytest.raises(AmbiguousIdError) as err:
        wm.get_episode("t", "1234ab")
    assert err.value.candidates == TWINS and err.value.field == "episode_id"
    with pytest.raises(NotFoundError, match="at least 4"):
        wm.get_episode("t", "999")
    with pytest.raises(NotFoundError):
        wm.get_episode("other", "9999")  # another tenant's id is no match
    with pytest.raises(NotFoundError, match="at least 8"):
        wm.forget_episode("t", "9999000")  # unique, but a forget wants 8 characters
    assert wm.forget_episode("t", "99990000").target_id == LONE
    with pytest.raises(NotFoundError):
        wm.get_episode("t", LONE)


def test_rest(wm: WorldModel) -> None:
    key, _ = ApiKeys(wm.store).create("t", scopes=["read", "write", "forget"])
    auth = {"Authorization": f"Bearer {key}"}
    with TestClient(create_app(wm), raise_server_exceptions=False) as client:
        assert client.get("/v1/episodes/9999", headers=auth).json()["id"] == LONE
        r = client.get("/v1/episodes/1234ab", headers=auth)
        assert r.status_code == 409, r.text
        body = r.json()["error"]
        assert body["type"] == "ambiguous_id" and body["field"] == "episode_id"
        assert all(t in body["message"] for t in TWINS)
        r = client.post("/v1/episodes/1234abcd/feedback", json={"score": 0.5}, headers=auth)
        assert r.status_code == 200 and r.json()["episode_id"] == TWINS[0]
        assert client.delete("/v1/episodes/1234abc", headers=auth).status_code == 404  # 7: too short to forget
        r = client.delete("/v1/episodes/1234abcd", headers=auth)
        assert r.status_code == 200 and r.json()["target_id"] == TWINS[0], r.text
        assert client.get("/v1/episodes/1234ab", headers=auth).json()["id"] == TWINS[1]  # unique now


def test_mcp(wm: WorldModel) -> None:
    async def run() -> list[Any]:
        async with Client(build_mcp(lambda: wm, tenant="t")) as client:
            return [await client.call_tool("get_episode", {"episode_id": "9999"}),
                    await client.call_tool("get_episode", {"episode_id": "1234ab"}),
                    await client.call_tool("forget_episode", {"episode_id": "99990000"})]

    found, ambiguous, forgot = asyncio.run(run())
    assert found.structured_content["episode_id"] == LONE
    assert ambiguous.is_error
    body = json.loads(ambiguous.content[0].text)["error"]
    assert body["type"] == "ambiguous_id" and TWINS[0] in body["message"]
    assert forgot.structured_content["target_id"] == LONE


def test_cli(wm: WorldModel, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from worldgraph.cli.main import main

    data = str(Path(wm.store.path).parent)  # type: ignore[attr-defined]
    wm.close()
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    assert main(["--data", data, "--tenant", "t", "episodes", "show", "9999", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == LONE
    assert main(["--data", data, "--tenant", "t", "episodes", "show", "1234ab", "--json"]) == 1
    assert json.loads(capsys.readouterr().err)["error"]["type"] == "ambiguous_id"
    assert main(["--data", data, "--tenant", "t", "forget", "episode", "9999", "--json"]) == 1
    assert "at least 8" in capsys.readouterr().err
    assert main(["--data", data, "--tenant", "t", "forget", "episode", "99990000", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["target_id"] == LONE
