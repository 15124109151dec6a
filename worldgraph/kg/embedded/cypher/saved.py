"""Projections kept on disk between opens: a tenant's LadybugDB database in the store's data folder,
named by a small JSON file that says which generations of the SQLite file it holds.

Building a projection reads and copies every record of the tenant (seconds at 100k episodes);
opening a saved one takes ~0.1 s, and its engine then holds only the pages queries read, not the
whole graph. The rules:

- **Where.** ``<sqlite file>-cypher/`` beside the store's SQLite file (mode 0700; the files 0600):
  ``<key>.json`` names the current database ``<key>-<build id>/projection.lbug`` of the tenant whose
  SHA-256 is ``key`` (a tenant id may hold any character; a folder listing names no tenant).
  Each build writes a new file under a new id, so a process never writes a file another one
  reads, and a file half written by a killed process is never named.
- **Current.** The JSON names the projection format (``FORMAT``), LadybugDB's version, the tenant
  and the generations (``embedded.connection``'s ``version()``: every commit of any process that
  writes a part's tables bumps its generation in the same transaction, and writes a random stamp,
  so a backup restored under the folder never matches a projection of another history). A query
  uses the saved database as it is only when all four match now. When the generations differ
  (written since, by any process), the database is reopened and compared with the tenant's rows,
  never trusted from a log: its episode part by ``episodes`` (every record it holds checked
  against the row of its id first, so another history's records are never kept), its world part
  by the rows it holds, read back from its own tables (``Projection.held_world_rows``), against
  all of the tenant's world rows (``worldpart.update_world``); the differences are applied row
  by row, and past ``INCREMENTAL_MAX`` of them, or a new environment, a new one is built. A crash
  half way through a refresh leaves generations behind, so that database is compared again.
- **One writer.** LadybugDB locks a database file against other processes, not against a second
  open in the same process: ``claim`` keeps the files this process has open, and a file claimed
  or locked elsewhere is not opened (a new one is built).
- **Erased with the records.** ``purge()`` of the store (after a forget) deletes the forgotten
  tenants' saved projections; a rebuild deletes the tenant's older files.
- **Two scopes.** A tenant may also have a projection of its world part alone (``scope``
  "world", for the queries that reach nothing else), saved the same way under
  ``<key>-world.json``, current while the world part's generation matches (and reopened and
  compared like a full one when it does not). Each scope's rebuild deletes only that scope's
  older files; ``purge()`` deletes both.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path

from worldgraph.filemodes import PRIVATE_FILE, private_dir
from worldgraph.kg.embedded.cypher.model import Gens

log = logging.getLogger("worldgraph")

# Bump when what a projection holds changes (labels, columns, how rows are read): saved ones are
# rebuilt. 2: projections are written by this code alone (query children open them read-only); a
# file saved by format 1 may hold what a query wrote into it, so none is trusted. 3: facts of any
# kind are projected (a FACT relationship table, world edges of relation "fact"); a format 2 file
# has no such table, so it is rebuilt.
FORMAT = 3
SUFFIX = ".lbug"
# A database lives alone in a folder of its own, ``<key>-<build id>/projection.lbug`` (and its log
# ``projection.lbug.wal``): a query child may read that folder, which holds the tenant's projection
# and nothing else, so it reads the log the store writes between checkpoints.
DB_NAME = "projection" + SUFFIX

_lock = threading.Lock()
_claimed: set[str] = set()  # database files this process has open


def folder_for(sqlite_path: Path) -> Path:
    """The folder of the saved projections of the store whose SQLite file is ``sqlite_path``."""
    return sqlite_path.with_name(sqlite_path.name + "-cypher")


def claim(path: Path) -> bool:
    """Mark ``path`` open in this process; False if it is already (under any name: the real path
    counts, so a relative path or a link to the data folder is the same file)."""
    with _lock:
        key = os.path.realpath(path)
        if key in _claimed:
            return False
        _claimed.add(key)
        return True


def release(path: Path) -> None:
    with _lock:
        _claimed.discard(os.path.realpath(path))


def _engine_version() -> str:
    import ladybug

    return str(getattr(ladybug, "__version__", "?"))


class SavedProjections:
    """The saved projections of one store; ``folder`` None keeps none (a read-only store)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def holds(self, path: Path) -> bool:
        """Whether ``path`` is a database of this folder (a saved projection, or one being built)."""
        return self.folder is not None and path.parent.parent == self.folder

    @staticmethod
    def key(tenant_id: str) -> str:
        return hashlib.sha256(tenant_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]

    def _prefix(self, tenant_id: str, scope: str) -> str:
        """What the names of the tenant's files of ``scope`` start with: ``<key>`` (a full
        projection: ``<key>.json``, ``<key>-<build id>/``) or ``<key>-world`` (the world part
        alone: ``<key>-world.json``, ``<key>-world-<build id>/``; a build id is hex, so no full
        projection's name starts so)."""
        return self.key(tenant_id) + ("-world" if scope == "world" else "")

    def _meta_path(self, tenant_id: str, scope: str = "full") -> Path:
        assert self.folder is not None
        return self.folder / f"{self._prefix(tenant_id, scope)}.json"

    def find(self, tenant_id: str, gens: Gens, scope: str = "full",
             behind: bool = False) -> tuple[Path, dict[str, dict[str, str]], Gens] | None:
        """The tenant's saved database of ``scope``, its column types and the generations it holds,
        if it holds ``gens`` (the world part's generation alone for the world part alone; with
        ``behind``, whatever it holds: one to reopen and bring up to date), else None."""
        if self.folder is None:
            return None
        try:
            meta = json.loads(self._meta_path(tenant_id, scope).read_text("utf-8"))
        except (OSError, ValueError):  # none saved, or a file that is not ours to trust
            return None
        want = json.loads(json.dumps(gens))
        if not isinstance(meta, dict) or meta.get("tenant_id") != tenant_id or meta.get("scope", "full") != scope:
            return None
        if meta.get("format") != FORMAT or meta.get("engine") != _engine_version():
            # written by another version (format 1 may hold what a query wrote): never used, deleted
            self._remove(tenant_id, keep=(), scope=scope)
            return None
        held = meta.get("gens")
        if not (isinstance(held, list) and len(held) == 2 and all(isinstance(g, list) and len(g) == 2 for g in held)):
            return None
        if not (behind or (held[1] == want[1] if scope == "world" else held == want)):
            return None
        name, kinds = meta.get("file"), meta.get("kinds")
        if not isinstance(name, str) or not isinstance(kinds, dict) or "/" in name or os.sep in name \
                or not name.startswith(self._prefix(tenant_id, scope) + "-"):
            return None
        path = self.folder / name / DB_NAME
        (e, es), (w, ws) = held
        return (path, kinds, ((int(e), str(es)), (int(w), str(ws)))) if path.is_file() else None

    def new_path(self, tenant_id: str, scope: str = "full") -> Path | None:
        """Where a new database of the tenant is built (the folder made private first); None: in memory."""
        if self.folder is None:
            return None
        try:
            private_dir(self.folder)
        except OSError as exc:  # a full disk, say
            log.warning("could not make %s (%s); the Cypher projection is built in memory", self.folder, exc)
            return None
        return _new_database(self.folder, self._prefix(tenant_id, scope))

    def save(self, tenant_id: str, path: Path | None, gens: Gens, kinds: dict[str, dict[str, str]],
             scope: str = "full") -> None:
        """Name ``path`` the tenant's current database of ``scope``, holding ``gens``, and delete
        its older files of that scope. Nothing is saved for an in-memory projection or a file
        deleted meanwhile (a purge)."""
        if self.folder is None or path is None or not self.holds(path) or not path.is_file():
            return
        meta = {"format": FORMAT, "engine": _engine_version(), "tenant_id": tenant_id, "file": path.parent.name,
                "gens": gens, "kinds": kinds, "scope": scope}
        target = self._meta_path(tenant_id, scope)
        tmp = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(meta, f)
            os.replace(tmp, target)
        except OSError as exc:  # a full disk: the projection still answers; the next open rebuilds it
            log.warning("could not save the Cypher projection of a tenant in %s (%s); it is rebuilt on the next "
                        "open", self.folder, exc)
            tmp.unlink(missing_ok=True)
            return
        _private(path)
        self._remove(tenant_id, keep=(path.parent.name, target.name), scope=scope)

    def remove(self, tenant_id: str) -> None:
        """Delete the tenant's saved projections, of both scopes (a process that has one open reads
        on until it closes it)."""
        if self.folder is not None:
            self._remove(tenant_id, keep=(), scope=None)
            Scratch.sweep(self.folder, tenant_id)

    def remove_file(self, path: Path) -> None:
        """Delete one database that was not saved (a build that failed), with its folder."""
        _delete(path)

    def _remove(self, tenant_id: str, keep: tuple[str, ...], scope: str | None) -> None:
        """Delete the tenant's databases and files of ``scope`` (None: of both) but ``keep`` (a
        save's leftover ``<meta>.<id>.tmp`` goes too)."""
        assert self.folder is not None
        key, world = self.key(tenant_id), self._prefix(tenant_id, "world")
        try:
            names = os.listdir(self.folder)
        except OSError:
            return
        for name in names:
            ours = name.startswith(key) and (scope is None or name.startswith(world) == (scope == "world"))
            if ours and name not in keep:
                try:
                    if (self.folder / name).is_dir():
                        shutil.rmtree(self.folder / name)
                    else:
                        os.unlink(self.folder / name)
                except OSError as exc:  # pragma: no cover - e.g. Windows, where an open file stays
                    log.warning("could not delete the old Cypher projection %s (%s)", self.folder / name, exc)


