"""Every `worldgraph` error is one line on stderr (a JSON object under --json) with a non-zero exit,
never a traceback: run as a user would, in a subprocess (hashing embedder, no network)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worldgraph.cli.main import main
from worldgraph.errors import ERROR_TYPES

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "WORLDGRAPH_EMBEDDING_PROVIDER": "hashing"}
TYPES = {t for _, _, t in ERROR_TYPES} | {"internal"}  # the REST API's error types


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data folder holding the sample experiences and the CottageEscape world graph."""
    folder = tmp_path_factory.mktemp("cli-errors") / "data"
    mp = pytest.MonkeyPatch()
    mp.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    try:
        assert main(["--data", str(folder), "--json", "record", str(ROOT / "examples" / "experiences.jsonl")]) == 0
        assert main(["--data", str(folder), "--json", "run", str(ROOT / "examples" / "text_adventure.jsonl"),
                     "--env", "CottageEscape"]) == 0
    finally:
        mp.undo()
    return folder


def _cases(data: Path, tmp: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments, text the one error line must contain)."""
    bad_lines = tmp / "bad.jsonl"
    bad_lines.write_text('{"task_description": "ok"}\n{"task_description": broken}\n')
    bad_array = tmp / "bad.json"
    bad_array.write_text('[\n  {"a": 1},\n  {"a": 2,,}\n]\n')
    invalid = tmp / "invalid.jsonl"
    invalid.write_text(json.dumps({"agent_id": "a", "task_type": "t", "outcome": "success"}) + "\n")
    a_file = tmp / "not-a-folder"
    a_file.write_text("x")
    d = ["--data", str(data)]
    return {
        "missing input file": ([*d, "record", str(tmp / "nope.jsonl")], "nope.jsonl does not exist"),
        "input is a folder": ([*d, "record", str(tmp)], "is a folder"),
        "--data is a file": (["--data", str(a_file), "stats"], "is a file, not a data folder"),
        "bad JSON Lines": ([*d, "record", str(bad_lines)], "bad.jsonl:2: not valid JSON"),
        "bad JSON array": ([*d, "delta", "apply", "--env", "E", str(bad_array)], "bad.json:3: not valid JSON"),
        "invalid experience": ([*d, "record", str(invalid)], "task_description"),
        "missing data folder (read)": (["--data", str(tmp / "typo"), "recall", "anything"], "no data folder at"),
        "unknown environment": ([*d, "world", "show", "--env", "Atlantis"], "known environments: CottageEscape"),
        "unknown episode prefix": ([*d, "feedback", "ffffffff", "0.5"], "ffffffff"),
        "missing run log": ([*d, "run", str(tmp / "nope.log"), "--env", "E"], "nope.log does not exist"),
        "missing snapshot": ([*d, "import", str(tmp / "no-snapshot")], "no-snapshot"),
        "cypher write": ([*d, "cypher", "MATCH (n) DETACH DELETE n"], "read-only"),
        "usage: missing argument": ([*d, "record"], "the following arguments are required: file"),
        "usage: bad option value": ([*d, "recall", "q", "--limit", "many"], "invalid int value"),
    }


def _run(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "worldgraph.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)


def test_every_error_is_one_line_without_a_traceback(data: Path, tmp_path: Path) -> None:
    cases = _cases(data, tmp_path)
    # both forms of every case at once (each process pays the import time; in parallel it is paid once)
    procs = {(name, js): _run([*args, *(["--json"] if js else [])])
             for name, (args, _) in cases.items() for js in (False, True)}
    failures = []
    for (name, js), proc in procs.items():
        out, err = proc.communicate(timeout=240)
        expected = cases[name][1]
        lines = err.strip().splitlines()
        problem = None
        if proc.returncode == 0:
            problem = "exit 0"
        elif "Traceback" in err or len(lines) != 1:
            problem = "not one line"
        elif js:
            obj = json.loads(lines[0])["error"]  # the REST API's error body, with its types
            problem = None if expected.lower() in obj["message"].lower() and obj["type"] in TYPES \
                else "JSON lacks the cause"
        else:
            problem = None if lines[0].startswith("error: ") and expected.lower() in lines[0].lower() else "text"
        if problem or out.strip():
            failures.append(f"{name} (json={js}): {problem or 'stdout not empty'}\n  stdout={out!r}\n  stderr={err!r}")
    assert not failures, "\n".join(failures)
    assert not (tmp_path / "typo").exists(), "a read command created the mistyped data folder"
