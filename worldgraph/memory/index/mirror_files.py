"""A mirror (mirror.py) saved beside a local index, so a new process opens it instead of reading
every vector of the table again (1M rows: ~16 s of reading and quantizing under load).

``<index>/_mirror/<table>/`` holds one file per field of the rows (``codes.bin``, ``role.bin``,
... raw arrays, appended to and memory-mapped: a process's resident memory grows only with the
pages its searches touch), the episode ids (``ids-<first row>.arrow``, Arrow IPC files), one map
per fragment from row offset to mirror row (``map-<fragment>-<token>.npy``, written once: a
fragment that changes gets a new file) and ``manifest.json``, which names the rows, the table
version and the files of that state. The manifest is written last and replaced atomically, so a
process killed while saving leaves the previous state whole: rows past the manifest's count are
ignored (and overwritten by the next save), files it does not name are deleted by the next save.
Opening checks every field file holds the manifest's rows; anything missing or malformed starts
an empty mirror (rebuilt from the table: the mirror is derived data). The saved state may be of
an older version than the table: the opening process brings it up to date like any other
(``Mirror.refresh``), and saves it again.

One process saves at a time (a lock file, not waited for: a busy lock skips the save); a process
whose rows on disk are not the ones it loaded (another process saved meanwhile) does not save and
reopens the saved state at its next search. Purge deletes the folder of every table it rewrites
(the files hold codes and ids of forgotten rows until then).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from worldgraph.clock import seconds_left
from worldgraph.errors import StorageError
from worldgraph.filemodes import tighten
from worldgraph.locks import file_lock
from worldgraph.memory.index import filter_postings as postings
from worldgraph.memory.index import ivf as ivfs
from worldgraph.memory.index.columns import FIELDS, NO_RESIDUAL, IdFile, id_hashes, pread_rows, row_shape
from worldgraph.memory.index.mirror import Fragment, Mirror
from worldgraph.memory.index.worker import release_memory

log = logging.getLogger("worldgraph.memory.index.episode_index")

FOLDER = "_mirror"  # beside the tables of a local index
# 2: with the codes' residuals (fine.bin); a format-1 mirror gets them read in the background.
# 3: with the hashes of the episode ids (eid.bin); an older mirror gets them from its id files on
# opening (no table read: ~0.6 s at 1M rows), saved with its next save.
# 4: the codes in list order (``order_codes``): the manifest names codes' file ("codes", else
# codes.bin) and the order ("order": the file of each ordered row's place, their count, the lists'
# key); a format-3 mirror opens as one none of whose rows is ordered yet, and is ordered in the background.
FORMAT = 4
FIELDS_OF = {1: [f for f in FIELDS if f not in ("fine", "eid")], 2: [f for f in FIELDS if f != "eid"],
             3: list(FIELDS), 4: list(FIELDS)}
SAVE_ROWS = 50_000  # rows added in memory that make a search save the mirror at once
SAVE_SECONDS = 60.0  # otherwise a changed mirror is saved at most this often (and on close)
SYNC_ROWS = 20_000  # at most this many rows new to a mirror are read in the search that finds them
# fields whose scattered rows are read from their files, not through their maps (Columns.read):
# the residuals (a search's final rows) and the codes (lists trained on a sample and filled)
READ = ("codes", "fine")
BUILD_ROWS = 262_144  # rows a build holds in memory before writing them to the files (config.mirror_build_rows)
ORDER_SLACK = 4  # codes are put in list order again once the rows the lists hold past the ordered ones are 1/4 of them
ORDER_RETRY_SECONDS = 60.0  # codes that could not be put in order (the folder's lock busy) are tried again after
ORDER_CHUNK = 131_072  # rows of codes copied at a time while they are put in order (50 MB at 384 bytes)


class BuildStopped(Exception):
    """A build ended early: the index was closed (``Mirrors.close`` stopped waiting for it)."""


def folder_of(index_path: str, table: str) -> Path:
    return Path(index_path) / FOLDER / table


def _width(field: str, dimensions: int) -> int:
    return int(np.dtype(FIELDS[field]).itemsize) * int(np.prod(row_shape(field, 1, dimensions)))


def _base(folder: Path, rows: int, dimensions: int, fmt: int = FORMAT,
          codes_name: str = "codes.bin") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The field files memory-mapped, ``rows`` rows each (read-only); a format-1 folder's
    residuals in memory, as none (filled by ``Mirror.fill_fine``). And the files of ``READ``,
    open: what ``Columns.read`` reads their scattered rows from."""
    out: dict[str, np.ndarray] = {}
    files: dict[str, Any] = {}
    for field, dtype in FIELDS.items():
        shape = row_shape(field, rows, dimensions)
        if field not in FIELDS_OF[fmt]:  # filled by the caller (load)
            out[field] = np.full(shape, NO_RESIDUAL if field == "fine" else 0, dtype)
            continue
        if rows == 0:
            out[field] = np.zeros(shape, dtype)
            continue
        path = folder / (codes_name if field == "codes" else f"{field}.bin")
        if path.stat().st_size < rows * _width(field, dimensions):
            raise ValueError(f"{path} holds fewer than {rows} rows")
        if field in READ:
            files[field] = open(path, "rb", buffering=0)  # noqa: SIM115 - held by the columns, closed with them
        out[field] = np.memmap(path, dtype=dtype, mode="r", shape=shape)
    return out, files


