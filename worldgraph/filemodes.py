"""Private files: a data folder holds every tenant's records and the API key hashes, so only its
owner may read it -- the rule PostgreSQL applies to its data directory. Every file and folder
worldgraph writes under it is 0600 / 0700.

- worldgraph's own entry points (the ``worldgraph`` command: serve, worker, every other command;
  the children it starts: index maintenance, Cypher builds) set the umask to 077 first
  (``private_umask``), so everything they and the libraries they drive (SQLite, LanceDB,
  LadybugDB) create is private from the start;
- as a library inside a host application the umask is the host's, and worldgraph does not change
  it (the host's own files are not its business): a data folder (and a local LanceDB folder) is
  created mode 0700, the SQLite file 0600 (SQLite gives its ``-wal`` and ``-shm`` the database
  file's mode), and what LanceDB writes is made private after each write (``PrivateTree``);
- an existing folder in which group or others can reach anything (the folder itself, or a file
  an older worldgraph let LanceDB write 0644) is tightened on a writable open: every folder in it
  to 0700, every file to drop its group and other bits (so 0644 becomes 0600), with a warning in
  the log naming the old mode. A read-only open changes nothing and only warns.

On Windows (no POSIX modes) this does nothing.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from pathlib import Path

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "PrivateTree", "create_private_file", "private_dir", "private_umask",
           "tighten", "umask_is_private"]

log = logging.getLogger("worldgraph")

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_POSIX = os.name == "posix"


def private_dir(path: str | Path, read_only: bool = False) -> None:
    """Make ``path`` (missing parents with the usual mode) as a 0700 folder, or tighten an existing
    one that group or others can reach (see the module doc). ``read_only``: create nothing,
    change nothing, only warn."""
    path = Path(path)
    if not path.exists():
        if read_only:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # made by another process meanwhile: checked below like any folder
            pass
        else:
            if _POSIX:
                os.chmod(path, PRIVATE_DIR)  # mkdir's mode passes through the umask; this does not
            return
    if not _POSIX or not path.is_dir():
        return
    top = stat.S_IMODE(path.stat().st_mode)
    loose = _loose_entries(path)
    if not loose:
        return
    # the mode seen by the listing: the entry may be gone since (a LanceDB writer's temporary file)
    mode = top if top & 0o077 else loose[0][1]
    what = f"{path} (mode {top:04o})" if top & 0o077 else f"{len(loose)} files or folders in {path} (such as mode {mode:04o})"
    if read_only:
        log.warning("%s can be read by other users of this machine; open it writable once to tighten it to 0700, "
                    "or run: chmod -R go-rwx %s", what, path)
        return
    try:
        _tighten(path, loose)
    except OSError as exc:  # not the owner, or a file that vanished mid-walk
        log.warning("%s can be read by other users of this machine and could not be tightened (%s); run: "
                    "chmod -R go-rwx %s", what, exc, path)
        return
    if top & 0o077:
        log.warning("%s was mode %04o, readable by other users of this machine: tightened to 0700 (its files to "
                    "0600)", path, top)
    else:
        log.warning("%s were readable by other users of this machine: tightened to 0700 (files to 0600)", what)


def _loose_entries(root: Path) -> list[tuple[str, int]]:
    """``root`` and the folders and regular files under it that group or others can reach, with
    the mode each had when listed."""
    top = stat.S_IMODE(os.lstat(root).st_mode)
    out = [(str(root), top)] if top & 0o077 else []
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            p = os.path.join(folder, name)
            try:
                st = os.lstat(p)
            except FileNotFoundError:  # vanished mid-walk (a LanceDB cleanup, a writer's renamed temporary file)
                continue
            if (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)) and stat.S_IMODE(st.st_mode) & 0o077:
                out.append((p, stat.S_IMODE(st.st_mode)))
    return out


def _tighten(root: Path, entries: list[tuple[str, int]]) -> None:
    """Make each listed entry private. One gone since the listing is skipped (docs/architecture.md,
    "Walking a table's folder"): another process's LanceDB writes its files as ``.tmpXXXXXX`` and
    renames them when done, a cleanup deletes old versions' files, and what is not there is
    readable by no one. Any other error (not the owner, say) is raised."""
    for p, _ in entries:
        try:
            st = os.lstat(p)
            os.chmod(p, PRIVATE_DIR if stat.S_ISDIR(st.st_mode) else stat.S_IMODE(st.st_mode) & 0o700)
        except FileNotFoundError:
            continue


def tighten(root: str | Path) -> None:
    """Make ``root`` and what is under it private now (0700 folders, files without group or other
    bits): for a small folder a writer of ours fills under the host's umask (a saved mirror)."""
    if _POSIX and os.path.isdir(root):
        _tighten(Path(root), _loose_entries(Path(root)))


def private_umask() -> None:
    """Make everything this process creates from now on private (umask 077): worldgraph's own
    entry points call it first (the ``worldgraph`` command, the children it starts). Never called
    by the library itself: a host application's umask is the host's."""
    if _POSIX:
        os.umask(0o077)


