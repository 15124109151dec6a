"""The local Neo4j launcher's state folder belongs to a data folder or checkout, not to the user:
`worldgraph --data B neo4j stop` never stops the server of data folder A (or of another checkout)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from worldgraph import neo4j_local
from worldgraph.cli.main import main
from worldgraph.neo4j_local.process import STATE_FILE, pid_alive

ROOT = Path(__file__).resolve().parents[3]


def test_default_state_folder_is_the_checkouts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("WORLDGRAPH_NEO4J_HOME", raising=False)
    assert neo4j_local.state_dir() == ROOT / ".neo4j-local"
    monkeypatch.setenv("WORLDGRAPH_NEO4J_HOME", str(tmp_path / "mine"))
    assert neo4j_local.state_dir() == tmp_path / "mine"
    assert neo4j_local.state_dir(tmp_path / "explicit") == tmp_path / "explicit"


def _status(data: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["--data", str(data), "neo4j", "status", "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_neo4j_commands_act_on_their_data_folders_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("WORLDGRAPH_NEO4J_HOME", raising=False)
    a, b = tmp_path / "a", tmp_path / "b"
    # a stand-in for A's server: a live process whose command line names neo4j-local, as the JVM's does
    fake = subprocess.Popen(["bash", "-c", "exec -a neo4j-local-standin sleep 300"])
    try:
        home = a / "neo4j-local"
        home.mkdir(parents=True)
        (home / STATE_FILE).write_text(json.dumps({"pid": fake.pid, "port": 1, "uri": "bolt://127.0.0.1:1",
                                                   "data_dir": str(home / "data"), "log": str(home / "x.log")}))
        time.sleep(0.2)
        assert _status(a, capsys)["running"] is True
        assert _status(b, capsys)["running"] is False and _status(b, capsys)["home"] == str(b / "neo4j-local")
        assert main(["--data", str(b), "neo4j", "stop", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["stopped"] is False
        assert pid_alive(fake.pid), "stopping data folder B's server stopped A's"
        monkeypatch.setenv("WORLDGRAPH_NEO4J_HOME", str(home))  # the env var still picks a state folder
        assert _status(b, capsys)["running"] is True
        monkeypatch.delenv("WORLDGRAPH_NEO4J_HOME")
        assert main(["--data", str(a), "neo4j", "stop", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["stopped"] is True
        fake.wait(timeout=10)
    finally:
        fake.kill()
        fake.wait()
