"""Copying the WAL into the database beside the writes, not inside them.

With its defaults, the connection that commits the transaction that takes the WAL past
``wal_autocheckpoint`` pages copies every page of the WAL into the database, inside that commit:
while recording 1,000 episodes a call into a 1M-episode store (~16 MB of WAL a call: each episode
is an entry in four B-trees, each at a random place), every fifth call took 0.6-1.7 s instead of
0.1-0.2 s, and the process wrote ~460 MB to the disk meanwhile (`/proc/self/io`).

A ``Checkpointer`` runs passive checkpoints on a connection and a thread of its own, at most every
``INTERVAL_SECONDS`` after a commit asked for one: the copy (and its fsync) then happens while the
writer goes on (SQLite releases the GIL, and a passive checkpoint never blocks a writer nor waits
for one). The writer's own checkpoint at ``wal_autocheckpoint`` pages stays as it was, so the WAL
is still restarted from its beginning and bounded: it finds the pages already copied, and has
only the newest ones left to copy. Durability is the WAL's and does not change: a commit is on
disk when it returns, whether or not its pages were copied yet.

A WAL of ``EAGER_LOG_FRAMES`` pages or more is copied as soon as a commit asks, without the
interval's wait. Waiting, one checkpoint took the pages of two or three 1,000-episode batches
(~4,300 pages each into a 1M store) at a time, no commit restarted the WAL while it copied, and
every fourth or fifth batch reached the writer's own checkpoint, which copied the rest inside the
commit: ~100 ms more of system CPU in that call (bench/README.md, "The WAL copied at each big
commit"). Copied at once, a batch's pages are mostly in the database before the next batch
begins, which then restarts the WAL: the writer's checkpoint is seldom reached, and each batch
shares the copying instead of every fifth paying for it. Small commits (a few pages each) still
share the interval's checkpoint and its fsync until the WAL is that long.

On a full disk: once a checkpoint copied the whole WAL, the next commit restarts the WAL and
writes over blocks the WAL file already owns, so it can succeed with no byte free, and is as
durable as any (``synchronous=FULL``). A checkpoint that needs the database file to grow fails
there; it is said once (a warning naming the full disk), and the commits stay in the WAL, which
can no longer be restarted: the first commit that needs a new block of WAL fails, and the caller
gets the store's error naming the full disk.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

from worldgraph.kg.embedded.sql.schema import CHECKPOINT_PASSIVE

__all__ = ["EAGER_LOG_FRAMES", "INTERVAL_SECONDS", "Checkpointer"]

log = logging.getLogger("worldgraph")

INTERVAL_SECONDS = 0.5
EAGER_LOG_FRAMES = 1024  # pages (4 MB): a WAL this long is copied at each commit (the module)


class Checkpointer:
    """Background passive checkpoints of the SQLite file at ``path`` (see the module)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._wake = threading.Event()
        self._stopped = False
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.runs = 0  # checkpoints run (for tests)
        self.failing: str | None = None  # why the last checkpoint failed, until one succeeds again

    def kick(self) -> None:
        """A commit wrote to the WAL: copy it in the background soon."""
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopped:
                    self._thread = threading.Thread(target=self._loop, name="worldgraph-sqlite-checkpoint",
                                                    daemon=True)
                    self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        try:
            conn = sqlite3.connect(str(self.path), timeout=1.0, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:  # pragma: no cover - the writer's own checkpoints go on
            log.info("background checkpoints of %s are off (%s)", self.path, exc)
            return
        try:
            while True:
                self._wake.wait()
                if self._stopped:
                    return
                self._wake.clear()
                log_frames = 0
                try:
                    _busy, log_frames, _copied = conn.execute(CHECKPOINT_PASSIVE).fetchone()
                    self.runs += 1
                    self.failing = None
                except sqlite3.Error as exc:
                    self._failed(exc)
                # the commits of this interval: copied together next; a long WAL: at the next commit
                if log_frames < EAGER_LOG_FRAMES and self._halt.wait(INTERVAL_SECONDS):
                    return
        finally:
            conn.close()

    def _failed(self, exc: sqlite3.Error) -> None:
        """A busy or locked file is routine (the next commit asks again). Anything else, a full
        disk first of all, is said once until a checkpoint succeeds again: the commits stay in
        the WAL, durable, but the WAL cannot be copied nor restarted, so it grows until the
        writer's own commits fail on the same disk."""
        name, text = getattr(exc, "sqlite_errorname", ""), str(exc)  # the name from Python 3.11 on
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "is locked" in text:
            log.debug("background checkpoint of %s: %s", self.path, exc)
            return
        if self.failing is None:
            full = "; the disk is full: free space on it" if name == "SQLITE_FULL" or "disk is full" in text else ""
            log.warning("background checkpoint of %s failed (%s): the commits stay in its WAL, which grows "
                        "until they can be copied%s", self.path, exc, full)
        self.failing = str(exc)

    def close(self) -> None:
        """Stop the thread (a checkpoint in progress finishes first) and close its connection."""
        with self._lock:
            self._stopped = True
            thread, self._thread = self._thread, None
        self._halt.set()
        self._wake.set()
        if thread is not None:
            thread.join(timeout=60)
