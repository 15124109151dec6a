"""What a benchmark process costs the machine: resident memory, disk use, load average.

Linux only for memory (``/proc/self/status``); elsewhere the numbers are None.
"""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path
from typing import Any


def rss_mb() -> dict[str, float | None]:
    """Current (VmRSS) and peak (VmHWM) resident memory of this process, in MB."""
    out: dict[str, float | None] = {"rss_mb": None, "peak_rss_mb": None}
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    out["rss_mb"] = round(int(line.split()[1]) / 1024, 1)
                elif line.startswith("VmHWM:"):
                    out["peak_rss_mb"] = round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return out


def tree_rss_mb(pid: int | None = None) -> float:
    """Resident memory of a process and all its descendants together (Linux: /proc), MB: this
    process and the index maintenance processes it started, sampled at one moment."""
    root = os.getpid() if pid is None else pid
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            with open(entry / "status") as fh:
                kb = next((int(line.split()[1]) for line in fh if line.startswith("VmRSS:")), 0)
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        rss[int(entry.name)] = kb
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo.extend(children.get(p, []))
    return round(total / 1024, 1)


class TreeRssSampler:
    """Samples ``tree_rss_mb`` (this process and its descendants together) every ``interval``
    seconds in a thread, and keeps the peak of each phase the caller names (``phase``).

    The issue's memory target is the peak of all worldgraph processes at one moment, at any point
    of a run: the ingest, the wait for the background, the mirror's build, the recalls. A sample
    every 50 batches of the ingest missed the mirror build (13.5 GB at 10M against 5.7 sampled).
    The harness's own arrays (a corpus chunk, the exact truth) are counted too: the numbers are an
    upper bound of the library's. One sample walks /proc (a few ms): at 2 s, ~0.2 % of a core,
    counted in the process's CPU time like any thread's."""

    def __init__(self, interval: float = 2.0) -> None:
        self.interval = interval
        self.peaks: dict[str, float] = {}
        self._phase = "start"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bench-rss-sampler", daemon=True)

    def __enter__(self) -> TreeRssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def phase(self, name: str) -> None:
        """Samples now (the end of the phase before), then counts samples toward ``name``."""
        self.sample()
        with self._lock:
            self._phase = name

    def sample(self) -> None:
        mb = tree_rss_mb()
        with self._lock:
            self.peaks[self._phase] = max(self.peaks.get(self._phase, 0.0), mb)

    @property
    def peak(self) -> float | None:
        return max(self.peaks.values(), default=None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()


def reset_peak_rss() -> bool:
    """Start a new peak-RSS window (Linux: ``echo 5 > /proc/self/clear_refs``); False if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def children_peak_rss_mb() -> float:
    """The largest peak RSS of any finished child process (the index maintenance processes), MB."""
    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def du(p: Path) -> int:
    """Bytes of the files under ``p`` (or of the file ``p``). The store's background cleanup
    deletes files and folders while this walks (a 10M run's harness died of a folder gone
    between its listing and its scan): what vanished meanwhile counts as gone."""
    if p.is_file():
        return p.stat().st_size
    total = 0
    for root, _dirs, files in os.walk(p):  # a folder gone before its scan is skipped (onerror None)
        for name in files:
            try:
                total += os.stat(os.path.join(root, name), follow_symlinks=False).st_size
            except FileNotFoundError:
                pass
    return total


def disk_breakdown(data_dir: Path) -> dict[str, Any]:
    """MB on disk of a WorldModel data directory: the SQLite store (with its WAL) and each
    LanceDB table split into row data, indexes, version manifests, transactions and deletions."""
    mb = lambda n: round(n / 1e6, 1)  # noqa: E731
    out: dict[str, Any] = {"sqlite_mb": mb(sum(du(f) for f in data_dir.glob("worldgraph.db*"))), "lancedb": {}}
    lance_root = data_dir / "lancedb"
    total = 0
    for table in sorted(lance_root.glob("*.lance")) if lance_root.is_dir() else []:
        parts = {sub.name.lstrip("_"): mb(du(sub)) for sub in sorted(table.iterdir()) if sub.is_dir()}
        parts["total"] = mb(du(table))
        out["lancedb"][table.name] = parts
        total += du(table)
    out["lancedb_mb"] = mb(total)
    out["other_mb"] = mb(du(data_dir) - total - sum(du(f) for f in data_dir.glob("worldgraph.db*")))
    return out
