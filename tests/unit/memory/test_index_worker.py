"""The kept maintenance child (memory/index/worker.py): one child for many runs, a new one after
it died or went idle, its errors reported, and the index's maintenance going through it."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig, child_environment
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.worker import MaintenanceWorker

# a child that serves with a fake run: it fails on the task "boom", records the others in a file
CHILD = """
import json, sys
from worldgraph.memory.index.worker import serve
log, idle = sys.argv[1], float(sys.argv[2])
def run(tasks):
    if tasks and tasks[0][0] == "boom":
        raise ValueError("the task went boom")
    with open(log, "a") as fh:
        fh.write(json.dumps(tasks) + "\\n")
raise SystemExit(serve(run, idle=idle))
"""


def worker(tmp_path: Path, idle: float = 30.0) -> MaintenanceWorker:
    pkg_root = str(Path(__file__).resolve().parents[3])
    return MaintenanceWorker([sys.executable, "-c", CHILD, str(tmp_path / "runs.jsonl"), str(idle)],
                             child_environment(pythonpath_first=pkg_root))


def test_one_child_serves_many_runs_and_reports_errors(tmp_path: Path) -> None:
    w = worker(tmp_path)
    try:
        w.run([("optimize", "ep-a")])
        w.run([("ann", "ep-a"), ("optimize", "ep-b")])
        with pytest.raises(RuntimeError, match="the task went boom"):
            w.run([("boom", "ep-a")])
        w.run([("optimize", "ep-c")])  # a failed task does not end the child
        assert w.started == 1
        runs = (tmp_path / "runs.jsonl").read_text().splitlines()
        assert runs == ['[["optimize", "ep-a"]]', '[["ann", "ep-a"], ["optimize", "ep-b"]]', '[["optimize", "ep-c"]]']
    finally:
        w.close()


def test_a_killed_or_idle_child_is_replaced(tmp_path: Path) -> None:
    w = worker(tmp_path, idle=0.5)
    try:
        w.run([("optimize", "ep-a")])
        pid = w._proc.pid if w._proc is not None else None  # noqa: SLF001 - the child to kill
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        w.run([("optimize", "ep-b")])  # sent again to a new child
        assert w.started == 2
        time.sleep(1.5)  # the child's idle time passes: it exits by itself
        w.run([("optimize", "ep-c")])
        assert w.started == 3
        assert len((tmp_path / "runs.jsonl").read_text().splitlines()) == 3
    finally:
        w.close()
    assert w._proc is None  # noqa: SLF001


def test_index_maintenance_runs_in_one_kept_child(tmp_path: Path) -> None:
    cfg = WorldGraphConfig(ann_index_min_rows=100_000, optimize_every_rows=50)
    idx = EpisodeIndex(str(tmp_path / "idx"), 8, "test-8", cfg)
    rng = np.random.default_rng(0)
    try:
        for batch in range(3):
            rows = [{"episode_id": f"e{batch}-{i}", "tenant_id": "acme", "agent_id": "a", "text": f"row {i}",
                     "vector": rng.standard_normal(8).tolist(), "timestamp": 1.7e9 + i} for i in range(60)]
            idx.upsert(rows)
            assert idx.wait_for_maintenance(timeout=120)
        runs = idx.maintenance_runs
        assert len(runs) >= 2 and all(r["ok"] for r in runs), runs
        # each run brings back its steps, timed in the child (bench/record_speed.py sums them)
        steps = [step for r in runs for step in r["steps"]]
        assert {"open", "fold", "cleanup old versions"} <= {s["step"] for s in steps}
        assert all(s["s"] >= 0 and s["cpu_s"] >= 0 for s in steps), steps
        kept = idx._maint_worker  # noqa: SLF001
        assert kept is not None and kept.started == 1  # no child started per run
        assert idx.count("acme") == 180
    finally:
        idx.close()
    assert idx._maint_worker is not None and idx._maint_worker._proc is None  # noqa: SLF001 - closed


def test_the_childs_command_line_holds_no_secret(tmp_path: Path) -> None:
    """Every user of the machine can read a process's command line (/proc/PID/cmdline): the
    config the maintenance child gets there leaves the Neo4j password out, and keeps the rest."""
    secret = "n30-pa55word-not-for-ps"
    cfg = WorldGraphConfig(ann_index_min_rows=100_000, optimize_every_rows=50, neo4j_password=secret)
    with idle_child(tmp_path / "idx", cfg) as (_, pid):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
        assert '"optimize_every_rows":50' in cmdline  # the child's config is this one ...
        assert secret not in cmdline  # ... but for its secrets


@contextmanager
def idle_child(path: Path, cfg: WorldGraphConfig) -> Iterator[tuple[EpisodeIndex, int]]:
    """An index at ``path`` whose 60 rows made it start its kept maintenance child, the run done:
    (the index, the idle child's pid); the index is closed after."""
    idx = EpisodeIndex(str(path), 8, "test-8", cfg)
    rng = np.random.default_rng(0)
    try:
        rows = [{"episode_id": f"e{i}", "tenant_id": "acme", "agent_id": "a", "text": f"row {i}",
                 "vector": rng.standard_normal(8).tolist(), "timestamp": 1.7e9 + i} for i in range(60)]
        idx.upsert(rows)
        assert idx.wait_for_maintenance(timeout=120)
        proc = idx._maint_worker._proc  # noqa: SLF001 - the kept child, idle now
        assert proc is not None and proc.poll() is None
        yield idx, proc.pid
    finally:
        idx.close()


def test_a_long_lived_index_keeps_the_steps_of_its_last_runs_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Maintenance runs every few seconds in a long-lived process: their timed steps are kept for the
    last KEEP_STEPS runs (older runs keep tasks, ok and seconds), not forever."""
    from worldgraph.memory.index import maintenance

    monkeypatch.setattr(maintenance, "KEEP_STEPS", 3)
    idx = EpisodeIndex(str(tmp_path / "idx"), 8, "test-8", WorldGraphConfig())
    try:
        monkeypatch.setattr(idx, "_run_maintenance_process",
                            lambda tasks: [{"table": "ep-x", "step": "fold", "s": 0.1, "cpu_s": 0.1}])
        for _ in range(5):
            idx._run_pending([("optimize", "ep-nobody")])  # noqa: SLF001 - a run, without a child
        runs = idx.maintenance_runs
        assert len(runs) == 5 and all(r["ok"] for r in runs)
        assert ["steps" in r for r in runs] == [False, False, True, True, True]
    finally:
        idx.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_child_runs_with_few_malloc_arenas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kept child gets MALLOC_ARENA_MAX from the config (docs/architecture.md, "Memory of a
    process"); 0 leaves glibc's default, and a value the parent's environment sets is kept."""
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    for arenas, want in ((3, "3"), (0, None)):
        cfg = WorldGraphConfig(ann_index_min_rows=100_000, optimize_every_rows=50, maintenance_malloc_arena_max=arenas)
        with idle_child(tmp_path / f"idx{arenas}", cfg) as (idx, pid):
            assert all(r["ok"] for r in idx.maintenance_runs) and idx.maintenance_runs
            environ = dict(v.split("=", 1) for v in Path(f"/proc/{pid}/environ").read_bytes().decode()
                           .split("\0") if "=" in v)
            assert environ.get("MALLOC_ARENA_MAX") == want
    from worldgraph.memory.index.worker import child_env

    assert child_env({"MALLOC_ARENA_MAX": "4"}, 2)["MALLOC_ARENA_MAX"] == "4"


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no process priorities here")
def test_the_child_runs_at_a_lower_cpu_priority(tmp_path: Path) -> None:
    """The kept child's nice value is its parent's plus ``maintenance_nice`` (at most 19): its
    builds and compactions take only the CPU the parent's reads and writes leave; 0 keeps the parent's."""
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    for lower in (7, 0):
        cfg = WorldGraphConfig(ann_index_min_rows=100_000, optimize_every_rows=50, maintenance_nice=lower)
        with idle_child(tmp_path / f"idx{lower}", cfg) as (idx, pid):
            assert idx.maintenance_runs and all(r["ok"] for r in idx.maintenance_runs)
            assert os.getpriority(os.PRIO_PROCESS, pid) == min(19, mine + lower)
    assert os.getpriority(os.PRIO_PROCESS, 0) == mine  # the parent's own priority is left as it was


def test_the_child_gives_freed_memory_back_after_each_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """After each run, failed or not, the child calls malloc_trim before it waits for the next."""
    import io
    import json

    from worldgraph.memory.index import worker as worker_module

    trims: list[int] = []
    monkeypatch.setattr(worker_module, "release_memory", lambda: trims.append(1) or True)

    def run(tasks: list[list[str]]) -> None:
        if tasks[0][0] == "boom":
            raise ValueError("boom")

    r, w = os.pipe()
    os.write(w, b'[["optimize", "a"]]\n[["boom", "a"]]\n')
    os.close(w)
    out = io.StringIO()
    with os.fdopen(r) as stdin:
        assert worker_module.serve(run, stdin=stdin, stdout=out, idle=5) == 0
    assert [json.loads(x)["ok"] for x in out.getvalue().splitlines()] == [True, False]
    assert len(trims) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc")
def test_release_memory_calls_glibc() -> None:
    from worldgraph.memory.index.worker import release_memory

    assert release_memory() is True
