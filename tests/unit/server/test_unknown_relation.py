"""An edge whose relation is unknown (``near``, as a new user writes it), missing or not a string
is dropped, the rest of the delta merges, and the reason teaches the fix -- ``relation: fact``
with a snake_case predicate -- wherever a merge report is shown: the Python API, REST, MCP, the
CLI's ``delta apply`` (text and JSON), and a scene packet's merge (the report its extraction
gave, kept with the scene)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from worldgraph import WorldModel
from worldgraph.cli.main import main
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp

PEOPLE = [{"ref": "a", "name": "alice", "type": "person"}, {"ref": "p", "name": "the park", "type": "place"}]
NEAR = {"relation": "near", "src_ref": "a", "dst_ref": "p", "evidence": "Alice lives near the park."}
NO_RELATION = {"predicate": "lives_near", "src_ref": "a", "dst_ref": "p"}
DELTA = {"entities": PEOPLE, "states": [], "rules": [], "edges": [NEAR, NO_RELATION]}
FIX = '"relation": "fact", "predicate": '


def check(dropped: list[dict[str, Any]]) -> None:
    """Both edges dropped, each reason naming the relations allowed, fact among them, and the fact
    to write instead (with the relation, or the predicate given, as its predicate)."""
    assert [(d["kind"], d["index"]) for d in dropped] == [("edge", 0), ("edge", 1)], dropped
    near, missing = (d["reason"] for d in dropped)
    assert near.startswith("unknown relation 'near'; allowed: containment") and "fact (any other kind" in near
    assert "Write another kind as relation: fact" in near and FIX + '"near"' in near
    assert missing.startswith("relation: missing (required). The relations allowed: containment")
    assert FIX + '"lives_near"' in missing


def test_python_api_cli_and_a_scene(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(384), world_background_updates=False) as wm:  # the CLI's
        report = wm.apply_delta("t1", "Town", DELTA)
        assert report.ok and len(report.created["nodes"]) == 2 and report.created["edges"] == []
        check(report.to_dict()["dropped"])
        # the fix, as the reason writes it, merges
        fixed = wm.apply_delta("t1", "Town", {**DELTA, "edges": [
            {"relation": "fact", "predicate": "near", "src_ref": "a", "dst_ref": "p"}]})
        assert fixed.ok and fixed.dropped == [] and len(fixed.created["edges"]) == 1
        # a scene packet's merge keeps its report with the scene: the reason is read back there
        packet = wm.observe_round("t1", "Town", {"round": 1, "action": "look", "response":
                                                 "FLAG_CURIOSITY: yes\nCURIOSITY_REASON: neighbours"})
        assert packet is not None
        scened = wm.apply_delta("t1", "Town", DELTA, scene=packet)
        kept = wm.store.get_scene_report("t1", scened.scene_id or "")
        assert kept is not None
        check(kept["dropped"])

    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    (tmp_path / "delta.json").write_text(json.dumps(DELTA))
    assert main(["--data", str(data), "--tenant", "t2", "delta", "apply", str(tmp_path / "delta.json"),
                 "--env", "Town"]) == 0
    text = capsys.readouterr().out
    assert "dropped edge[0]: unknown relation 'near'" in text and FIX + '"near"' in text, text
    assert main(["--data", str(data), "--tenant", "t3", "delta", "apply", str(tmp_path / "delta.json"),
                 "--env", "Town", "--json"]) == 0
    check(json.loads(capsys.readouterr().out)[0]["dropped"])


def test_rest_and_mcp(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64), world_background_updates=False) as wm:
        key, _ = ApiKeys(wm.store).create("t1")
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            r = client.post("/v1/envs/Town/deltas", json=DELTA, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 200, r.text
            assert r.json()["ok"] is True
            check(r.json()["dropped"])

        async def run() -> Any:
            async with Client(build_mcp(lambda: wm, tenant="t2")) as mcp:
                return await mcp.call_tool("apply_delta", {"env_name": "Town", "delta": DELTA})

        result = asyncio.run(run())
        assert not result.is_error, result.content
        check(json.loads(result.content[0].text)["dropped"])
