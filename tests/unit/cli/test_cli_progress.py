"""The CLI on long work and as a user types it: progress on stderr (a redrawn bar on a terminal,
plain lines in a log), one-line summaries (ids under --json), the export/import round trip with
the folder given to export, help text on every option, key-id prefixes; and over REST, feedback
authored by the key's name and addressed by an id prefix."""

from __future__ import annotations

import argparse
import json
import os
import pty
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from worldgraph import WorldModel
from worldgraph.cli.main import build_parser, main
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys

ROOT = Path(__file__).resolve().parents[3]
TURNS = [{"speaker": "Ann" if i % 2 else "Bob", "text": f"turn {i} about the glacier lake",
          "timestamp": f"2026-01-01T10:{i // 60:02d}:{i % 60:02d}Z"} for i in range(120)]


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = tmp_path / "data"

    def run(*args: str, ok: bool = True) -> tuple[str, str]:
        code = main(["--data", str(data), "--tenant", "acme", *args])
        out, err = capsys.readouterr()
        assert (code == 0) == ok, (out, err)
        return out, err

    return run


def _run_cli(args: list[str], tty: bool, tmp_path: Path) -> tuple[int, str, str]:
    """The CLI in a child process, its stderr a pseudo-terminal (``tty``) or a pipe."""
    env = {**os.environ, "WORLDGRAPH_EMBEDDING_PROVIDER": "hashing", "PYTHONPATH": str(ROOT),
           "COLUMNS": "100"}
    cmd = [sys.executable, "-m", "worldgraph.cli", *args]
    if not tty:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
        return proc.returncode, proc.stdout, proc.stderr
    leader, follower = pty.openpty()
    try:
        proc2 = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=follower, text=True)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        out = proc2.stdout.read() if proc2.stdout else ""
        code = proc2.wait(timeout=240)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    return code, out, b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.parametrize("tty", [True, False], ids=["pty", "pipe"])
def test_record_conversation_and_reindex_show_progress(tmp_path: Path, tty: bool) -> None:
    sessions = tmp_path / "sessions.jsonl"
    sessions.write_text("\n".join(json.dumps({"session_id": f"s{i}", "turns": TURNS}) for i in range(3)) + "\n")
    data = str(tmp_path / "data")
    code, out, err = _run_cli(["--data", data, "record-conversation", str(sessions)], tty, tmp_path)
    assert code == 0, err
    # a one-line summary, not 360 ids
    assert out.strip().splitlines() == ["recorded 360 turn(s) of 3 session(s) for tenant 'default' "
                                        "(`--json` lists their episode ids)"]
    code, out, err2 = _run_cli(["--data", data, "reindex"], tty, tmp_path)
    assert code == 0 and out.strip() == "indexed 360 episode(s)", err2
    for text, label in ((err, "turns"), (err2, "re-indexing")):
        if tty:  # tqdm's bar, redrawn in place, ending at the total
            assert "\r" in text and "|" in text and "360/360" in text and label in text, text
        else:  # plain lines a log can hold
            assert "\r" not in text and f"{label} 360/360" in text.splitlines(), text
            assert 1 < len(text.splitlines()) <= 12


@pytest.mark.parametrize("tty", [True, False], ids=["pty", "pipe"])
def test_purge_shows_progress(tmp_path: Path, tty: bool) -> None:
    """Forgetting two tenants' episodes (without purging), then `purge`: one index table each."""
    data = str(tmp_path / "data")
    for tenant in ("acme", "globex"):
        conv = tmp_path / f"{tenant}.jsonl"
        conv.write_text(json.dumps({"session_id": "s", "turns": TURNS[:5]}) + "\n")
        code, _, err = _run_cli(["--data", data, "--tenant", tenant, "--json", "record-conversation", str(conv)],
                                False, tmp_path)
        assert code == 0, err
        code, out, err = _run_cli(["--data", data, "--tenant", tenant, "--json", "episodes", "list", "--limit", "1"],
                                  False, tmp_path)
        eid = json.loads(out)["episodes"][0]["id"]
        code, _, err = _run_cli(["--data", data, "--tenant", tenant, "forget", "episode", eid, "--no-purge"],
                                False, tmp_path)
        assert code == 0, err
    code, out, err = _run_cli(["--data", data, "purge"], tty, tmp_path)
    assert code == 0, err
    assert "forgets_purged" in out and "purging index tables" in err, err
    if tty:
        assert "\r" in err and "2/2" in err, err
    else:
        assert "\r" not in err and "purging index tables 2/2" in err.splitlines(), err


