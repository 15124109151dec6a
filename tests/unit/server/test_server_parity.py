"""REST routes for what the Python API and the CLI do beyond the first routes: record a
conversation, export / import a snapshot, retry world updates, and the answer of a round or a
retry saying that no LLM is configured (not only the server log)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app, openapi_document
from worldgraph.server.keys import ApiKeys

FLAGGED = {"round": 3, "action": "take brass key", "after_observation": "Taken.",
           "response": "done\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: a key"}
DELTA = {"entities": [{"ref": "k", "name": "brass key", "type": "item"},
                      {"ref": "t", "name": "table", "type": "furniture"}],
         "states": [], "edges": [{"relation": "containment", "src_ref": "t", "dst_ref": "k"}],
         "rules": [{"condition": "the key is on the table", "outcome": "it can be taken"}]}


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384))
    key, _ = ApiKeys(wm.store).create("acme")
    try:
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            def call(method: str, path: str, status: int = 200, **kw: Any) -> Any:
                r = client.request(method, path, headers={"Authorization": f"Bearer {key}"}, **kw)
                assert r.status_code == status, r.text
                return r.json()
            call.wm = wm  # type: ignore[attr-defined]
            yield call
    finally:
        wm.close()


def test_record_conversation(api: Any) -> None:
    turns = [{"speaker": "bob", "text": "Can you reconcile SKU-123?", "timestamp": "2025-03-01T10:00:00Z"},
             {"speaker": "amy", "text": "Done: counted twice.", "timestamp": "2025-03-01T10:01:00Z"}]
    ids = api("POST", "/v1/conversations", json={"session_id": "chat-1", "turns": turns})["episode_ids"]
    assert len(ids) == 2
    episodes = api("GET", "/v1/agents/amy/episodes")["episodes"]
    assert [e["id"] for e in episodes] == [ids[1]]
    assert episodes[0]["session_id"] == "chat-1" and episodes[0]["input_summary"] == "bob: Can you reconcile SKU-123?"
    # the facade's own checks run on every turn, named by index
    bad = api("POST", "/v1/conversations", 422, json={"session_id": "chat-1",
                                                      "turns": [turns[0], {**turns[1], "agent_id": "x"}]})
    assert bad["error"]["field"] == "turns[1].agent_id"
    assert api("POST", "/v1/conversations", 422, json={"session_id": "chat-1", "turns": [{"speaker": "bob"}]}
               )["error"]["field"] == "turns[0].text"
    assert len(api("GET", "/v1/agents/bob/episodes")["episodes"]) == 1  # nothing of a refused call is stored


def test_snapshot_export_then_import(api: Any) -> None:
    assert api("POST", "/v1/envs/Kitchen/deltas", json=DELTA)["ok"]
    snap = api("GET", "/v1/envs/Kitchen/snapshot")
    assert set(snap) == {"meta", "nodes", "edges", "rules", "scenes"}
    assert sorted(n["name"] for n in snap["nodes"]) == ["brass key", "table"]
    assert snap["meta"]["env_name"] == "Kitchen" and snap["meta"]["counts"]["nodes"] == 2
    # import into an empty environment of the same name after wiping it with an empty snapshot
    assert api("PUT", "/v1/envs/Kitchen/snapshot", json={"meta": {"env_name": "Kitchen"}})["counts"]["nodes"] == 0
    assert api("GET", "/v1/envs/Kitchen/graph")["nodes"] == []
    loaded = api("PUT", "/v1/envs/Kitchen/snapshot", json=snap)
    assert loaded["env_name"] == "Kitchen" and loaded["counts"] == {"nodes": 2, "edges": 1, "rules": 1, "scenes": 0}
    again = api("GET", "/v1/envs/Kitchen/snapshot")
    assert {k: again[k] for k in ("nodes", "edges", "rules")} == {k: snap[k] for k in ("nodes", "edges", "rules")}

    assert api("PUT", "/v1/envs/Attic/snapshot", 422, json=snap)["error"]["field"] == "meta.env_name"
    bad = api("PUT", "/v1/envs/Kitchen/snapshot", 422, json={**snap, "nodes": [{"id": "n1", "kind": "entity"}]})
    assert bad["error"]["field"] == "nodes[0]" and "type, name" in bad["error"]["message"]
    assert api("GET", "/v1/envs/Kitchen/graph")["nodes"] != []  # a refused import replaced nothing
    assert api("PUT", "/v1/envs/bad%20env/snapshot", 422, json={})["error"]["field"] == "env_name"
    assert api("GET", "/v1/envs/Attic/snapshot", 404)["error"]["type"] == "not_found"


def test_rounds_and_retry_say_no_llm_is_configured(api: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    quiet = api("POST", "/v1/envs/Kitchen/rounds", json={"round": 1, "action": "look", "response": "nothing"})
    assert quiet == {"packet": None, "llm_configured": False, "note": None}
    answer = api("POST", "/v1/envs/Kitchen/rounds", json=FLAGGED)
    assert answer["packet"]["status"] == "pending" and answer["llm_configured"] is False
    assert "no LLM is configured" in answer["note"] and "OPENAI_API_KEY" in answer["note"]
    assert "/v1/world/retry" in answer["note"]

    retried = api("POST", "/v1/world/retry")
    assert [r["scene_id"] for r in retried["reports"]] == [answer["packet"]["id"]]
    assert retried["reports"][0]["ok"] is False and retried["llm_configured"] is False
    assert "no LLM is configured" in retried["note"]
    scenes = api("GET", "/v1/envs/Kitchen/graph")["scenes"]
    assert [s["status"] for s in scenes] == ["pending"]  # kept for a retry once an LLM is set
    assert api("POST", "/v1/world/retry?env=Kitchen")["reports"][0]["scene_id"] == answer["packet"]["id"]
    missing = api("POST", "/v1/world/retry?env=Attic", 404)["error"]
    assert missing["type"] == "not_found" and "Kitchen" in missing["message"]

    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9")  # configured (unreachable: stays queued)
    api.wm.config.world_background_updates = False  # type: ignore[attr-defined]  # no worker thread here
    configured = api("POST", "/v1/envs/Kitchen/rounds", json={**FLAGGED, "round": 4})
    assert configured["llm_configured"] is True and "worldgraph worker" in configured["note"]


def test_the_routes_are_in_the_openapi_document() -> None:
    doc = openapi_document()
    ops = {(m, p): o for p, ms in doc["paths"].items() for m, o in ms.items()}
    for key in [("post", "/v1/conversations"), ("get", "/v1/envs/{env}/snapshot"), ("put", "/v1/envs/{env}/snapshot"),
                ("post", "/v1/world/retry")]:
        assert ops[key]["summary"] and ops[key]["description"], key
    props = doc["components"]["schemas"]["RoundResponse"]["properties"]
    assert {"llm_configured", "note"} <= set(props) and "LLM" in props["llm_configured"]["description"]
    assert "llm_configured" in doc["components"]["schemas"]["RetryResponse"]["properties"]
    # the stated default is the one recall uses when the server sets nothing (0.3 with hybrid, not 0.6)
    floor = doc["components"]["schemas"]["RecallOptions"]["properties"]["min_similarity"]["description"]
    assert f"{WorldGraphConfig().min_similarity} unless the server sets it" in floor