def load(folder: Path, dimensions: int) -> Mirror | None:
    """The saved mirror in ``folder`` (None: none saved, or unusable: logged)."""
    path = folder / "manifest.json"
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
        fmt = manifest.get("format")
        if fmt not in FIELDS_OF or manifest.get("dimensions") != dimensions:
            raise ValueError(f"format {fmt}, {manifest.get('dimensions')}-d vectors")
        rows = int(manifest["rows"])
        upgraded = False
        mirror = Mirror(dimensions)
        mirror.coarse = fmt < 2 and rows > 0  # saved before residuals: Mirrors.get reads them first
        cols = mirror.cols
        cols.codes_name = str(manifest.get("codes", "codes.bin"))
        order = manifest.get("order")
        if order:
            slot = np.load(folder / order["file"])
            if slot.ndim != 1 or len(slot) != int(order["rows"]) or len(slot) > rows:
                raise ValueError("the codes' order does not match the rows")
            cols.slot = slot.astype(np.int32 if rows <= np.iinfo(np.int32).max else np.int64, copy=False)
            cols.order_name, cols.order_lists = str(order["file"]), str(order["lists"])
        _set_base(cols, folder, rows, dimensions, fmt)
        for start, name in manifest["ids"]:
            cols.set_ids(len(cols.ids), *_map_ids(folder / name))
            cols.id_starts.append(int(start))
        if sum(len(c) for c in cols.ids) != rows:
            raise ValueError("the id files do not hold every row")
        if "eid" not in FIELDS_OF[fmt] and rows:  # saved before the id hashes: made from the ids
            cols.base["eid"][:] = np.concatenate([id_hashes(c) for c in cols.ids])
            upgraded = True
        cols.saved_ids = len(cols.ids)
        alive = np.zeros(rows, bool)
        for fid, (files, deletion, name) in manifest["fragments"].items():
            by_offset = np.load(folder / name)
            held = Fragment(tuple(files), deletion, by_offset)
            held.file = name
            mirror.frags[int(fid)] = held
            live = np.flatnonzero(by_offset >= 0)
            cols.addr[by_offset[live]] = (np.int64(int(fid)) << 32) | live
            alive[by_offset[live]] = True
        mirror.alive, mirror.live = alive, int(alive.sum())
        mirror.version = int(manifest["version"])
        mirror.saved_rows = rows
        mirror.uid = str(manifest["uid"])
        mirror.saved_at = time.monotonic()
        if upgraded:  # saved in the new format by the next search (Mirrors.get)
            mirror.dirty, mirror.saved_at = True, 0.0
        return mirror
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        log.warning("episode index: the saved mirror in %s is not usable (%s); it is built again", folder, exc)
        return None


