"""The rows of a mirror (mirror.py), field by field: the hashes of its filter values, timestamps,
success flags, int8 codes and their residuals (codes.py), episode ids and row addresses, as a
saved base (memory-mapped files, mirror_files.py) and an in-memory tail of the rows added since."""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import struct
import threading
import weakref
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SMALL_SET = 16  # a value set this small is compared value by value (np.isin sorts)
NO_RESIDUAL = 0x88  # two residuals of 0 (a mirror saved before residuals, until they are read)


def value_hashes(values: pa.Array) -> np.ndarray:
    """A 64-bit hash (blake2b) of each string of ``values``; missing values and "" hash to 0.
    Each distinct value is hashed once (a column holds a few hundred distinct values)."""
    encoded = pc.dictionary_encode(values.cast(pa.string()) if values.type != pa.string() else values)
    if isinstance(encoded, pa.ChunkedArray):
        encoded = encoded.combine_chunks()
    hashed = np.array([hash_value(v) for v in encoded.dictionary.to_pylist()] + [0], dtype=np.uint64)
    idx = encoded.indices.to_numpy(zero_copy_only=False)
    idx = np.where(np.isnan(idx.astype(np.float64)), len(hashed) - 1, idx).astype(np.int64) \
        if encoded.indices.null_count else idx.astype(np.int64)
    out: np.ndarray = hashed[idx]
    return out


FNV_OFFSET, FNV_PRIME = np.uint64(0xCBF29CE484222325), np.uint64(0x100000001B3)


