"""Private files: a data folder holds every tenant's records and the API key hashes, so only its
owner may read it -- the rule PostgreSQL applies to its data directory.

- a data folder (and a local LanceDB folder) is created mode 0700, the SQLite file 0600 (SQLite
  gives its ``-wal`` and ``-shm`` the database file's mode);
- an existing folder that group or others can enter is tightened on a writable open: the folder
  and every folder in it to 0700, every file in it to drop its group and other bits (so 0644
  becomes 0600), with a warning in the log naming the old mode. A read-only open changes nothing
  and only warns.

Files LanceDB writes later get the process's umask, inside the 0700 folder that no other user can
enter. On Windows (no POSIX modes) this does nothing.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

__all__ = ["PRIVATE_DIR", "PRIVATE_FILE", "create_private_file", "private_dir"]

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
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & 0o077:
        return
    if read_only:
        log.warning("%s (mode %04o) can be read by other users of this machine; open it writable once to "
                    "tighten it to 0700, or run: chmod -R go-rwx %s", path, mode, path)
        return
    try:
        _tighten(path)
    except OSError as exc:  # not the owner, or a file that vanished mid-walk
        log.warning("%s (mode %04o) can be read by other users of this machine and could not be tightened "
                    "(%s); run: chmod -R go-rwx %s", path, mode, exc, path)
        return
    log.warning("%s was mode %04o, readable by other users of this machine: tightened to 0700 (its files to "
                "0600)", path, mode)


def _tighten(root: Path) -> None:
    os.chmod(root, PRIVATE_DIR)
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            p = os.path.join(folder, name)
            if not os.path.islink(p):
                os.chmod(p, PRIVATE_DIR)
        for name in files:
            p = os.path.join(folder, name)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
                os.chmod(p, stat.S_IMODE(st.st_mode) & 0o700)


def create_private_file(path: str | Path) -> None:
    """Create ``path`` empty with mode 0600 if it does not exist (an existing file is left alone)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    os.close(fd)
    if _POSIX:
        os.chmod(path, PRIVATE_FILE)
