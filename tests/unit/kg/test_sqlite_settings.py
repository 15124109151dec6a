"""The embedded store's SQLite settings: page cache and WAL checkpoint interval come from the config,
and what a killed process committed (still only in the WAL) is there when the store is opened again."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def test_the_config_sets_the_cache_and_the_checkpoint_interval(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "a", embedder=HashingEmbedder(32), sqlite_cache_mb=8,
                         sqlite_wal_autocheckpoint_pages=100) as wm:
        conn = wm.store.db.conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -8 * 1024
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 100
    with WorldModel.open(tmp_path / "b", embedder=HashingEmbedder(32)) as wm:
        conn = wm.store.db.conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA cache_size").fetchone()[0] == -wm.config.sqlite_cache_mb * 1024
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == wm.config.sqlite_wal_autocheckpoint_pages


def test_a_killed_writer_loses_nothing_it_committed_to_the_wal(tmp_path: Path) -> None:
    """Checkpoints are rare (16,384 pages): a process killed between them leaves its commits in
    the WAL only; the next open reads them."""
    data = tmp_path / "data"
    script = textwrap.dedent(f"""
        import os
        from worldgraph import WorldModel
        from worldgraph.memory.embeddings import HashingEmbedder
        wm = WorldModel.open({str(data)!r}, embedder=HashingEmbedder(32))
        for b in range(5):
            wm.record_experiences("t", [{{"agent_id": "a", "task_type": "k", "task_description": f"run {{b}} {{i}}",
                                        "outcome": "success"}} for i in range(200)])
        wal = os.path.getsize({str(data / "worldgraph.db-wal")!r})
        print(wal, flush=True)
        os._exit(0)  # no close, no checkpoint: as if killed
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert int(out.stdout.split()[-1]) > 0  # the commits were still in the WAL
    with WorldModel.open(data, embedder=HashingEmbedder(32)) as wm:
        assert wm.store.stats("t")["episodes"] == 1000
        assert len(wm.recall_experiences("t", None, "run 3 7", 3)) > 0


def test_the_wal_is_copied_into_the_database_in_the_background(tmp_path: Path) -> None:
    """kg/embedded/checkpointer.py: passive checkpoints on a thread of their own after commits, so
    the writer's own checkpoint (every ``sqlite_wal_autocheckpoint_pages``) finds the pages copied;
    closing stops the thread; what was committed is all there when the file is opened again."""
    import sqlite3
    import time

    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(32)) as wm:
        checkpointer = wm.store.db.checkpointer  # type: ignore[attr-defined]
        for b in range(3):
            wm.record_experiences("t", [{"agent_id": "a", "task_type": "k", "task_description": f"run {b} {i}",
                                         "outcome": "success"} for i in range(100)])
        deadline = time.monotonic() + 10
        while checkpointer.runs == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert checkpointer.runs > 0
        # the writer's own checkpoint is 16,384 pages away: what the database file itself holds
        # (read without the WAL) was copied there by the background thread
        time.sleep(1.0)
        conn = sqlite3.connect(f"file:{data / 'worldgraph.db'}?immutable=1", uri=True)
        in_file = conn.execute("SELECT count(*) FROM episodes WHERE tenant_id = 't'").fetchone()[0]
        conn.close()
        assert in_file == 300
        thread = checkpointer._thread  # noqa: SLF001 - the thread that must end with the store
    assert thread is not None and not thread.is_alive()
    with WorldModel.open(data, embedder=HashingEmbedder(32)) as wm:
        assert wm.store.stats("t")["episodes"] == 300
