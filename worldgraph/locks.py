"""The one cross-process file lock (the ``filelock`` library: ``flock`` on POSIX, ``LockFileEx``
on Windows). Each ``file_lock`` call opens its own handle, so it excludes other threads of this
process as well as other processes; it is released on exit, exceptions included."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from worldgraph.errors import StorageError

__all__ = ["file_lock"]


@contextmanager
def file_lock(path: str | Path, timeout: float | None = None, poll_interval: float = 0.005) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created, with its folder, if missing) for the block.
    ``timeout``: seconds to wait (None: as long as it takes); raises StorageError naming the file
    when it runs out. ``filelock`` waits by polling a non-blocking lock; ``poll_interval`` (s) is
    kept short because the episode index takes this lock around every write."""
    lock_path = Path(path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    # mode 0600: a lock file is the owner's like every file of the data folder (worldgraph.filemodes)
    lock = FileLock(str(lock_path), timeout=-1 if timeout is None else timeout, mode=0o600, thread_local=False)
    try:
        lock.acquire(poll_interval=poll_interval)
    except Timeout as exc:
        raise StorageError(f"{lock_path} is locked by another process or thread (waited {timeout} s); "
                           "retry when it is done") from exc
    try:
        yield
    finally:
        lock.release()