def save(mirror: Mirror, folder: Path, locked: bool = False) -> bool:
    """Append the mirror's new rows and write its manifest; False when another process saved rows
    this one does not have (reopen the saved state then) or holds the lock now. ``locked``: the
    caller holds the folder's lock (``build_lock``)."""
    if mirror.coarse:  # a format-1 mirror whose residuals are not read yet: saved once they are
        return False
    try:
        if locked:
            return _save_locked(mirror, folder)
        with file_lock(folder / ".lock", timeout=0):
            return _save_locked(mirror, folder)
    except StorageError:
        return False


def _save_locked(mirror: Mirror, folder: Path, order: tuple[str, str, str, np.ndarray] | None = None) -> bool:
    cols = mirror.cols
    path = folder / "manifest.json"
    if not current(folder, mirror):  # (an unreadable manifest counts as none)
        return False
    d = cols.dimensions
    ids = write_rows(mirror, folder, order)
    fragments = {}
    for fid, held in mirror.frags.items():
        if held.file is None:
            held.file = f"map-{fid}-{uuid.uuid4().hex[:12]}.npy"
            np.save(folder / held.file, held.by_offset)
        fragments[str(fid)] = [list(held.files), held.deletion, held.file]
    manifest: dict[str, Any] = {"format": FORMAT, "dimensions": d, "rows": cols.n, "version": mirror.version, "uid": mirror.uid,
                                "ids": [[s, n] for s, n in ids], "fragments": fragments, "codes": cols.codes_name}
    if cols.order_name is not None:
        manifest["order"] = {"file": cols.order_name, "rows": cols.ordered, "lists": cols.order_lists}
    tmp = folder / f".manifest.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(manifest))
    os.replace(tmp, path)
    named = {n for _, n in ids} | {h.file for h in mirror.frags.values()} | {cols.codes_name, cols.order_name}
    for stale in folder.iterdir():
        if (stale.name.startswith(("map-", "ids-", ".manifest.", "codes-", "order-")) or stale.name == "codes.bin") \
                and stale.name not in named and stale != tmp:
            stale.unlink(missing_ok=True)  # (a process that mapped codes' old file reads it on: its inode stays)
    mirror.saved_rows = cols.n
    tighten(folder)  # the codes are the vectors' (derived from the user's words): 0600 as the rest
    mirror.dirty = False
    mirror.saved_at = time.monotonic()
    return True


def write_rows(mirror: Mirror, folder: Path,
               order: tuple[str, str, str, np.ndarray] | None = None) -> list[tuple[int, str]]:
    """Append the rows held in memory (the tail) to the field files and the ids added since the
    last write to an id file, then map them from there (the tail is empty after); returns every
    id file as (first row, name). The caller holds the folder's lock; the rows count once a
    manifest names them (``save``): until then they are past the manifest's count, which a
    process that opens the folder ignores and the next save overwrites. ``order``: codes' new
    file, in list order (``order_codes``: its name, the order's file and lists, each ordered
    row's place), mapped in the old one's place."""
    cols = mirror.cols
    d = cols.dimensions
    codes_name = cols.codes_name if order is None else order[0]
    for field in FIELDS:
        with open(folder / (codes_name if field == "codes" else f"{field}.bin"), "ab") as fh:
            if fh.tell() < cols.n_base * _width(field, d):  # a field the saved format had not: all its rows
                fh.truncate(0)
                fh.write(np.ascontiguousarray(cols.base[field][:cols.n_base]).tobytes())
            fh.truncate(cols.n_base * _width(field, d))  # rows a killed save left past the count
            fh.write(np.ascontiguousarray(cols.tail[field][:cols.n_tail]).tobytes())
    if len(cols.ids) > cols.saved_ids + 1:  # the chunks added since the last save, as one file
        merged = pa.concat_arrays(cols.ids[cols.saved_ids:])
        del cols.ids[cols.saved_ids:], cols.id_starts[cols.saved_ids + 1:]
        for chunk in [c for c in cols.id_files if c >= cols.saved_ids]:  # (none: those were in memory)
            del cols.id_files[chunk]
        cols.ids.append(merged)
    ids = list(zip(cols.id_starts, [f"ids-{s}.arrow" for s in cols.id_starts]))
    for i, ((_, name), chunk) in enumerate(zip(ids, cols.ids)):
        if i < cols.saved_ids:
            continue
        table = pa.table({"episode_id": chunk})
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        cols.set_ids(i, *_map_ids(folder / name))  # read from the file's pages, not held in memory
    if order is not None:
        cols.codes_name, cols.order_name, cols.order_lists = order[0], order[1], order[2]
    _set_base(cols, folder, cols.n, d, slot=cols.slot if order is None else order[3])
    cols.saved_ids = len(cols.ids)
    return ids


