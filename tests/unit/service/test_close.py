"""WorldModel.close ends the episode index's background work: after it returns, no thread or child
process of the model writes into the data folder (a caller may delete it, copy it, or open it
from another process), and ``close(timeout)`` (``worldgraph serve`` on SIGTERM) stays bounded
even when a maintenance run would take longer."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from worldgraph import WorldModel
from worldgraph.config import child_environment
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.index.schema import table_name
from worldgraph.memory.index.worker import MaintenanceWorker

T = "acme"
INDEX_THREADS = ("worldgraph-index-maintenance", "worldgraph-index-mirror", "worldgraph-index-lists")


def _episodes(batch: int, n: int) -> list[dict[str, object]]:
    return [{"agent_id": "clerk", "agent_role": "finance", "task_type": "reconcile",
             "task_description": f"reconcile ledger {batch}-{i} against the bank feed", "outcome": "success",
             "confidence": 0.8} for i in range(n)]


def _children() -> list[int]:
    """This process's children that are maintenance children of an episode index."""
    me, out = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == me and b"episode_index" in cmdline and " Z " not in stat[stat.rfind(")"):][:4]:
            out.append(int(entry.name))
    return out


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_nothing_of_the_model_writes_into_the_folder_after_close(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # a fold every 50 rows, the mirror from 100 rows: recording starts the maintenance child
    wm = WorldModel.open(data, embedder=HashingEmbedder(384), optimize_every_rows=50, mirror_min_rows=100)
    for batch in range(4):
        wm.record_experiences(T, _episodes(batch, 60))
    assert wm.recall_experiences(T, "finance", "reconcile ledger 2-7", options={"min_similarity": 0.0})
    assert wm.index.maintenance_runs or _children() or wm.index._maint_thread is not None  # noqa: SLF001
    wm.close()
    assert _children() == [], "the maintenance child outlived close()"
    alive = [t.name for t in threading.enumerate() if t.name in INDEX_THREADS]
    assert alive == [], f"index threads outlived close(): {alive}"
    before = _tree(data)
    time.sleep(3.0)
    assert _tree(data) == before, "files of the data folder changed after close()"
    # and the folder opens again with every episode
    with WorldModel.open(data, embedder=HashingEmbedder(384), read_only=True) as again:
        assert again.index.count(T) == 240


# a maintenance child whose run takes two minutes (it says when it starts)
SLOW_CHILD = """
import sys, time
from pathlib import Path
from worldgraph.memory.index.worker import serve
def run(tasks):
    Path(sys.argv[1]).write_text("started")
    time.sleep(120)
raise SystemExit(serve(run))
"""


def test_close_with_a_timeout_ends_a_long_maintenance_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    wm = WorldModel.open(data, embedder=HashingEmbedder(384))
    wm.record_experiences(T, _episodes(0, 10))
    marker = tmp_path / "started"
    pkg_root = str(Path(__file__).resolve().parents[3])
    slow = MaintenanceWorker([sys.executable, "-c", SLOW_CHILD, str(marker)], child_environment(pythonpath_first=pkg_root))
    wm.index._maint_worker = slow  # noqa: SLF001 - the child (a process edge) made slow
    wm.index._start_maintenance("optimize", table_name(T))  # noqa: SLF001
    waited = time.monotonic()
    while not marker.exists():
        assert time.monotonic() - waited < 60, "the slow child never started its run"
        time.sleep(0.05)
    pid = slow._proc.pid if slow._proc is not None else None  # noqa: SLF001
    assert pid is not None
    try:
        started = time.monotonic()
        wm.close(timeout=2.0)
        took = time.monotonic() - started
        assert took < 10.0, f"close(timeout=2) took {took:.1f} s"
        assert _children() == [], "the maintenance child outlived close(timeout)"
        assert not Path(f"/proc/{pid}").exists(), "the child was not reaped"
        assert slow.started == 1  # and no other child was started after it was killed
    finally:
        if slow._proc is not None and slow._proc.poll() is None:  # noqa: SLF001 - no child left behind
            slow._proc.kill()  # noqa: SLF001
            slow._proc.wait()  # noqa: SLF001