def id_hashes(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each episode id, vectorised with numpy (~1 ms for 10k ids, where
    ``value_hashes`` calls blake2b once per value: 30 ms): the ids of each length as a matrix of
    8-byte words (zero-padded), mixed word by word (multiply, xor-shift: splitmix64's finish),
    with the length mixed in."""
    arr = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    arr = arr.cast(pa.large_string())
    n = len(arr)
    out = np.zeros(n, np.uint64)
    if not n:
        return out
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + n + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] is not None else np.zeros(0, np.uint8)
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        for length in np.unique(lengths).tolist():
            rows = np.flatnonzero(lengths == length)
            width = -(-length // 8) * 8
            block = np.zeros((len(rows), max(width, 8)), np.uint8)
            if length:
                block[:, :length] = data[offsets[rows][:, None] + np.arange(length)]
            words = block.view(np.uint64)
            h = np.full(len(rows), FNV_OFFSET ^ np.uint64(length), np.uint64)
            for w in range(words.shape[1]):
                h = _mix((h ^ words[:, w]) * FNV_PRIME)
            out[rows] = h
    return out


def _mix(h: np.ndarray) -> np.ndarray:
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: np.ndarray = h ^ (h >> np.uint64(31))
    return out


def hash_value(value: str | None) -> int:
    """The 64-bit hash of one filter value (0 for a missing value)."""
    if not value:
        return 0
    return int.from_bytes(hashlib.blake2b(value.encode("utf-8"), digest_size=8).digest(), "little") or 1


def row_shape(field: str, n: int, dimensions: int) -> tuple[int, ...]:
    """The shape of ``n`` rows of ``field``: a code per dimension, a residual byte per two, else one value."""
    if field == "codes":
        return (n, dimensions)
    if field == "fine":
        return (n, (dimensions + 1) // 2)
    return (n,)


def one_of(column: np.ndarray, values: list[int]) -> np.ndarray:
    """Whether each entry of ``column`` is one of ``values``."""
    if len(values) > SMALL_SET:
        return np.isin(column, np.array(values, np.uint64))
    out = np.zeros(len(column), bool)
    for v in set(values):
        out |= column == np.uint64(v)
    return out


# the per-row fields of a mirror, their types and, for codes, the width (the vector size); eid:
# the hash of the row's episode id (id_hashes), what an episode-id filter is looked up in
FIELDS: dict[str, Any] = {"codes": np.int8, "role": np.uint64, "agent": np.uint64, "canvas": np.uint64,
                          "ts": np.float64, "ok": np.bool_, "norms": np.float32, "fine": np.uint8,
                          "eid": np.uint64}
# bytes of the mirrors' files a process's searches may hold mapped, every mirror's every file together
# (codes, filter columns, norms, id hashes): once the pages they read through the maps (an estimate,
# ``touched``) pass it, the biggest holders' pages are dropped (``MADV_DONTNEED``: they
# stay in the page cache) until half of it is held. A page read through a map stays resident in the
# process, with the pages the kernel maps around it (64 KB, up to a 2 MB folio): at 10M rows the
# searches left 3.7 GB of codes and 0.4 GB of id files mapped (bench/README.md, "Resident memory of
# the recalling process at 10M"). 1M rows hold ~0.45 GB of such files: never dropped there.
MAPPED_BYTES = 1 << 30
FAULT_BYTES = 64 << 10  # what a read through a map maps at least around a row it touches (fault-around)
# rows of a block of codes per FAULT_BYTES of codes' file below which a scan reads them by pread
# (a narrow filter's rows, scattered over the codes in list order), when that file is bigger than
# half of MAPPED_BYTES: mapped, each such row maps 64 KB (8k rows: ~0.5 GB per search at 10M, or
# all 3.84 GB with 2 MB folios), and costs ~5 us of faults plus ~3 us to drop against ~2.4 us read
DENSE_ROWS = 4
ID_READ_ROWS = 4_096  # at most this many ids are read by pread (a search's results), more through the maps
RESORT_ROWS = 50_000  # rows appended past the sorted hashes that make the next lookup sort them again


class Columns:
    """The mirror's rows, field by field: a saved base (memory-mapped files, mirror_files.py) and an
    in-memory tail of the rows added since (growable)."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.base: dict[str, np.ndarray] = {f: self._empty(f, 0) for f in FIELDS}
        self.n_base = 0
        self.tail: dict[str, np.ndarray] = {f: self._empty(f, 0) for f in FIELDS}
        self.n_tail = 0
        self.addr = np.zeros(0, np.int64)  # each row's address in the mirror's version (-1: gone)
        self.ids: list[pa.Array] = []  # episode ids, in chunks (the base's first, from their files)
        self.id_starts: list[int] = []
        self.saved_ids = 0  # chunks of ids already in files
        self.by_eid: tuple[np.ndarray, np.ndarray] | None = None  # (eid sorted, their rows) of the first rows
        self.files: dict[str, Any] = {}  # field -> its base's file, open (``read``: the map's file, not the path's)
        # the codes in list order (mirror_files.order_codes): the base's first rows have their codes
        # at a place of their own in codes' file, ``slot[row]`` (int32), each list's rows contiguous;
        # the rows past them at their own row (the arrival order). None: every row at its own row.
        self.slot: np.ndarray | None = None
        self.codes_name = "codes.bin"  # codes' file in the mirror's folder (a new one each time they are ordered)
        self.order_name: str | None = None  # the file ``slot`` is saved in
        self.order_lists: str | None = None  # the key (ivf.Ivf.key) of the lists whose order ``slot`` is
        self.held: dict[str, int] = {}  # field -> bytes of its base's map read through it since its last drop (estimate)
        self.id_files: dict[int, IdFile] = {}  # chunk of ``ids`` -> its file, read by pread (saved chunks)

    def _empty(self, field: str, n: int) -> np.ndarray:
        return np.zeros(row_shape(field, n, self.dimensions), FIELDS[field])

    @property
    def n(self) -> int:
        return self.n_base + self.n_tail

    @property
    def ordered(self) -> int:
        """The base's first rows whose codes are in list order (``slot``)."""
        return 0 if self.slot is None else len(self.slot)

    def slots(self, rows: np.ndarray) -> np.ndarray:
        """Where the codes of base ``rows`` are in codes' file (``slot``; the row itself past the
        ordered rows)."""
        rows = np.asarray(rows, np.int64)
        if self.slot is None or not len(rows):
            return rows
        out: np.ndarray = rows.copy()
        inside = rows < len(self.slot)
        out[inside] = self.slot[rows[inside]]
        return out

    def take(self, field: str, rows: np.ndarray) -> np.ndarray:
        """``field`` of mirror ``rows`` (``ndarray.take`` on a plain view of the memory map: 3x
        faster than indexing the map for 16k rows of codes, and faster still for sorted rows;
        the codes of the base's rows at their ``slots``). The pages it maps count against
        ``MAPPED_BYTES``."""
        rows = np.asarray(rows, np.int64)
        if not self.n_tail:
            at = self.slots(rows) if field == "codes" else rows
            out = _take(self.base[field], at)
            self._map_read(field, at)
            return out
        if not self.n_base:
            return _take(self.tail[field], rows)
        inside = rows < self.n_base
        out = np.empty((len(rows), *self.base[field].shape[1:]), FIELDS[field])
        at = self.slots(rows[inside]) if field == "codes" else rows[inside]
        out[inside] = _take(self.base[field], at)
        out[~inside] = _take(self.tail[field], rows[~inside] - self.n_base)
        self._map_read(field, at)
        return out

    def read(self, field: str, rows: np.ndarray) -> np.ndarray:
        """``field`` of mirror ``rows``, like ``take``, but the base's rows read from its file
        (``os.pread``) instead of through its memory map:
        for reads of rows scattered over the table that no search needs resident, the residuals
        of a search's final rows and the codes the lists are trained on and filled from. A page
        read through the map stays in the process's resident memory, with the 15 pages the
        kernel maps around it (fault-around: 64 KB for one row of 192 bytes); 1M rows: 200
        recalls left every page of the residuals' file resident (183 MB, 192 bytes a row;
        bench/README.md, "What a recalling process holds"). The base without an open file (in
        memory: a format-1 mirror's residuals): ``take``."""
        fh = self.files.get(field)
        if fh is None or not self.n_base:
            return self.take(field, rows)
        rows = np.asarray(rows, np.int64)
        inside = rows < self.n_base
        base = self.base[field]
        out = np.empty((len(rows), *base.shape[1:]), FIELDS[field])
        if inside.any():
            out[inside] = pread_rows(fh, base, self.slots(rows[inside]) if field == "codes" else rows[inside])
        if not inside.all():
            out[~inside] = _take(self.tail[field], rows[~inside] - self.n_base)
        return out

    def codes(self, rows: np.ndarray) -> np.ndarray:
        """The codes of ``rows`` for a scan: through the map (``take``, its pages counted against
        ``MAPPED_BYTES``) when they are dense in codes' file (a probe's lists: runs of the codes in
        list order) or that file is at most half of ``MAPPED_BYTES``; else (a narrow filter's
        rows, scattered over a big file: fewer than ``DENSE_ROWS`` per 64 KB) read by ``os.pread``,
        which maps nothing."""
        rows = np.asarray(rows, np.int64)
        base = self.base["codes"]
        if self.files.get("codes") is None or not self.n_base or base.nbytes <= MAPPED_BYTES // 2:
            return self.take("codes", rows)
        at = self.slots(rows[rows < self.n_base])
        if len(at) >= DENSE_ROWS * touched(at, base.itemsize * self.dimensions) // FAULT_BYTES:
            return self.take("codes", rows)
        return self.read("codes", rows)

    def segments(self, field: str) -> list[np.ndarray]:
        """``field`` of every row, as the base's and the tail's arrays (a mask is made segment by
        segment); a caller that reads the base's every row says so after (``scanned``)."""
        return [self.base[field][:self.n_base], self.tail[field][:self.n_tail]]

    def scanned(self, field: str) -> None:
        """Every row of the base's map of ``field`` was read: all of it counts against ``MAPPED_BYTES``."""
        self._map_read(field, None)

    def _map_read(self, field: str, at: np.ndarray | None) -> None:
        """Count the pages of the base's map of ``field`` that reading its rows ``at`` (None:
        every row) mapped, and drop pages if the process's mirrors now hold more than
        ``MAPPED_BYTES``."""
        base = self.base[field]
        if getattr(base, "_mmap", None) is None or (at is not None and not len(at)):
            return
        full = int(base.nbytes)
        counted = self.held.get(field, 0) >= full  # every page counted already
        more = 0 if counted or at is None else touched(at, full // max(len(base), 1))
        with _MAPPED.lock:
            self.held[field] = full if at is None else min(full, self.held.get(field, 0) + more)
            _MAPPED.owners.add(self)
            over = _MAPPED.total() > MAPPED_BYTES
        if over:
            _MAPPED.shrink()

    def drop_maps(self, field: str | None = None) -> None:
        """``MADV_DONTNEED`` every page of the base's maps (of ``field`` only if given): they stay
        in the page cache; a read maps them again."""
        for name in list(FIELDS) if field is None else [field]:
            held = getattr(self.base.get(name), "_mmap", None)
            with _MAPPED.lock:
                self.held.pop(name, None)
            if held is None:
                continue
            try:
                held.madvise(mmap.MADV_DONTNEED, 0, len(held))
            except (OSError, ValueError):  # a map closed meanwhile (a save mapped the files anew)
                pass

    def put(self, field: str, rows: np.ndarray, values: np.ndarray) -> None:
        """Set ``field`` of mirror ``rows`` (the base's array must be writable: in memory)."""
        inside = rows < self.n_base
        self.base[field][rows[inside]] = values[inside]
        self.tail[field][rows[~inside] - self.n_base] = values[~inside]

    def set_base(self, base: dict[str, np.ndarray], n: int, files: dict[str, Any] | None = None,
                 slot: np.ndarray | None = None) -> None:
        """The saved rows, memory-mapped (the tail must be empty or just saved), the files
        ``read`` reads some of them from (opened with the maps: a file replaced by a rebuild
        elsewhere is not read in their place; closed once no map and no reader holds them), and
        where the codes of the first rows are in codes' file (``slot``; None: in row order)."""
        with _MAPPED.lock:  # new maps: none of their pages read yet
            self.held = {}
        self.base, self.n_base, self.files, self.slot = base, n, dict(files or {}), slot
        self.tail, self.n_tail = {f: self._empty(f, 0) for f in FIELDS}, 0
        if len(self.addr) < n:
            addr = np.full(n, -1, np.int64)
            addr[:len(self.addr)] = self.addr
            self.addr = addr

    def _grow(self, need: int) -> None:
        cap = len(self.tail["ts"])
        if need > cap:
            new = max(need, cap * 2, 1024)
            for field, old in self.tail.items():
                arr = self._empty(field, new)
                arr[:self.n_tail] = old[:self.n_tail]
                self.tail[field] = arr
        if len(self.addr) < self.n_base + need:
            addr = np.full(max(self.n_base + need, len(self.addr) * 2), -1, np.int64)
            addr[:len(self.addr)] = self.addr
            self.addr = addr

    def append(self, tbl: pa.Table, codes: np.ndarray, fine: np.ndarray, addrs: np.ndarray) -> np.ndarray:
        """Append rows (filter columns of ``tbl``, their codes, residuals and addresses); returns
        their mirror rows."""
        m = tbl.num_rows
        self._grow(self.n_tail + m)
        t, a, b = self.tail, self.n_tail, self.n_tail + m
        t["role"][a:b] = value_hashes(tbl.column("agent_role"))
        t["agent"][a:b] = value_hashes(tbl.column("agent_id"))
        t["canvas"][a:b] = value_hashes(tbl.column("canvas_id"))
        t["ts"][a:b] = tbl.column("timestamp").to_numpy(zero_copy_only=False)
        t["ok"][a:b] = tbl.column("success").fill_null(False).to_numpy(zero_copy_only=False)
        t["eid"][a:b] = id_hashes(tbl.column("episode_id"))
        t["codes"][a:b] = codes
        t["fine"][a:b] = fine
        c = codes.astype(np.float32)
        t["norms"][a:b] = np.sqrt(np.einsum("ij,ij->i", c, c))
        first = self.n
        self.addr[first:first + m] = addrs
        self.ids.append(tbl.column("episode_id").combine_chunks())
        self.id_starts.append(first)
        self.n_tail = b
        return np.arange(first, first + m, dtype=np.int64)

    def rows_with_ids(self, hashes: np.ndarray) -> np.ndarray:
        """Mirror rows (live or gone) whose ``eid`` is one of ``hashes``: binary searches in the
        hashes sorted once (~0.1 s at 1M rows; again once ``RESORT_ROWS`` rows were added past
        them), plus a pass over the rows added since."""
        n = self.n
        if self.by_eid is None or n - len(self.by_eid[0]) > RESORT_ROWS:
            every = np.concatenate(self.segments("eid"))
            self.scanned("eid")
            order = np.argsort(every, kind="stable")
            # their rows as int32 while they fit (12 bytes a row, not 16)
            self.by_eid = (every[order], order.astype(np.int32 if n <= np.iinfo(np.int32).max else np.int64))
        keys, rows = self.by_eid
        wanted = np.unique(np.asarray(hashes, np.uint64))
        lo, hi = np.searchsorted(keys, wanted, "left"), np.searchsorted(keys, wanted, "right")
        counts = hi - lo
        total = int(counts.sum())
        firsts = np.repeat(lo, counts) + (np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts))
        newer = np.arange(len(keys), n, dtype=np.int64)
        newer = newer[np.isin(self.take("eid", newer), wanted)] if len(newer) else newer
        return np.concatenate([rows[firsts], newer])

    def episode_ids(self, rows: np.ndarray) -> list[str]:
        """The episode ids of mirror ``rows``: a few (a search's results, at most ``ID_READ_ROWS``)
        read from their id files by ``os.pread``, which maps nothing (read through the maps, a
        search's ~100 scattered ids mapped 64 KB to 2 MB each: every page of the id files after
        a few hundred recalls, 0.4 GB at 10M rows); more through the maps (a compaction's moved rows)."""
        starts = np.asarray(self.id_starts)
        chunk = np.searchsorted(starts, rows, side="right") - 1
        few = len(rows) <= ID_READ_ROWS
        out = []
        for c, r in zip(chunk.tolist(), rows.tolist()):
            at = int(r) - self.id_starts[c]
            reader = self.id_files.get(c) if few else None
            out.append(reader.id(at) if reader is not None else self.ids[c][at].as_py())
        return out

    def set_ids(self, chunk: int, ids: pa.Array, reader: IdFile | None) -> None:
        """Chunk ``chunk`` of the ids (appended if it is the next one), mapped from its file, and
        what reads single ids of it from that file (None: none)."""
        if chunk == len(self.ids):
            self.ids.append(ids)
        else:
            self.ids[chunk] = ids
        if reader is None:
            self.id_files.pop(chunk, None)
        else:
            self.id_files[chunk] = reader

    def same_filters(self, rows: np.ndarray, tbl: pa.Table) -> np.ndarray:
        """Whether mirror ``rows`` have the filter columns of the rows of ``tbl`` (one each)."""
        same: np.ndarray = ((self.take("role", rows) == value_hashes(tbl.column("agent_role")))
                            & (self.take("agent", rows) == value_hashes(tbl.column("agent_id")))
                            & (self.take("canvas", rows) == value_hashes(tbl.column("canvas_id")))
                            & (self.take("ts", rows) == tbl.column("timestamp").to_numpy(zero_copy_only=False))
                            & (self.take("ok", rows)
                               == tbl.column("success").fill_null(False).to_numpy(zero_copy_only=False)))
        return same


def pread_rows(fh: Any, base: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of the memory-mapped ``base`` read from its open file ``fh`` by ``pread``:
    one call for each run of consecutive rows (the lists' fill, a copy of codes put in list
    order), so one per row for scattered rows (~2.2 us a row: a narrow filter's 8k rows in
    ~18 ms, a search's final 220 in ~0.5 ms)."""
    width = base.itemsize * int(np.prod(base.shape[1:], dtype=np.int64))
    fd, start = fh.fileno(), int(getattr(base, "offset", 0))  # (np.memmap: where its rows start in the file)
    rows = np.asarray(rows, np.int64)
    out: np.ndarray = np.empty((len(rows), *base.shape[1:]), base.dtype)
    if not len(rows):
        return out
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    firsts = np.concatenate([[0], breaks]).astype(np.int64)
    sizes = (np.diff(np.concatenate([firsts, [len(rows)]])) * width).tolist()
    places = (rows[firsts] * width + start).tolist()
    into = (firsts * width).tolist()
    read_into(fd, out, into, sizes, places, fh.name)
    return out


# libc's pread called without releasing the GIL (``ctypes.PyDLL``): a read from the page cache
# takes ~1 us; ``os.pread`` releases the GIL for it, and a thread that does thousands of them
# (a narrow filter's codes, a search's ids) beside a busy thread (recall's text search) waited
# for the GIL after each (up to the 5 ms switch interval): 2-3x the wall time of the same CPU at
# 10M. Reads bigger than SMALL_READ release the GIL (os.preadv). None: no such libc (os.pread).
SMALL_READ = 64 << 10
_pread: Any = None
try:
    _pread = ctypes.PyDLL(None, use_errno=True).pread
    _pread.restype, _pread.argtypes = ctypes.c_ssize_t, [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t,
                                                        ctypes.c_longlong]
except (OSError, AttributeError):  # pragma: no cover - not a POSIX libc
    _pread = None


def read_into(fd: int, out: np.ndarray, into: list[int], sizes: list[int], places: list[int], name: str) -> None:
    """Read ``sizes[i]`` bytes of file ``fd`` at ``places[i]`` into the bytes of ``out`` (C-contiguous)
    at ``into[i]``, for each i."""
    address = out.ctypes.data
    for at, size, place in zip(into, sizes, places):
        if _pread is not None and size <= SMALL_READ:
            got = _pread(fd, address + at, size, place)
            if got < 0:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err), name)
        else:
            got = os.preadv(fd, [out.data.cast("B")[at:at + size]], place)
        if got != size:
            raise OSError(f"{name}: {got} of {size} bytes read")


def _take(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.asarray(values).take(rows, axis=0)
    return out


def touched(at: np.ndarray, width: int) -> int:
    """Bytes a read of rows ``at`` (``width`` bytes each) through a map maps at least: each
    ``FAULT_BYTES`` chunk of the file it touches (counted by runs: exact for rows in order, more
    for rows out of order)."""
    if not len(at):
        return 0
    chunks = (np.asarray(at, np.int64) * width) >> (FAULT_BYTES.bit_length() - 1)
    return (1 + int(np.count_nonzero(chunks[1:] != chunks[:-1]))) * FAULT_BYTES


class _Mapped:
    """The pages of mirror files that the process's searches read through maps (``Columns.held``
    of every ``Columns`` that holds some), and their drop past ``MAPPED_BYTES``."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.owners: weakref.WeakSet[Columns] = weakref.WeakSet()

    def total(self) -> int:
        with self.lock:
            return sum(sum(cols.held.values()) for cols in list(self.owners))

    def shrink(self) -> None:
        """Drop the pages of the biggest holders (a field of a mirror) until at most half of
        ``MAPPED_BYTES`` is held."""
        with self.lock:
            holders = sorted(((held, id(cols), cols, field) for cols in list(self.owners)
                              for field, held in cols.held.items() if held), key=lambda h: -h[0])
            total = sum(h[0] for h in holders)
            for held, _, cols, field in holders:
                if total <= MAPPED_BYTES // 2:
                    break
                cols.drop_maps(field)
                total -= held


_MAPPED = _Mapped()


class IdFile:
    """Single ids of an id file (Arrow IPC, one string column; mirror_files.py) read by ``os.pread``:
    the column's offsets and its bytes, where the file holds them."""

    __slots__ = ("fh", "offsets_at", "data_at", "first", "rows", "fmt")

    def __init__(self, fh: Any, offsets_at: int, data_at: int, first: int, rows: int, large: bool) -> None:
        self.fh, self.offsets_at, self.data_at, self.first, self.rows = fh, offsets_at, data_at, first, rows
        self.fmt = struct.Struct("<qq" if large else "<ii")

    def id(self, at: int) -> str:
        """The id of row ``at`` of the file's column (~4 us: two reads of the page cache)."""
        fd, fmt = self.fh.fileno(), self.fmt
        if not 0 <= at < self.rows:
            raise IndexError(f"{self.fh.name}: row {at} of {self.rows}")
        place = self.offsets_at + (self.first + at) * (fmt.size // 2)
        if _pread is None:  # pragma: no cover - not a POSIX libc
            start, end = fmt.unpack(os.pread(fd, fmt.size, place))
            return os.pread(fd, end - start, self.data_at + start).decode("utf-8")
        pair = ctypes.create_string_buffer(fmt.size)
        if _pread(fd, ctypes.addressof(pair), fmt.size, place) != fmt.size:
            raise OSError(f"{self.fh.name}: the offsets of row {at} not read")
        start, end = fmt.unpack(pair.raw)
        data = ctypes.create_string_buffer(max(end - start, 1))
        if end > start and _pread(fd, ctypes.addressof(data), end - start, self.data_at + start) != end - start:
            raise OSError(f"{self.fh.name}: the id of row {at} not read")
        return data.raw[:end - start].decode("utf-8")