def _set_base(cols: Any, folder: Path, rows: int, dimensions: int, fmt: int = FORMAT,
              slot: Any = "held") -> None:
    """Map the base's files (codes' current file; ``slot``: where its ordered rows are, by
    default the ones the columns hold)."""
    maps, files = _base(folder, rows, dimensions, fmt, cols.codes_name)
    cols.set_base(maps, rows, files, cols.slot if isinstance(slot, str) else slot)


def _map_ids(path: Path) -> tuple[pa.Array, IdFile | None]:
    """The episode ids of an id file, on the file's pages (memory-mapped: a page is resident
    once something reads an id on it), and what reads single ids of it by ``os.pread`` instead
    (a search's results: ``Columns.episode_ids``; None for a column of another layout).
    ``combine_chunks`` copies even a single chunk into memory (pyarrow 26: 40 MB at 1M rows, 40
    bytes a row): one chunk is taken as it is."""
    with pa.memory_map(str(path)) as source:
        start = source.read_buffer(1).address  # where the map begins: the buffers' places in the file
        source.seek(0)
        column = pa.ipc.open_file(source).read_all().column(0)
    ids = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    reader = None
    buffers = ids.buffers()
    if column.num_chunks == 1 and ids.type in (pa.string(), pa.large_string()) and ids.null_count == 0 \
            and len(buffers) == 3 and buffers[1] is not None and buffers[2] is not None:
        reader = IdFile(open(path, "rb", buffering=0),  # noqa: SIM115 - held by the columns, closed with them
                        buffers[1].address - start, buffers[2].address - start, ids.offset, len(ids),
                        ids.type == pa.large_string())
    return ids, reader


def due(mirror: Mirror) -> bool:
    """Whether a changed mirror is saved now (many new rows, or a while since the last save)."""
    return mirror.dirty and (mirror.cols.n_tail >= SAVE_ROWS or time.monotonic() - mirror.saved_at >= SAVE_SECONDS)


def remove(index_path: str, table: str | None = None) -> None:
    """Delete the saved mirror of ``table`` (None: of every table)."""
    shutil.rmtree(Path(index_path) / FOLDER if table is None else folder_of(index_path, table), ignore_errors=True)




