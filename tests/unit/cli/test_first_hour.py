"""What a new user meets in the first hour on the command line: the demo's suggestions paste as
they are printed, a pending scene packet says why it waits (naming the LLM by its host, never the
credentials its address carries), ``demo --offline`` merges the shipped deltas even with an LLM
configured, and the demo's help names its own folder."""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path

import pytest

from worldgraph.cli.demo import DEMO_CYPHER, try_lines
from worldgraph.cli.main import main
from worldgraph.world.extractor import url_host

ROOT = Path(__file__).resolve().parents[3]
LOG = ROOT / "examples" / "text_adventure.jsonl"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_try_lines_split_back_into_the_intended_arguments() -> None:
    for data in ("./worldgraph-demo", "/tmp/a folder/with 'quotes'"):
        lines = try_lines(data, "acme")
        cypher = shlex.split(lines[2])  # what a POSIX shell hands the program, $tenant_id unexpanded
        assert cypher[:5] == ["worldgraph", "--data", data, "--tenant", "acme"]
        assert cypher[5:] == ["cypher", DEMO_CYPHER, "--param", "env=CottageEscape"]
        assert "$tenant_id" in lines[2] and f"'{DEMO_CYPHER}'" in lines[2]


def test_url_host_never_shows_credentials_or_paths() -> None:
    assert url_host("http://user:secret@127.0.0.1:11434/v1") == "http://127.0.0.1:11434"
    assert url_host("https://api.example.com/v1?token=abc") == "https://api.example.com"
    assert url_host("http://[::1]:8000/v1") == "http://[::1]:8000"
    assert url_host("http://host:notaport/v1") == "(an unreadable address)"


@pytest.fixture
def unreachable_llm(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-a-real-key")
    port = closed_port()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://alice:hunter2@127.0.0.1:{port}/v1")
    monkeypatch.setenv("WORLDGRAPH_LLM_TIMEOUT_SECONDS", "2")
    return f"http://127.0.0.1:{port}"


def test_run_with_an_unreachable_llm_says_why_packets_wait(unreachable_llm: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert main(["--data", data, "run", str(LOG), "--env", "CottageEscape"]) == 0
    out, err = capsys.readouterr()
    assert "0 merged, 10 pending" in out
    assert f"10 x cannot reach the LLM server at {unreachable_llm}" in out
    assert "hunter2" not in out + err and "alice" not in out + err
    assert main(["--data", data, "stats", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["world_pending_reason"].startswith(f"cannot reach the LLM server at {unreachable_llm}")
    assert "hunter2" not in json.dumps(stats)


def test_run_without_an_llm_says_how_to_configure_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    data = str(tmp_path / "data")
    # without an LLM, rounds with a shipped delta merge it; strip the deltas so packets wait
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "delta"}) + "\n"
                           for line in LOG.read_text().splitlines() if line.strip()))
    assert main(["--data", data, "run", str(log), "--env", "CottageEscape"]) == 0
    out = capsys.readouterr().out
    assert "10 x no LLM is configured: set OPENAI_API_KEY" in out


def test_demo_offline_merges_the_shipped_deltas_with_a_key_set(unreachable_llm: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--data", str(tmp_path / "demo"), "--offline"]) == 0
    out = capsys.readouterr().out
    assert "(offline: merging the deltas a model returned for it)" in out
    assert "10 merged, 0 pending" in out


def test_demo_help_names_its_own_folder(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the demo's folder (default ./worldgraph-demo" in out and "--offline" in out
    assert "default ./data" not in out


def test_quickstart_shows_the_new_containment_closing_the_old(tmp_path: Path) -> None:
    """examples/quickstart.py says the key's new container closes the old one: its output shows it."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "WORLDGRAPH_EMBEDDING_PROVIDER": "hashing"}
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "quickstart.py")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "  player contains brass key (current)" in out.stdout
    assert "  kitchen table contains brass key (closed " in out.stdout


def test_episodes_list_limit_zero_is_refused_and_forget_takes_yes_everywhere(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = str(tmp_path / "data")
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps({"agent_id": "a", "agent_role": "r", "task_type": "x",
                                        "task_description": f"run {i}", "outcome": "success"}) + "\n"
                            for i in range(3)))
    assert main(["--data", data, "record", str(runs)]) == 0
    capsys.readouterr()
    assert main(["--data", data, "episodes", "list", "--limit", "0", "--json"]) == 1
    err = json.loads(capsys.readouterr().err)["error"]
    assert err["type"] == "invalid_input" and err["field"] == "limit"
    assert main(["--data", data, "episodes", "list", "--limit", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)["episodes"]
    assert len(first) == 1
    assert main(["--data", data, "forget", "episode", first[0]["id"], "--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"]["episodes"] == 1
    assert main(["--data", data, "forget", "env", "Nowhere", "--yes"]) == 1  # --yes accepted; the env is unknown
    assert "environment 'Nowhere' not found" in capsys.readouterr().err
    assert main(["--data", data, "forget", "tenant", "--yes", "--json"]) == 0
