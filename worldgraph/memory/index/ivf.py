"""An inverted-file index (IVF) over a mirror's int8 codes: the ANN index of a big table.

Each mirror row belongs to the list of its nearest centroid (k-means over a sample of the codes);
a search scores the query against the centroids, takes the rows of the ``NPROBE`` nearest lists,
drops those the filter's mask rejects and ranks the rest exactly by their codes (mirror.py). Why
not the HNSW graph (``usearch``) this replaced, measured on the 1M bench store
(bench/README.md, "Filtered recall and ten million episodes"): the graph was built at 700-1,100
rows a CPU-second (2.5-4 CPU-hours at 10M, ~5 GB of memory while extended) and found the
filtered top 10 at recall 0.89-0.96 on wide filters; the lists are built at ~23k rows a
CPU-second with the recall of an exact search over the codes (16 of 1,024 lists probed), and
hold 4 bytes a row (the graph: ~700, a copy of the codes and its links). A filter is a mask
checked per row, so no filter needs anything of the index.

Its keys are mirror rows, which never change (a compaction moves a LanceDB row, not its mirror
row), so the lists are only ever extended: rows added to the mirror are assigned to their
nearest centroid in the background, and the rows not assigned yet (the tail) are searched
exactly beside them. Deleted rows stay in their list and are dropped by the mirror's live mask.
The centroids are trained once, from the rows the mirror holds then, with about ``sqrt(rows)``
lists; when the table has grown ``RETRAIN_GROWTH`` times since, new lists are trained and filled
in the background while the old ones go on answering.

Saved beside the mirror (``ivf.npz`` then ``ivf.json``, which names the mirror it belongs to by
the mirror's ``uid`` and how many of its rows the lists hold); lists of another mirror (rebuilt
after its files were lost) are dropped.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import zlib
from pathlib import Path

import numpy as np

from worldgraph.filemodes import tighten

log = logging.getLogger("worldgraph.memory.index.episode_index")

CHUNK = 20_000  # rows assigned at a time (the mirror's lock is held only to copy their codes)
MIN_ROWS = 20_000  # a mirror with fewer rows than this is searched without lists
TAIL_ROWS = 50_000  # rows outside the lists searched exactly beside them (more: the lists are not used)
SAVE_ROWS = 200_000  # lists being filled are saved after this many rows (and when they are done)
NPROBE = 16  # lists a search takes the rows of (more when too few of their rows pass a filter)
SHARE_SLACK = 0.8  # lists whose rows pass a filter at 0.8 of its share are taken as unrelated to it
MIN_PASSING = 10  # a search takes lists until at least this many times the rows it ranks pass
MAX_LISTS = 4_096
SAMPLE_PER_LIST = 32  # training rows per list (k-means on a sample)
ITERATIONS = 10
RETRAIN_GROWTH = 4  # new lists once the mirror holds this many times the rows they were trained on
ASSIGN_BLOCK = 4_096  # rows scored against every centroid at once (4,096 x 4,096 dots: 64 MB)


def row_dtype(rows: int) -> type:
    """The narrowest of int32 and int64 that holds mirror rows ``0 .. rows - 1``."""
    return np.int32 if rows <= np.iinfo(np.int32).max else np.int64


def lists_for(rows: int) -> int:
    """How many lists for ``rows`` rows: the power of two nearest sqrt(rows), 16 to ``MAX_LISTS``."""
    return int(min(MAX_LISTS, max(16, 2 ** round(math.log2(max(rows, 1)) / 2))))


def _unit(codes: np.ndarray) -> np.ndarray:
    x = codes.astype(np.float32)
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-9)
    return x


def _nearest(x: np.ndarray, centroids: np.ndarray) -> np.ndarray:
    """The nearest centroid (unit rows) of each unit row of ``x``, a block at a time."""
    out = np.empty(len(x), np.int32)
    for start in range(0, len(x), ASSIGN_BLOCK):
        out[start:start + ASSIGN_BLOCK] = np.argmax(x[start:start + ASSIGN_BLOCK] @ centroids.T, axis=1)
    return out


def train(sample: np.ndarray, nlist: int, seed: int = 0) -> np.ndarray:
    """Unit centroids (float32) of ``nlist`` lists by spherical k-means over int8 ``sample`` codes."""
    rng = np.random.default_rng(seed)
    x = _unit(sample)
    nlist = max(1, min(nlist, len(x)))
    centroids = x[rng.choice(len(x), nlist, replace=False)].copy()
    for _ in range(ITERATIONS):
        assign = _nearest(x, centroids)
        sums = np.zeros_like(centroids)
        np.add.at(sums, assign, x)
        empty = np.bincount(assign, minlength=nlist) == 0
        sums[empty] = x[rng.choice(len(x), int(empty.sum()), replace=False)]  # an empty list restarts
        centroids = sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-9)
    out: np.ndarray = centroids.astype(np.float32)
    return out


class Ivf:
    """The lists of one mirror's codes (keys: mirror rows ``[0, covered)``)."""

    def __init__(self, centroids: np.ndarray, trained_rows: int, assign: np.ndarray | None = None) -> None:
        self.centroids = np.ascontiguousarray(centroids, np.float32)
        self.trained_rows = trained_rows
        # names the centroids: codes put in list order by other lists are not in this one's order
        self.key = f"{zlib.crc32(self.centroids.tobytes()):08x}-{len(self.centroids)}"
        self.assign = np.zeros(0, np.int32) if assign is None else np.asarray(assign, np.int32)
        self.covered = len(self.assign)
        self.lock = threading.Lock()  # one writer; searches read a consistent state
        self._order, self._offsets = self._postings(self.assign)
        self._pending: list[np.ndarray] = []  # rows assigned since the postings were made (their rows)

    def _postings(self, assign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of each list, list after list, and where each list starts (CSR). Rows as
        int32 while they fit (4 bytes a row, not 8: 40 MB at 10M rows). The list numbers are
        sorted as uint16 (at most 4,096 lists): numpy's stable sort of 16-bit keys is a radix
        sort, linear in the rows (10M rows: ~0.4 against ~1.4 s as int32, a cold start's first
        search at 10M waits for it; bench/README.md, "Cold start at 10M: the lists' postings")."""
        keys = assign.astype(np.uint16) if len(self.centroids) <= 1 << 16 else assign
        order: np.ndarray = np.argsort(keys, kind="stable").astype(row_dtype(len(assign)))
        offsets = np.concatenate([[0], np.cumsum(np.bincount(assign, minlength=len(self.centroids)))])
        return order, offsets.astype(np.int64)

    @property
    def nlist(self) -> int:
        return len(self.centroids)

    def stale(self, rows: int) -> bool:
        """Whether a mirror of ``rows`` rows should get new lists (it grew ``RETRAIN_GROWTH`` times)."""
        return rows >= self.trained_rows * RETRAIN_GROWTH and lists_for(rows) > self.nlist

    def add(self, first: int, codes: np.ndarray) -> None:
        """Assign the codes of mirror rows ``first, first + 1, ...`` (``first`` must be ``covered``)."""
        lists = _nearest(_unit(codes), self.centroids)
        with self.lock:
            if first != self.covered:
                return
            self.assign = np.concatenate([self.assign, lists])
            self.covered = first + len(codes)
            self._pending.append(np.arange(first, self.covered, dtype=np.int64))
            if sum(len(p) for p in self._pending) > max(CHUNK * 4, self.covered // 32):
                self._merge()

    def _merge(self) -> None:
        """Make the postings anew with the rows assigned since (the caller holds the lock)."""
        self._order, self._offsets = self._postings(self.assign)
        self._pending = []

    def compact(self) -> None:
        """Merge the rows assigned since the postings were made (once the lists cover the mirror)."""
        with self.lock:
            if self._pending:
                self._merge()

    def ranked(self, q: np.ndarray) -> np.ndarray:
        """Every list, nearest centroid to the float query ``q`` first."""
        scores = self.centroids @ (np.asarray(q, np.float32) / (float(np.linalg.norm(q)) or 1.0))
        order: np.ndarray = np.argsort(-scores, kind="stable")
        return order

    def rows_in(self, lists: np.ndarray) -> np.ndarray:
        """Mirror rows of ``lists`` (list ids)."""
        with self.lock:
            order, offsets, pending, assign = self._order, self._offsets, list(self._pending), self.assign
        parts = [order[offsets[x]:offsets[x + 1]] for x in lists.tolist()]
        if pending:
            rows = np.concatenate(pending)
            parts.append(rows[np.isin(assign[rows], lists)])
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def probe(self, q: np.ndarray, nprobe: int) -> np.ndarray:
        """Mirror rows of the ``nprobe`` lists whose centroids are nearest the float query ``q``."""
        return self.rows_in(self.ranked(q)[:nprobe])

    def save(self, folder: Path, uid: str) -> None:
        """``ivf.npz`` then ``ivf.json`` (each replaced atomically): a killed save leaves the previous
        pair, or a newer lists file that holds at least the rows the old json names."""
        with self.lock:
            assign, centroids, covered = self.assign[:self.covered], self.centroids, self.covered
        tmp = folder / f".ivf.{os.getpid()}.tmp.npz"
        np.savez(tmp, centroids=centroids, assign=assign, trained_rows=np.int64(self.trained_rows))
        os.replace(tmp, folder / "ivf.npz")
        meta = folder / f".ivf-json.{os.getpid()}.tmp"
        meta.write_text(json.dumps({"mirror": uid, "covered": covered}))
        os.replace(meta, folder / "ivf.json")
        tighten(folder)


def load_ivf(folder: Path, uid: str, dimensions: int, rows: int) -> Ivf | None:
    """The saved lists of the mirror ``uid`` (None: none, another mirror's, or unreadable)."""
    try:
        meta = json.loads((folder / "ivf.json").read_text())
        if meta.get("mirror") != uid:
            return None
        with np.load(folder / "ivf.npz") as data:
            centroids, assign, trained = data["centroids"], data["assign"], int(data["trained_rows"])
        covered = int(meta["covered"])
        if centroids.ndim != 2 or centroids.shape[1] != dimensions or len(assign) < covered or covered > rows:
            return None
        if len(assign) and (assign.min() < 0 or assign.max() >= len(centroids)):
            raise ValueError("a row's list is out of range")
        return Ivf(centroids, trained, assign[:covered])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        if not isinstance(exc, FileNotFoundError):
            log.warning("episode index: the saved lists in %s are not usable (%s); they are built again", folder, exc)
        return None


def remove_graph(folder: Path) -> None:
    """Delete the HNSW graph files an earlier version saved beside the mirror (``graph.usearch``,
    ``graph.json``): the lists replace them."""
    for name in ("graph.usearch", "graph.json"):
        (folder / name).unlink(missing_ok=True)


def build(sample: np.ndarray, rows: int) -> Ivf:
    """New, empty lists trained on int8 ``sample`` codes for a mirror of ``rows`` rows."""
    nlist = lists_for(rows)
    return Ivf(train(sample, nlist), rows)


def sample_rows(rows: int, nlist: int, seed: int = 0) -> np.ndarray:
    """Sorted mirror rows to train ``nlist`` lists on (``SAMPLE_PER_LIST`` each, at most every row)."""
    want = min(rows, nlist * SAMPLE_PER_LIST)
    return np.sort(np.random.default_rng(seed).choice(rows, want, replace=False)).astype(np.int64)