class Mirrors:
    """The mirrors of the big tables of one index, by table name, saved beside the tables of
    ``index_path`` (None: kept in memory only, an object store; not ``writable``: opened from
    their files but never saved, an index opened read-only). One thread refreshes a table's mirror
    while the others wait for it."""

    def __init__(self, dimensions: int, index_path: str | None, writable: bool = True,
                 build_rows: int = BUILD_ROWS) -> None:
        self.dimensions = dimensions
        self.index_path = index_path
        self.writable = writable
        self.build_rows = build_rows  # rows a build holds in memory (config.mirror_build_rows)
        self._lock = threading.Lock()
        self._mirrors: dict[str, Mirror] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._building: set[str] = set()  # tables whose mirror a background thread is bringing up to date
        self._listing: set[str] = set()  # tables whose lists (ivf.py) a background thread is filling
        self._posting: set[str] = set()  # tables whose postings (filter_postings.py) a background thread is building
        self.built = threading.Event()  # set when a background build ends
        self.closed = False  # the index closed: no background work starts, none saves (close)

    def get(self, name: str, ds: Any) -> Mirror | None:
        """The mirror of table ``name`` at ``ds``'s version, or None while it is being built or
        brought up to date in the background (search LanceDB meanwhile): opened from its files the
        first time (in the background too when its manifest says it lacks more than ``SYNC_ROWS``
        rows: a crash mid-ingest), then refreshed here when at most ``SYNC_ROWS`` rows are new to it (a recorded
        batch, a forget), in a background thread when more are (a first build, another process's
        ingest, a compaction)."""
        with self._lock:
            if name in self._building:
                return None
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            mirror = self._mirrors.get(name)
            if mirror is None:
                folder = folder_of(self.index_path, name) if self.index_path is not None else None
                if folder is not None and (saved_behind(folder, ds) or 0) > SYNC_ROWS:
                    # the saved mirror is far behind (a crash mid-ingest, another process's ingest):
                    # opened in the background too, not in this search (~0.4 s at 1M rows)
                    self._start_build(name, ds, lock)
                    return None
                mirror = self._open(name)
            if mirror.coarse or mirror.behind(ds) > SYNC_ROWS:
                self._start_build(name, ds, lock)
                return None
            self._refresh(name, mirror, ds)
            self._extend_lists(name, mirror, lock)
            self._extend_postings(name, mirror, lock)
            return mirror

    def _open(self, name: str) -> Mirror:
        """The mirror of ``name`` from its files (an empty one if none are saved or they are not
        usable: removed, it is built again in their place), with its lists; held from now on."""
        folder = folder_of(self.index_path, name) if self.index_path is not None else None
        mirror = load(folder, self.dimensions) if folder is not None else None
        if mirror is None and folder is not None and self.writable:
            remove(str(self.index_path), name)
        mirror = mirror or Mirror(self.dimensions)
        if folder is not None and mirror.cols.n:
            mirror.lists = ivfs.load_ivf(folder, mirror.uid, self.dimensions, mirror.cols.n)
            if self.writable:
                ivfs.remove_graph(folder)
        self._mirrors[name] = mirror
        return mirror

    def _start_build(self, name: str, ds: Any, lock: threading.Lock) -> None:
        # (a failed build: searches go on through LanceDB; the next one retries)
        self._start_once(self._building, name, "building the mirror", lambda: self._build(name, ds, lock),
                         "worldgraph-index-mirror")

    def _extend_lists(self, name: str, mirror: Mirror, lock: threading.Lock) -> None:
        """Start assigning the rows the mirror's lists do not hold (or training new lists: none yet,
        or the table grew ``ivf.RETRAIN_GROWTH`` times since), then putting the saved codes in
        their order when due (``order_codes``), in the background (ivf.py)."""
        lists, n = mirror.lists, mirror.cols.n
        if n < ivfs.MIN_ROWS or (lists is not None and lists.covered >= n and not lists.stale(n)
                                 and not (self._orders() and order_due(mirror)
                                          and time.monotonic() - mirror.order_tried >= ORDER_RETRY_SECONDS)):
            return
        self._start_once(self._listing, name, "building the lists", lambda: self._fill(name, mirror, lock),
                         "worldgraph-index-lists")

    def _start_once(self, busy: set[str], name: str, what: str, work: Any, thread: str) -> None:
        """Run ``work()`` in a background thread unless one for table ``name`` is in ``busy``
        already or the index is closed; a failure is logged (searches go on without what it
        makes, the next one tries again), and its freed memory goes back to the system."""
        with self._lock:
            if name in busy or self.closed:
                return
            busy.add(name)

        def run() -> None:
            try:
                work()
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.warning("episode index: %s of %s failed (%s)", what, name, exc)
            finally:
                release_memory()
                with self._lock:
                    busy.discard(name)
                self.built.set()

        threading.Thread(target=run, daemon=True, name=thread).start()

    def _fill(self, name: str, mirror: Mirror, lock: threading.Lock) -> None:
        folder = folder_of(self.index_path, name) if self.index_path is not None and self.writable else None
        lists = mirror.lists
        if lists is None or lists.stale(mirror.cols.n):  # new lists, filled beside the old ones
            with lock:
                n = mirror.cols.n
                sample = mirror.cols.read("codes", ivfs.sample_rows(n, ivfs.lists_for(n)))
            lists = ivfs.build(sample, n)
        saved = lists.covered
        while True:
            with lock:  # only to copy the codes: searches and refreshes go on while they are assigned
                first, n = lists.covered, mirror.cols.n
                if first >= n or self.closed:
                    break
                codes = mirror.cols.read("codes", np.arange(first, min(first + ivfs.CHUNK, n)))
            lists.add(first, codes)
            if mirror.lists is None or (lists is not mirror.lists and n - lists.covered <= ivfs.TAIL_ROWS):
                mirror.lists = lists  # new lists take the old ones' place once they cover the table
            if folder is not None and lists is mirror.lists and lists.covered - saved >= ivfs.SAVE_ROWS:
                saved = self._save_lists(folder, lists, mirror.uid, lock, saved)
        if self.closed:
            return  # (the lists saved so far serve the next process)
        lists.compact()
        mirror.lists = lists
        if folder is not None and lists.covered > saved:
            self._save_lists(folder, lists, mirror.uid, lock, saved)
        if folder is not None and order_due(mirror):
            mirror.order_tried = time.monotonic()  # (not done: tried again at most this often)
            order_codes(mirror, folder, lock, lambda: self.closed)

    def _extend_postings(self, name: str, mirror: Mirror, lock: threading.Lock) -> None:
        """Start building the mirror's postings (filter_postings.py) in the background: none yet and it
        holds ``postings.MIN_ROWS`` rows, or it outgrew them."""
        held, n = mirror.postings, mirror.cols.n
        if n < postings.MIN_ROWS or (held is not None and not held.short(n)):
            return
        self._start_once(self._posting, name, "building the postings", lambda: self._post(mirror, lock),
                         "worldgraph-index-postings")

    def _post(self, mirror: Mirror, lock: threading.Lock) -> None:
        with lock:  # a snapshot of the columns' arrays (a save maps new ones; rows never change)
            covered = mirror.cols.n
            columns = {f: mirror.cols.segments(f) for f in postings.FIELDS}
        try:
            mirror.postings = postings.build(columns, covered, lambda: self.closed)
        except postings.Stopped:
            return
        for field in postings.FIELDS:
            mirror.cols.scanned(field)  # (every page of their maps was read)

    def _orders(self) -> bool:
        """Whether this object puts saved codes in list order (a local, writable index)."""
        return self.index_path is not None and self.writable

    def _save_lists(self, folder: Path, lists: Any, uid: str, lock: threading.Lock, saved: int) -> int:
        """Save the lists unless the index closed (under the table's lock, which ``close`` takes:
        nothing is written into the folder after it); returns the rows saved."""
        with lock:
            if self.closed:
                return saved
            folder.mkdir(parents=True, exist_ok=True)
            lists.save(folder, uid)
            return int(lists.covered)

    def _refresh(self, name: str, mirror: Mirror, ds: Any) -> None:
        """``mirror.refresh(ds)``, then a save when one is due (the caller holds the table's lock)."""
        mirror.refresh(ds)
        folder = folder_of(self.index_path, name) if self.index_path is not None else None
        if folder is not None and self.writable and not self.closed and due(mirror):
            folder.mkdir(parents=True, exist_ok=True)
            if not save(mirror, folder) and not current(folder, mirror):
                del self._mirrors[name]  # another process saved: reopen its state next time

    def _refresh_bounded(self, name: str, mirror: Mirror, ds: Any) -> None:
        """A build's refresh (many rows: from the table, or far behind it), holding at most
        ``build_rows`` new rows in memory: the folder's lock is held for the whole build, the rows
        are written to the field files every ``build_rows`` rows (past the manifest's count: not
        the saved state until the save at the end names them) and mapped from there. Without the
        lock (another process saves or builds), without a folder (an object store, a read-only
        index) or for a mirror whose residuals are not read yet: ``_refresh``, in memory."""
        folder = folder_of(self.index_path, name) if self.index_path is not None else None
        if folder is None or not self.writable or mirror.coarse:
            self._refresh(name, mirror, ds)
            return
        folder.mkdir(parents=True, exist_ok=True)
        with ExitStack() as held:
            try:
                held.enter_context(file_lock(folder / ".lock", timeout=0))
            except StorageError:
                self._refresh(name, mirror, ds)
                return
            if not current(folder, mirror):  # another process saved since it was opened
                del self._mirrors[name]  # its state is opened by the next search
                return

            def spill() -> None:
                if self.closed:  # nothing is written into the folder once close gave up waiting
                    raise BuildStopped("the index was closed during the mirror's build")
                write_rows(mirror, folder)

            mirror.refresh(ds, spill, self.build_rows)
            if not self.closed:
                save(mirror, folder, locked=True)

    def _build(self, name: str, ds: Any, lock: threading.Lock) -> None:
        try:
            with lock:
                mirror = self._mirrors.get(name) or self._open(name)
                if not self.closed:
                    if mirror.coarse:  # saved without residuals (format 1): read them, then save
                        mirror.refresh(ds)
                        mirror.fill_fine(ds)
                    self._refresh_bounded(name, mirror, ds)
        except BuildStopped:
            with self._lock:
                self._mirrors.pop(name, None)
        except Exception:  # (said by _start_once, which also gives its read buffers back: ~0.2 GB at 1M)
            with self._lock:
                self._mirrors.pop(name, None)
            raise

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no mirror is being built in the background; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._building and not self._listing and not self._posting:
                    return True
                self.built.clear()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self.built.wait(0.5 if left is None else min(left, 0.5))

    def held(self, name: str) -> Mirror | None:
        """The mirror of ``name`` this process holds (None: none yet)."""
        return self._mirrors.get(name)

    def close(self, deadline: float | None = None) -> bool:
        """No background build or fill starts from now on, and none saves; the running ones are
        waited for (a fill stops at its next chunk), then every changed mirror is saved, each
        under its table's lock, so nothing of this object writes into the folder afterwards.
        Past ``deadline`` (time.monotonic()) it stops waiting and saving: False, and a save
        already under way is left to the process's exit (the manifest is written last)."""
        with self._lock:
            self.closed = True
        done = self.wait(seconds_left(deadline)) and self.save_all(deadline)
        if done:  # a closed index's object may live on (its caller's): its mirrors' pages go back
            for mirror in list(self._mirrors.values()):
                mirror.cols.drop_maps()
        return done

    def save_all(self, deadline: float | None = None) -> bool:
        """Save every changed mirror (on close); False if ``deadline`` came first."""
        if self.index_path is None or not self.writable:
            return True
        for name, mirror in list(self._mirrors.items()):
            lock = self._locks[name]
            left = seconds_left(deadline)
            if not lock.acquire(timeout=-1 if left is None else left):
                return False
            try:
                if mirror.dirty:
                    folder = folder_of(self.index_path, name)
                    folder.mkdir(parents=True, exist_ok=True)
                    save(mirror, folder)
            finally:
                lock.release()
        return True

    def drop(self, name: str | None = None) -> None:
        """Forget the mirror of ``name`` (None: of every table), in memory and on disk (purge)."""
        with self._lock:
            if name is None:
                self._mirrors.clear()
            else:
                self._mirrors.pop(name, None)
        if self.index_path is not None and self.writable:
            remove(self.index_path, name)


