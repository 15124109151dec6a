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


def test_a_long_wal_is_copied_at_each_commit_and_restarted(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """checkpointer.py: short WALs wait the interval (the commits of an interval share a checkpoint);
    once the WAL holds ``EAGER_LOG_FRAMES`` pages, each commit's pages are copied at once, so the
    next commit restarts the WAL and the writer's own checkpoint is not reached."""
    import os
    import sqlite3
    import time

    from worldgraph.kg.embedded import checkpointer as ck

    monkeypatch.setattr(ck, "INTERVAL_SECONDS", 60.0)  # a wait would outlast the test
    path = tmp_path / "w.db"
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")  # the writer never copies: only the checkpointer does
    conn.execute("CREATE TABLE t (b BLOB)")
    bg = ck.Checkpointer(path)

    def commit_and_wait(pages: int, wait: float = 5.0) -> None:
        runs = bg.runs
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t VALUES (?)", [(os.urandom(3000),) for _ in range(pages)])
        conn.execute("COMMIT")
        bg.kick()
        deadline = time.monotonic() + wait
        while bg.runs == runs and time.monotonic() < deadline:
            time.sleep(0.01)

    def wal_frames() -> int:  # the WAL file's length in frames (a header, then a 24-byte header a page)
        return (os.path.getsize(f"{path}-wal") - 32) // (4096 + 24)

    try:
        commit_and_wait(2)
        assert bg.runs == 1  # the first kick runs at once
        commit_and_wait(2, wait=1.0)
        assert bg.runs == 1  # a short WAL: this commit waits for the interval's checkpoint
        bg.close()  # ends that wait
        bg = ck.Checkpointer(path)
        for _ in range(6):  # ~1,250 pages a commit: each is copied at once
            commit_and_wait(ck.EAGER_LOG_FRAMES + 200)
        assert bg.runs == 6
        # each commit after the first found the WAL copied and restarted it: the file holds about
        # two commits' pages, not six
        assert wal_frames() < 3 * (ck.EAGER_LOG_FRAMES + 300), wal_frames()
    finally:
        bg.close()
        conn.close()
