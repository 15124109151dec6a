"""One error vocabulary on every surface: the same bad input gives the same body,
``{"error": {"type", "message", "field"}}``, from REST, from an MCP tool (also when the SDK's own
check of the arguments refuses it: no pydantic text, no URL) and from the CLI's ``--json``; and a
delta whose every item was dropped answers ``ok: false``."""

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
from worldgraph.errors import ERROR_TYPES
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp

TYPES = {t for _, _, t in ERROR_TYPES}
RUN = {"agent_id": "a", "task_type": "t", "task_description": "open the vault", "outcome": "success"}
ALL_DROPPED = {"entities": [], "states": [], "rules": [],
               "edges": [{"relation": "containment", "src_ref": "nowhere", "dst_ref": "nothing"}]}


@pytest.fixture
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    model = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64))
    yield model
    model.close()


def _rest(wm: WorldModel) -> tuple[TestClient, dict[str, str]]:
    key, _ = ApiKeys(wm.store).create("t1")
    return TestClient(create_app(wm), raise_server_exceptions=False), {"Authorization": f"Bearer {key}"}


def _mcp(wm: WorldModel, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    async def run() -> list[Any]:
        async with Client(build_mcp(lambda: wm, tenant="t1")) as client:
            return [await client.call_tool(name, args) for name, args in calls]
    return asyncio.run(run())


def _tool_error(result: Any) -> dict[str, Any]:
    assert result.is_error
    body = json.loads(result.content[0].text)  # the whole text is the body: no SDK prefix
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "field"}, body
    return body["error"]  # type: ignore[no-any-return]


def test_mcp_argument_errors_are_the_rest_body(wm: WorldModel) -> None:
    client, auth = _rest(wm)
    with client:
        rest = client.post("/v1/experiences", headers=auth, json={"experiences": [{**RUN, "outcome": "meh"}]})
        rest_limit = client.post("/v1/recall", headers=auth, json={"query": "vault", "limit": 0})
    assert rest.status_code == 422 and rest_limit.status_code == 422
    bad_outcome, bad_limit, missing, not_ours, unknown_tool = _mcp(wm, [
        ("record_experience", {"experience": {**RUN, "outcome": "meh"}}),
        ("recall_experiences", {"query": "vault", "limit": 0}),
        ("record_experience", {"experience": {k: v for k, v in RUN.items() if k != "outcome"}}),
        ("submit_feedback", {"episode_id": "nope", "score": 0.5}),
        ("no_such_tool", {}),
    ])
    err = _tool_error(bad_outcome)
    assert err["type"] == "invalid_input" and err["field"] == "experience.outcome"
    assert "http" not in err["message"] and "Error executing tool" not in err["message"]
    # the rule is REST's, word for word (only the path to the field differs: a body vs arguments)
    assert err["message"].split(": ", 1)[1] == rest.json()["error"]["message"].split(": ", 1)[1]
    err = _tool_error(bad_limit)
    rest_body = {k: v for k, v in rest_limit.json()["error"].items() if k != "request_id"}  # REST's own trace id
    assert err == {**rest_body, "message": err["message"]} and err["field"] == "limit"
    assert err["message"] == rest_limit.json()["error"]["message"]
    err = _tool_error(missing)
    assert err["type"] == "invalid_input" and err["field"] == "experience.outcome" and "is required" in err["message"]
    err = _tool_error(not_ours)
    assert err["type"] == "not_found" and err["field"] == "episode_id" and "nope" in err["message"]
    assert _tool_error(unknown_tool)["type"] == "not_found"


def test_cli_json_errors_use_the_rest_types(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = str(tmp_path / "data")

    def error(*args: str) -> dict[str, Any]:
        with pytest.raises(SystemExit) if args[0] == "recall" and "--limit" in args else _nothing():
            code = main(["--data", data, *args, "--json"])
            assert code != 0
        line = capsys.readouterr().err.strip()
        assert len(line.splitlines()) == 1, line
        body = json.loads(line)
        assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "field"}, body
        return body["error"]  # type: ignore[no-any-return]

    assert error("stats")["type"] == "invalid_input"  # a read command on a missing folder
    (tmp_path / "runs.jsonl").write_text(json.dumps(RUN) + "\n")
    assert main(["--data", data, "record", str(tmp_path / "runs.jsonl"), "--json"]) == 0
    capsys.readouterr()
    err = error("feedback", "ffffffff", "0.5")
    assert err["type"] == "not_found" and err["type"] in TYPES
    err = error("recall", "vault", "--limit", "many")  # argparse's refusal: the same vocabulary
    assert err["type"] == "invalid_input" and err["field"] == "--limit"


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_delta_whose_every_item_was_dropped_is_not_ok(wm: WorldModel) -> None:
    report = wm.apply_delta("t1", "Kitchen", ALL_DROPPED)
    assert report.ok is False and report.dropped and "every item of the delta was dropped" in (report.error or "")
    assert report.graph_version is None and report.skipped
    fine = wm.apply_delta("t1", "Kitchen", {**ALL_DROPPED, "entities": [{"ref": "k", "type": "item",
                                                                          "name": "key"}]})
    assert fine.ok and fine.dropped, "some items merged: ok, with the dropped ones listed"
    assert wm.apply_delta("t1", "Kitchen", {"entities": [], "states": [], "edges": [], "rules": []}).ok
    client, auth = _rest(wm)
    with client:
        r = client.post("/v1/envs/Kitchen/deltas", headers=auth, json=ALL_DROPPED)
    assert r.status_code == 200 and r.json()["ok"] is False and r.json()["error"]
    (answer,) = _mcp(wm, [("apply_delta", {"env_name": "Kitchen", "delta": ALL_DROPPED})])
    assert not answer.is_error and answer.structured_content["ok"] is False