def saved_behind(folder: Path, ds: Any) -> int | None:
    """Rows of ``ds``'s version that the mirror saved in ``folder`` does not hold, from its
    manifest (as ``Mirror.behind``: fragment metadata only, no file of the mirror read); None:
    none saved, or an unreadable manifest."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        if int(manifest["version"]) == ds.version:
            return 0
        held = {int(fid): tuple(entry[0]) for fid, entry in manifest["fragments"].items()}
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    return sum(int(frag.metadata.physical_rows) for frag in ds.get_fragments()
               if held.get(frag.fragment_id) != tuple(d.path for d in frag.data_files()))


def _saved_rows(folder: Path) -> int:
    try:
        return int(json.loads((folder / "manifest.json").read_text())["rows"])
    except (OSError, ValueError, KeyError):
        return 0


def current(folder: Path, mirror: Mirror) -> bool:
    """Whether the state saved in ``folder`` is the one ``mirror`` continues: as many rows, in
    the same codes' file (another process that put them in list order named a new one)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        rows, codes = int(manifest["rows"]), manifest.get("codes", "codes.bin")
    except (OSError, ValueError, KeyError, TypeError):
        return mirror.saved_rows == 0
    return rows == mirror.saved_rows and (rows == 0 or codes == mirror.cols.codes_name)


