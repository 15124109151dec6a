"""The `worldgraph` command as a new user meets it: short ids, options after the command,
--version, the sample file's ratings and ages, readable context text, quiet libraries."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from worldgraph.cli.main import main

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = ROOT / "examples" / "experiences.jsonl"


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("WORLDGRAPH_EMBEDDING_PROVIDER", "hashing")
    data = tmp_path / "data"

    def run(*args: str, ok: bool = True, data_first: bool = True) -> tuple[str, str]:
        where = ["--data", str(data)]
        code = main([*where, *args] if data_first else [*args, *where])
        out, err = capsys.readouterr()
        assert (code == 0) == ok, (out, err)
        return out, err

    return run


def test_short_ids_are_accepted_and_ambiguous_ones_named(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    items = [{"agent_id": "a", "task_type": "t", "task_description": f"task {i}", "outcome": "success",
              "episode_id": eid} for i, eid in enumerate(["1234abcd-0000", "1234abce-0000", "99990000-1111"])]
    f = tmp_path / "e.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in items))
    cli("record", str(f))
    out, _ = cli("feedback", "9999", "0.5", "--json")
    assert json.loads(out)["episode_id"] == "99990000-1111"
    _, err = cli("feedback", "1234ab", "0.5", ok=False)
    assert "several episode ids" in err and "1234abcd-0000" in err and "1234abce-0000" in err
    _, err = cli("feedback", "77777777", "0.5", ok=False)
    assert "77777777" in err and "not found" in err
    out, _ = cli("stats", "--json", "--tenant", "nobody")  # another tenant's prefix does not resolve
    _, err = cli("--tenant", "nobody", "feedback", "9999", "0.5", ok=False)
    assert "not found" in err


def test_global_options_after_the_command_and_version(cli, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    cli("record", str(SAMPLES), "--tenant", "acme", data_first=False)
    out, _ = cli("stats", "--json", "--tenant", "acme", data_first=False)
    assert json.loads(out)["episodes"] == sum(1 for line in SAMPLES.read_text().splitlines() if line.strip())
    out, _ = cli("--tenant", "acme", "stats", "--json")  # before the command too
    assert json.loads(out)["episodes"] > 0
    out, _ = cli("--tenant", "acme", "stats", "--tenant", "zzz", "--json")  # the later one wins
    assert json.loads(out)["episodes"] == 0
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.startswith("worldgraph ")


def test_record_honours_feedback_and_days_ago_of_the_sample_format(cli) -> None:  # type: ignore[no-untyped-def]
    samples = [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]
    out, _ = cli("record", str(SAMPLES), "--json")
    recorded = json.loads(out)
    assert recorded["ratings"] == sum(len(s.get("feedback") or []) for s in samples) > 0
    out, _ = cli("stats", "--json")
    assert json.loads(out)["feedback"] == recorded["ratings"]
    first = samples[0]
    out, _ = cli("episodes", first["experience"]["agent_id"], "--limit", "100", "--json")
    by_id = {e["id"]: e for e in json.loads(out)}
    ep = by_id[recorded["episode_ids"][0]]
    age_days = (datetime.now(timezone.utc) - datetime.fromisoformat(ep["timestamp"])).total_seconds() / 86400
    assert age_days == pytest.approx(float(first["days_ago"]), abs=0.05)


def test_neighborhood_and_canvas_context_print_text(cli) -> None:  # type: ignore[no-untyped-def]
    cli("record", str(SAMPLES))
    cli("run", str(ROOT / "examples" / "text_adventure.jsonl"), "--env", "CottageEscape")
    out, _ = cli("recall", "Create a data visualization on canvas-123", "--role", "Developer", "--canvas-context",
                 "--min-similarity", "0", "--limit", "2")
    assert "canvas: " in out and "canvas-123" in out and "action create_chart" in out
    out, _ = cli("recall", "open the front door", "--neighborhood", "--min-similarity", "0", "--limit", "3")
    assert "scene " in out and "rule: IF " in out and "world nodes: " in out
    out, _ = cli("recall", "month-end close", "--role", "Finance", "--neighborhood", "--min-similarity", "0")
    assert "feedback +" in out or "feedback -" in out


# a command whose libraries warn, as LanceDB's deprecation warnings did on every recall
NOISY = ("import logging, sys, warnings\n"
         "import worldgraph.cli.memory as m\n"
         "def noisy(args):\n"
         "    warnings.warn('old_api is deprecated', DeprecationWarning)\n"
         "    logging.getLogger('lancedb').warning('lancedb says hello')\n"
         "    print('ok')\n"
         "    return 0\n"
         "m.cmd_stats = noisy\n"
         "from worldgraph.cli.main import main\n"
         "sys.exit(main(sys.argv[1:]))\n")


def test_third_party_warnings_only_with_verbose(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    quiet = subprocess.run([sys.executable, "-c", NOISY, "--data", str(data), "stats"], capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stdout == "ok\n" and quiet.stderr == ""
    loud = subprocess.run([sys.executable, "-c", NOISY, "--data", str(data), "stats", "-v"], capture_output=True,
                          text=True)
    assert "old_api is deprecated" in loud.stderr and "lancedb says hello" in loud.stderr