def test_json_lists_the_ids(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    f = tmp_path / "t.json"
    f.write_text(json.dumps(TURNS[:4]))
    out, err = cli("record-conversation", str(f), "--session", "s1", "--json")
    assert len(json.loads(out)["episode_ids"]) == 4 and err == ""  # no progress under --json


def test_export_then_import_the_folder_given_to_export(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    delta = tmp_path / "d.json"
    delta.write_text(json.dumps({"entities": [{"name": "brass key", "type": "item"}, {"name": "hall", "type": "room"}],
                                 "states": [], "rules": [],
                                 "edges": [{"relation": "containment", "src_ref": "room:hall",
                                            "dst_ref": "item:brass key"}]}))
    cli("delta", "apply", "--env", "Cottage", str(delta))
    out_dir = tmp_path / "snap"
    out, _ = cli("export", "--env", "Cottage", "--out", str(out_dir))
    assert out.startswith("exported Cottage of tenant 'acme' to ") and str(out_dir) in out
    out, _ = cli("import", str(out_dir))  # what the user typed for export
    assert out.strip() == "imported Cottage into tenant 'acme': 2 nodes, 1 edges, 0 rules, 1 scenes"
    assert "{" not in out
    # a second environment: the folder holds two snapshots, --env picks one, none is an error naming both
    cli("delta", "apply", "--env", "Barn", str(delta))
    cli("export", "--env", "Barn", "--out", str(out_dir))
    _, err = cli("import", str(out_dir), ok=False)
    assert "2 snapshots" in err and "Barn" in err and "Cottage" in err and "--env" in err
    out, _ = cli("import", str(out_dir), "--env", "Barn")
    assert out.startswith("imported Barn")
    _, err = cli("import", str(out_dir), "--env", "Attic", ok=False)
    assert "Attic" in err


def _actions(parser: argparse.ArgumentParser, path: list[str]) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_actions(sub, [*path, name]))
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            found.append((" ".join(path), action))
    return found


def test_every_option_has_help_and_shows_its_default() -> None:
    missing, hidden = [], []
    for where, action in _actions(build_parser(), ["worldgraph"]):
        name = "/".join(action.option_strings) or action.dest
        if not action.help:
            missing.append(f"{where} {name}")
        elif (action.option_strings and action.default not in (None, False, argparse.SUPPRESS)
              and "default" not in action.help):
            hidden.append(f"{where} {name} (default {action.default!r})")
    assert not missing, f"options without help: {missing}"
    assert not hidden, f"defaults the help does not show: {hidden}"


def test_keys_revoke_takes_a_unique_prefix(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out, _ = cli("keys", "create", "--tenant", "acme", "--json")
    key_id = json.loads(out)["id"]
    _, err = cli("keys", "revoke", key_id[:2], ok=False)  # too short
    assert "at least 4" in err
    _, err = cli("keys", "revoke", "ffff" if not key_id.startswith("ffff") else "0000", ok=False)
    assert "no key id starts with it" in err
    out, _ = cli("keys", "revoke", key_id[:6])
    assert f"revoked key {key_id}" in out


@pytest.fixture
def served(tmp_path: Path) -> Any:
    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384))
    try:
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            yield wm, client
    finally:
        wm.close()


def test_rest_feedback_by_prefix_is_authored_by_the_key_name(served: Any) -> None:
    wm, client = served
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    named, _ = ApiKeys(wm.store).create(tenant, "grader-bot")
    unnamed, _ = ApiKeys(wm.store).create(tenant)
    eid = wm.record_experience(tenant, {"agent_id": "a", "task_type": "t", "task_description": "reconcile",
                                        "outcome": "success", "episode_id": "abcd1234-0000"})

    def rate(key: str, episode: str, body: dict[str, Any], status: int = 200) -> Any:
        r = client.post(f"/v1/episodes/{episode}/feedback", json=body, headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == status, r.text
        return r.json()

    assert rate(named, "abcd12", {"score": 0.5})["created_by"] == "grader-bot"
    assert rate(named, eid, {"score": 0.5, "created_by": "alice"})["created_by"] == "alice"
    assert rate(unnamed, eid, {"score": 0.5})["created_by"] == "anonymous"
    assert rate(named, "ab", {"score": 0.5}, 404)["error"]["type"] == "not_found"
    wm.record_experience(tenant, {"agent_id": "a", "task_type": "t", "task_description": "x", "outcome": "success",
                                  "episode_id": "abcd5678-0000"})
    ambiguous = rate(named, "abcd", {"score": 0.5}, 409)["error"]  # 409 ambiguous_id, listing the candidates
    assert ambiguous["type"] == "ambiguous_id" and "abcd1234-0000" in ambiguous["message"]
    other, _ = ApiKeys(wm.store).create(f"t-{uuid.uuid4().hex[:8]}", "x")
    rate(other, "abcd12", {"score": 0.5}, 404)  # another tenant's prefix is not found
