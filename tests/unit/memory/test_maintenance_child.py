"""The maintenance child (memory/index/worker.py) says where a failed run failed, in the one line
the parent logs (its traceback stays in the child's stderr, which the parent reads only when the
child dies); and it imports the parent's worldgraph, wherever it is started from."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import worldgraph
from worldgraph.config import PACKAGE_PARENT, child_environment, module_command
from worldgraph.memory.index import maintenance
from worldgraph.memory.index import worker as worker_module
from worldgraph.memory.index.episode_index import EpisodeIndex


def _failing_step() -> None:
    os.lstat("/nonexistent/lancedb/ep-bench.lance/data/.tmpAbC123")


def test_a_failed_run_says_where_it_failed() -> None:
    def run(tasks: list[list[str]]) -> None:
        _failing_step()

    r, w = os.pipe()
    os.write(w, b'[["optimize", "ep-bench"]]\n')
    os.close(w)
    out = io.StringIO()
    with os.fdopen(r) as stdin:
        assert worker_module.serve(run, stdin=stdin, stdout=out, idle=5) == 0
    reply = json.loads(out.getvalue())
    assert reply["ok"] is False
    error = reply["error"]
    assert error.startswith("FileNotFoundError: [Errno 2] No such file or directory: "), error
    # innermost first: the call that raised, then who called it
    assert error.endswith(f"(at {Path(__file__).name}:{_failing_step.__code__.co_firstlineno + 1} _failing_step"
                          f" < {Path(__file__).name}:{run.__code__.co_firstlineno + 1} run"
                          f" < worker.py:{_serve_line()} serve)"), error


def _serve_line() -> int:
    src = Path(worker_module.__file__).read_text().splitlines()
    return next(i for i, line in enumerate(src, 1) if '"steps": run(json.loads(line))' in line)


def test_the_child_imports_the_parents_worldgraph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The child is ``python -m worldgraph...``, started with the folder holding the parent's
    worldgraph first on PYTHONPATH: from another folder, and with the package's own folder never
    on the path (its subpackages would shadow top-level modules named ``schema``, ``config``, ...)."""
    started: list[tuple[list[str], dict[str, str]]] = []

    class Recorder:
        def __init__(self, cmd: list[str], env: dict[str, str]) -> None:
            started.append((cmd, env))

        def run(self, tasks: Any) -> list[dict[str, Any]]:
            return []

        def close(self, *args: Any, **kwargs: Any) -> None:
            pass

    monkeypatch.setattr(maintenance, "MaintenanceWorker", Recorder)
    idx = EpisodeIndex(str(tmp_path / "idx"), 8, "test-8")
    try:
        idx._run_maintenance_process([("optimize", "ep-x")])  # noqa: SLF001 - the command it would start
    finally:
        idx.close()
    (cmd, env), = started
    assert cmd[:3] == module_command("worldgraph.memory.index.episode_index")
    first = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    assert (first / "worldgraph" / "__init__.py").resolve() == Path(worldgraph.__file__).resolve()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shown = subprocess.run([sys.executable, "-c", "import sys, worldgraph; print(worldgraph.__file__); "
                            "print(any(p.rstrip('/').endswith('/worldgraph') for p in sys.path))"],
                           env=env, cwd=elsewhere, capture_output=True, text=True, timeout=60, check=True)
    imported, package_dir_on_path = shown.stdout.split()
    assert Path(imported).resolve() == Path(worldgraph.__file__).resolve()
    assert package_dir_on_path == "False"


def test_a_child_started_in_another_checkouts_folder_imports_the_parents(tmp_path: Path) -> None:
    """``python -m`` puts the working directory first on sys.path: started in a folder holding
    another worldgraph package (a second checkout, an A/B of two trees), the child ran that one's
    code. ``module_command`` drops the working directory, so PYTHONPATH's first entry wins."""
    other = tmp_path / "checkout" / "worldgraph"
    other.mkdir(parents=True)
    (other / "__init__.py").write_text("raise SystemExit('the other checkout was imported')\n")
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "probe.py").write_text("import sys, worldgraph\nprint(worldgraph.__file__)\nprint(sys.argv[1:])\n")
    env = child_environment(pythonpath_first=PACKAGE_PARENT)
    env["PYTHONPATH"] += os.pathsep + str(probes)

    def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cmd, env=env, cwd=other.parent, capture_output=True, text=True, timeout=60)

    assert "the other checkout was imported" in run([sys.executable, "-m", "probe"]).stderr  # the hazard
    done = run(module_command("probe", "a", "b c"))
    assert done.returncode == 0, done.stderr
    imported, args = done.stdout.splitlines()
    assert Path(imported).resolve() == Path(worldgraph.__file__).resolve()
    assert args == "['a', 'b c']"  # the module's arguments, as python -m passes them