def order_due(mirror: Mirror) -> bool:
    """Whether the mirror's codes should be put in the order of its lists (``order_codes``): they
    are in another lists' order (or none), or the saved rows its lists hold past the ordered
    ones are more than 1 / ``ORDER_SLACK`` of those (read scattered, through the map)."""
    lists, cols = mirror.lists, mirror.cols
    if lists is None or mirror.coarse:
        return False
    held, least = min(int(lists.covered), cols.n_base), int(ivfs.MIN_ROWS)
    if cols.order_lists != lists.key:
        return held >= least
    return held - cols.ordered > max(least, cols.ordered // ORDER_SLACK)


def order_codes(mirror: Mirror, folder: Path, lock: threading.Lock, closed: Any = lambda: False) -> bool:
    """Put the saved codes in the order of the mirror's lists: a new codes' file with the rows the
    lists hold, list after list (each list's rows contiguous, ascending), then the other saved
    rows in arrival order, and each ordered row's place (``order-<token>.npy``, 4 bytes a row),
    saved with the rows held in memory and a manifest naming both (the old file is deleted; a
    process that mapped it reads on from its inode, then reopens: ``current``). A probe of 16
    lists then reads 16 runs of the file instead of rows spread over all of it (bench/README.md,
    "Codes in list order"). The codes are copied ``ORDER_CHUNK`` rows at a time, by ``os.pread``
    (nothing of either file mapped; a call per run of the old file, so per row from arrival
    order), holding the folder's lock (no process saves meanwhile) but not the table's
    (searches go on, from the old file). False: not done (the lock busy, the
    saved state not this mirror's, the index closed)."""
    written: Path | None = None
    try:
        with file_lock(folder / ".lock", timeout=0):
            with lock:
                cols, lists = mirror.cols, mirror.lists
                if lists is None or mirror.coarse or not current(folder, mirror) or not cols.n_base:
                    return False
                n, base, fh, old_slot = cols.n_base, cols.base["codes"], cols.files.get("codes"), cols.slot
                with lists.lock:
                    assign = lists.assign[:min(lists.covered, n)]
                key = lists.key
            if fh is None:
                return False
            place: np.ndarray = np.argsort(assign, kind="stable").astype(ivfs.row_dtype(n))  # new place -> row
            token = uuid.uuid4().hex[:12]
            written = folder / f"codes-{token}.bin"
            with open(written, "wb") as out:
                for start in range(0, n, ORDER_CHUNK):
                    if closed():
                        return False
                    end = min(start + ORDER_CHUNK, n)  # the ordered rows, then the rest in arrival order
                    rows = np.concatenate([place[start:end], np.arange(max(start, len(place)), end)])
                    old = rows.astype(np.int64)
                    if old_slot is not None:
                        inside = old < len(old_slot)
                        old[inside] = old_slot[old[inside]]
                    by_old = np.argsort(old, kind="stable")
                    codes = np.empty((len(rows), cols.dimensions), np.int8)
                    codes[by_old] = pread_rows(fh, base, old[by_old])  # (a call per run of the old file)
                    out.write(codes.tobytes())
            slot = np.empty(len(place), place.dtype)
            slot[place] = np.arange(len(place), dtype=place.dtype)
            order_name = f"order-{token}.npy"
            np.save(folder / order_name, slot)
            with lock:
                done = not closed() and cols.n_base == n and mirror.lists is lists \
                    and _save_locked(mirror, folder, (written.name, order_name, key, slot))
            if not done:
                (folder / order_name).unlink(missing_ok=True)
                return False
            written = None
            log.info("episode index: the codes of %d rows put in list order in %s", len(place), folder)
            return True
    except StorageError:
        return False
    finally:
        if written is not None:
            written.unlink(missing_ok=True)