def umask_is_private() -> bool:
    """Whether the process's umask already takes group and other bits away (read from
    /proc/self/status, which does not change it; False when it cannot be read)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o077 == 0o077
    except (OSError, ValueError):
        pass
    return False


# A folder's last listing by PrivateTree: its inode and modification time then, whether the
# listing is settled (PrivateTree.SETTLED_NS), the keys (path, inode) of its entries, its subfolders.
_Listing = tuple[tuple[int, int], bool, list[tuple[str, int]], list[str]]


class PrivateTree:
    """Keeps what a library writes under ``root`` (LanceDB's tables) private when the process's
    umask does not: ``sweep()`` takes group and other bits from every folder and file under it
    not seen private before (a listing of the tree, a stat of each new entry only: an entry is
    known by its path and inode, so a file replaced under the same name is checked again).
    Nothing to do when the umask is private (``umask_is_private``).

    A listing of a large table costs milliseconds, so after a write it runs at most once per
    ``interval`` seconds: a write within that time of the last sweep schedules one at its end
    (a timer), so a new file is private at most ``interval`` seconds after it was written, inside
    the 0700 folder that no other user can enter meanwhile. ``sweep(force=True)`` (after a purge,
    on close) runs at once.

    A folder is listed again only when it may hold something new: its inode or modification time
    changed since its last listing, or that listing came less than ``SETTLED_NS`` after the
    folder's last change (a change within the same clock tick as the listing leaves the time as
    it was). LanceDB never adds to an index's folder once written, so at 10M rows a sweep lists
    ~10 of the table's ~1,600 folders (bench/README.md, "The private-files sweep at 10M")."""

    SETTLED_NS = 1_000_000_000  # a folder's listing is trusted once it came this long after its last change

    def __init__(self, root: str | Path, interval: float = 1.0) -> None:
        self.root = str(root)
        self.interval = interval
        self._seen: set[tuple[str, int]] = set()
        self._listed: dict[str, _Listing] = {}
        self._lock = threading.Lock()
        self._last = float("-inf")
        self._timer: threading.Timer | None = None

    def sweep(self, force: bool = False) -> int:
        """Tighten the new entries (now, or by the end of the interval); returns how many were changed."""
        if not _POSIX or umask_is_private() or not os.path.isdir(self.root):
            return 0
        wait = self._last + self.interval - time.monotonic()
        if not force and wait > 0:
            with self._lock:
                if self._timer is None:
                    self._timer = threading.Timer(wait, self._trailing)
                    self._timer.daemon = True
                    self._timer.start()
            return 0
        return self._sweep()

    def _trailing(self) -> None:
        with self._lock:
            self._timer = None
        try:
            self._sweep()
        except OSError as exc:  # pragma: no cover - the folder went (a dropped index)
            log.debug("could not make %s private: %s", self.root, exc)

    def close(self) -> None:
        """Cancel a scheduled sweep and sweep now."""
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self.sweep(force=True)

    def _sweep(self) -> int:
        with self._lock:
            self._last = time.monotonic()
            changed = 0
            present: set[tuple[str, int]] = set()
            listed: dict[str, _Listing] = {}
            stack = [self.root]
            while stack:
                folder = stack.pop()
                try:
                    st = os.stat(folder, follow_symlinks=False)
                except FileNotFoundError:  # dropped meanwhile
                    continue
                stamp = (st.st_ino, st.st_mtime_ns)
                known = self._listed.get(folder)
                if known is not None and known[0] == stamp and known[1]:  # nothing new in it
                    listed[folder] = known
                    present.update(known[2])
                    stack.extend(known[3])
                    continue
                settled = time.time_ns() - st.st_mtime_ns >= self.SETTLED_NS  # before the listing
                try:
                    entries = list(os.scandir(folder))
                except FileNotFoundError:
                    continue
                keys: list[tuple[str, int]] = []
                subfolders: list[str] = []
                for entry in entries:
                    try:
                        key = (entry.path, entry.inode())
                        is_dir = entry.is_dir(follow_symlinks=False)
                        if is_dir:
                            subfolders.append(entry.path)
                        keys.append(key)
                        if key in self._seen or not (is_dir or entry.is_file(follow_symlinks=False)):
                            continue
                        mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                        if mode & 0o077:
                            os.chmod(entry.path, PRIVATE_DIR if is_dir else mode & 0o700)
                            changed += 1
                    except FileNotFoundError:  # deleted meanwhile (a cleanup of old versions)
                        settled = False
                        continue
                    self._seen.add(key)
                listed[folder] = (stamp, settled, keys, subfolders)
                present.update(keys)
                stack.extend(subfolders)
            self._seen &= present
            self._listed = listed
            return changed


def create_private_file(path: str | Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (an existing file is left alone)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)
    if _POSIX:
        os.chmod(path, PRIVATE_FILE)
