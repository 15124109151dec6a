"""Re-indexing in the background after the index failed a write (its object store was unreachable).

The episodes are stored (the graph store is the system of record) and marked "failed"; a
long-running process (``worldgraph serve``, ``worldgraph worker``, an agent host) should not need
a restart or an operator to index them once the store answers again. After a failure the
``IndexRetrier`` calls ``retry_indexing`` every ``interval`` seconds until nothing is left
pending, then stops; the next failure starts it again. Short-lived processes are covered by
``WorldModel.open`` (which re-indexes what is pending) and ``worldgraph reindex --pending``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("worldgraph")

__all__ = ["IndexRetrier"]


class IndexRetrier:
    """``run()`` re-indexes what is pending (returns how many); ``pending()`` says if any is left."""

    def __init__(self, run: Callable[[], int], pending: Callable[[], bool], interval: float) -> None:
        self._run = run
        self._pending = pending
        self.interval = interval
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def kick(self) -> None:
        """Start retrying (no-op while a retry loop runs or after ``stop``)."""
        with self._lock:
            if self._stop.is_set() or self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, name="worldgraph-index-retry", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                done = self._run()
                if done:
                    log.info("re-indexed %d episode(s) after an index failure", done)
                with self._lock:  # kick() checks under the lock too: a failure marked now is not missed
                    if not self._pending():
                        self._thread = None
                        return
            except Exception as exc:  # noqa: BLE001 - a store outage too: try again next interval
                log.warning("re-indexing after an index failure did not finish (%s); retrying in %.0f s",
                            exc, self.interval)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