def _new_database(folder: Path, prefix: str) -> Path:
    """A new database's path, ``<folder>/<prefix>-<build id>/projection.lbug`` (its folder made, 0700)."""
    home = folder / f"{prefix}-{uuid.uuid4().hex}"
    os.mkdir(home, 0o700)
    return home / DB_NAME


def _delete(path: Path) -> None:
    """Delete a database: its folder (``_new_database``), or the file and its side files."""
    if path.name == DB_NAME:
        shutil.rmtree(path.parent, ignore_errors=True)
    else:
        for p in [path, *path.parent.glob(path.name + ".*")]:
            p.unlink(missing_ok=True)


def _private(path: Path) -> None:
    """LadybugDB creates its files with the umask's mode: drop group and other bits."""
    for p in path.parent.iterdir():
        try:
            os.chmod(p, PRIVATE_FILE)
        except OSError:  # pragma: no cover - vanished meanwhile
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's: alive
        return True
    return True


class Scratch:
    """The store's private temporary folders: projections that are not saved (small tenants, a
    read-only store) are files here, so that query children open them read-only like saved ones.
    For a writable store the first is ``scratch-<pid>-<random>`` inside the saved projections'
    folder (so a tenant's rows stay in the data folder, and a purge finds them there: ``sweep``);
    the *spill* folder, in ``tempfile``'s folder, takes what the data folder's disk cannot (full),
    and is the only one of a read-only store. Mode 0700, made on first use, removed with the store;
    each file is deleted when its projection is let go (a child reading it keeps it until it ends).
    A folder left in the data folder by a process that was killed is removed by the next store
    that opens the data folder's projections (``sweep``)."""

    def __init__(self, parent: Path | None) -> None:
        self.parent = parent
        self._folder: Path | None = None
        self._spill: Path | None = None
        self._lock = threading.Lock()

    @property
    def folder(self) -> Path:
        with self._lock:
            if self._folder is None and self.parent is not None:
                try:
                    private_dir(self.parent)
                    self.sweep(self.parent)
                    self._folder = Path(tempfile.mkdtemp(prefix=f"scratch-{os.getpid()}-", dir=self.parent))
                except OSError as exc:  # a full disk
                    log.warning("could not make a scratch folder in %s (%s): using a temporary folder", self.parent,
                                exc)
            return self._folder if self._folder is not None else self._spill_folder()

    def _spill_folder(self) -> Path:
        if self._spill is None:
            self._spill = Path(tempfile.mkdtemp(prefix="worldgraph-cypher-"))
        return self._spill

    def folders(self) -> list[Path]:
        """Every folder a projection may be in (made now: query children need them at their start)."""
        first = self.folder
        with self._lock:
            return sorted({first, self._spill_folder()})

    def new_path(self, tenant_id: str, spill: bool = False) -> Path:
        """Where a new database of the tenant is built (``spill``: in the spill folder)."""
        if spill:
            with self._lock:
                folder = self._spill_folder()
        else:
            folder = self.folder
        return _new_database(folder, SavedProjections.key(tenant_id))

    def holds(self, path: Path, spill: bool | None = None) -> bool:
        """Whether ``path`` is a database of these folders (``spill``: of that one only, or not)."""
        folders = {"first": self._folder, "spill": self._spill}
        wanted = [folders["spill"]] if spill else [folders["first"]] if spill is False else list(folders.values())
        return any(f is not None and path.parent.parent == f for f in wanted)

    def remove(self, path: Path) -> None:
        if self.holds(path):
            _delete(path)

    def close(self) -> None:
        with self._lock:
            folders, self._folder, self._spill = [self._folder, self._spill], None, None
        for folder in folders:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def sweep(parent: Path, tenant_id: str | None = None) -> None:
        """Remove the scratch folders under ``parent`` of processes no longer alive, and (a purge:
        ``tenant_id``) the tenant's files in every scratch folder."""
        key = SavedProjections.key(tenant_id) if tenant_id is not None else None
        try:
            names = os.listdir(parent)
        except OSError:
            return
        for name in names:
            if not name.startswith("scratch-"):
                continue
            folder = parent / name
            pid = name.split("-")[1]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
            elif key is not None:
                for f in folder.glob(key + "-*"):
                    shutil.rmtree(f, ignore_errors=True)
