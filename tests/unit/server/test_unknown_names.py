"""One answer for unknown names on every surface: an agent the tenant has no episode of, or an
environment it has neither a graph nor a scene of, is 404 ``not_found`` naming the known ones --
from the Python API, REST (readiness, episodes, graph, view), MCP and the CLI alike."""

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
from worldgraph.cli.main import main
from worldgraph.errors import NotFoundError
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp

RUN = {"agent_id": "scout", "task_type": "t", "task_description": "open the vault", "outcome": "success"}
DELTA = {"entities": [{"ref": "k", "type": "item", "name": "brass key"}], "states": [], "edges": [], "rules": []}


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384)) as wm:
        wm.record_experience("t1", RUN)
        wm.record_experience("t1", {**RUN, "agent_id": "builder"})
        wm.apply_delta("t1", "Kitchen", DELTA)
        wm.observe_round("t1", "Garden", {"round": 1, "action": "look", "response": "FLAG_CURIOSITY: yes\n"
                                                                                     "CURIOSITY_REASON: new"})
    yield tmp_path / "data"


def _names_known(message: str, unknown: str, known: list[str]) -> None:
    assert unknown in message and all(k in message for k in known), message


def test_python_api(data: Path) -> None:
    with WorldModel.open(data, embedder=HashingEmbedder(384), world_background_updates=False) as wm:
        with pytest.raises(NotFoundError) as err:
            wm.get_agent_episodes("t1", "ghost")
        assert err.value.field == "agent_id"
        _names_known(str(err.value), "ghost", ["builder", "scout"])
        with pytest.raises(NotFoundError):
            wm.readiness("t1", "ghost")
        with pytest.raises(NotFoundError) as err:
            wm.world_graph("t1", "Attic")
        assert err.value.field == "env_name"
        _names_known(str(err.value), "Attic", ["Garden", "Kitchen"])
        assert wm.world_graph("t1", "Garden")["scenes"], "an environment with only a pending scene is known"
        assert wm.world_graph("t1", "Kitchen")["nodes"]
        with pytest.raises(NotFoundError) as err:  # another tenant's names are unknown, and not listed
            wm.world_graph("t2", "Kitchen")
        assert "none yet" in str(err.value) and "Garden" not in str(err.value)
        with pytest.raises(NotFoundError) as err:
            wm.get_agent_episodes("t2", "scout")
        assert "builder" not in str(err.value)


def test_rest_and_mcp(data: Path) -> None:
    with WorldModel.open(data, embedder=HashingEmbedder(384), world_background_updates=False) as wm:
        key, _ = ApiKeys(wm.store).create("t1")
        auth = {"Authorization": f"Bearer {key}"}
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            for path, field, known in (("/v1/agents/ghost/episodes", "agent_id", ["builder", "scout"]),
                                       ("/v1/agents/ghost/readiness", "agent_id", ["builder", "scout"]),
                                       ("/v1/envs/Attic/graph", "env_name", ["Garden", "Kitchen"]),
                                       ("/v1/envs/Attic/view", "env_name", ["Garden", "Kitchen"])):
                r = client.get(path, headers=auth)
                assert r.status_code == 404, (path, r.text)
                body = r.json()["error"]
                assert body["type"] == "not_found" and body["field"] == field, (path, body)
                _names_known(body["message"], "ghost" if "agents" in path else "Attic", known)
            # a retry of an unknown environment names it by env_name, as every other surface does
            r = client.post("/v1/world/retry?env=Attic", headers=auth)
            assert r.status_code == 404 and r.json()["error"]["field"] == "env_name", r.text
            _names_known(r.json()["error"]["message"], "Attic", ["Garden", "Kitchen"])
            r = client.get("/v1/envs/Attic/snapshot", headers=auth)
            assert r.status_code == 404 and r.json()["error"]["field"] == "env_name", r.text
            assert client.get("/v1/agents/scout/episodes", headers=auth).json()["episodes"]

        async def run() -> list[Any]:
            async with Client(build_mcp(lambda: wm, tenant="t1")) as mcp:
                return [await mcp.call_tool("get_agent_episodes", {"agent_id": "ghost"}),
                        await mcp.call_tool("world_graph", {"env_name": "Attic"})]

        for result, field in zip(asyncio.run(run()), ("agent_id", "env_name")):
            assert result.is_error
            body = json.loads(result.content[0].text)["error"]
            assert body["type"] == "not_found" and body["field"] == field


def test_cli(data: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    for args, known in ((["world", "show", "--env", "Attic"], ["Garden", "Kitchen"]),
                        (["episodes", "ghost"], ["builder", "scout"])):
        assert main(["--data", str(data), "--tenant", "t1", *args, "--json"]) == 1
        body = json.loads(capsys.readouterr().err)["error"]
        assert body["type"] == "not_found", body
        _names_known(body["message"], args[-1], known)
