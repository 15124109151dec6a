"""Small tenants searched in process: exact cosine over a cached matrix and BM25 over cached terms.

A recall on a table of a few hundred or thousand rows spent most of its ~20 ms of CPU in two
LanceDB queries (vector ~7 ms and full-text ~9 ms at 2k rows: planning, reading each fragment,
and a flat full-text scan of the rows written since the text index was last folded). Below
``SMALL_TABLE_ROWS`` rows the table is read once into memory instead and both searches run over
that copy (well under a millisecond each). The copy belongs to one version of the table:
``IndexTables``' ``latest_dataset`` already looks up the newest version (this process's or
another's commits, on local disk or an object store) before every search, and a new version
means a new copy, so a search never sees stale rows. Appends, the common write, are folded into
the copy by reading only the new fragments; anything else (a merge-insert, a delete, a
compaction) reads the table again.

A table with an ANN index (built from ``ann_index_min_rows``, 10,000) is searched in process too,
up to ``SMALL_TABLE_ROWS`` and below the mirror's threshold (``mirror_min_rows``: a bigger table
is searched through its mirror, mirror.py): at 10,000 rows LanceDB's IVF search and its
re-ranking took 7.9 ms of CPU and its full-text search 4.4 ms, the exact cosine and BM25 here
1.5 ms each (bench/README.md, "context() under 40 ms"). The copy is read once per process (and
again after a rewrite of the table: a delete, a merge-insert, a compaction), ~45 ms of CPU per
1,000 rows, most of it cutting the texts into terms.

The two searches give what LanceDB gives on the same rows: the cosine is exact (LanceDB scans
a table without an ANN index exactly, and the index re-scores its candidates exactly anyway),
and the text is cut into terms by LanceDB's own tokenizer (``lance.tokenize`` with the full-text
index's settings) and scored with BM25 as LanceDB scores it (k1 1.2, b 0.75, idf ln(1 + (N - n +
0.5) / (n + 0.5)) over the table's rows).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worldgraph.memory.index.schema import METADATA_TERMS, as_timestamp

SMALL_TABLE_ROWS = 20_000  # at most this many rows: searched in process (bench/README.md "Small tenants")
CACHED_TABLES = 64  # tables whose copy is kept (least recently searched dropped first)
CACHED_ROWS = 320_000  # and at most this many rows in all (~1.2 GB: 64 copies of 5,000 rows, the cap before)
COLUMNS = ("episode_id", "tenant_id", "agent_id", "agent_role", "canvas_id", "timestamp", "success", "text")
K1, B = 1.2, 0.75


def rows_limit(mirror_min_rows: int) -> int:
    """Rows up to which a table is searched in process: ``SMALL_TABLE_ROWS``, and fewer than a
    mirrored table has (``mirror_min_rows``; 0: no mirror), so no table is held twice."""
    return SMALL_TABLE_ROWS if mirror_min_rows <= 0 else min(SMALL_TABLE_ROWS, mirror_min_rows - 1)


def terms(text: str) -> list[str]:
    """``text`` cut into full-text terms exactly as LanceDB's full-text index cuts it (the
    settings are lancedb.index.FTS()'s defaults, with which index_maintenance builds the index)."""
    import lance

    tokens = lance.tokenize(text, base_tokenizer="simple", language="English", max_token_length=40,
                            lower_case=True, stem=True, remove_stop_words=True, ascii_folding=True)
    return [t.text for t in tokens]


Files = dict[int, tuple[tuple[str, ...], str | None]]  # fragment id -> its data files and deletion file


def fragment_files(ds: Any) -> Files:
    """What a table version holds, by fragment: data file names are unique per write, so two
    versions with the same files hold the same rows (even across a drop and re-create)."""
    out: Files = {}
    for f in ds.get_fragments():
        deleted = f.deletion_file()
        out[f.fragment_id] = (tuple(d.path for d in f.data_files()), None if deleted is None else str(deleted))
    return out


@dataclass
class SmallTable:
    """One version of a small table, in memory."""

    source: Any  # the pylance dataset (one version) it was last checked against
    files: Files
    columns: dict[str, list[Any]]
    vectors: np.ndarray  # rows as stored
    unit: np.ndarray  # rows scaled to length 1 (zero rows stay zero)
    postings: dict[str, dict[int, int]] = field(default_factory=dict)  # term -> row -> count
    lengths: list[int] = field(default_factory=list)  # terms per row
    metadata: list[frozenset[str]] = field(default_factory=list)  # each row's metadata terms

    @property
    def rows(self) -> int:
        return len(self.columns["episode_id"])

    # -- building --------------------------------------------------------------------------

    @classmethod
    def read(cls, ds: Any, files: Files, dimensions: int) -> SmallTable:
        table = cls(ds, files, {c: [] for c in COLUMNS}, np.zeros((0, dimensions), np.float32),
                    np.zeros((0, dimensions), np.float32))
        table._append(ds.to_table(columns=_read_columns(ds)), dimensions)
        return table

    def advanced(self, ds: Any, files: Files, dimensions: int) -> SmallTable:
        """This copy brought to ``ds``'s version: the new fragments' rows appended when the new
        version only added fragments (an append), else the table read again."""
        if any(files.get(i) != held for i, held in self.files.items()):
            return SmallTable.read(ds, files, dimensions)
        new = set(files) - set(self.files)
        out = SmallTable(ds, files, {c: list(v) for c, v in self.columns.items()}, self.vectors, self.unit,
                         {t: dict(p) for t, p in self.postings.items()}, list(self.lengths), list(self.metadata))
        if new:
            frags = [f for f in ds.get_fragments() if f.fragment_id in new]
            out._append(ds.scanner(columns=_read_columns(ds), fragments=frags).to_table(), dimensions)
        return out

    def _append(self, tbl: Any, dimensions: int) -> None:
        n = tbl.num_rows
        if n == 0:
            return
        start = self.rows
        for c in COLUMNS:
            self.columns[c].extend(tbl.column(c).to_pylist())
        held = tbl.column(METADATA_TERMS).to_pylist() if METADATA_TERMS in tbl.column_names else [None] * n
        self.metadata.extend(frozenset(t or ()) for t in held)
        vec = tbl.column("vector").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        vec = np.asarray(vec, dtype=np.float32).reshape(n, dimensions)
        norms = np.linalg.norm(vec, axis=1, keepdims=True)
        self.vectors = np.concatenate([self.vectors, vec])
        self.unit = np.concatenate([self.unit, vec / np.where(norms == 0, 1.0, norms)])
        for offset, text in enumerate(self.columns["text"][start:]):
            row = start + offset
            words = terms(text or "")
            self.lengths.append(len(words))
            for w in words:
                posting = self.postings.setdefault(w, {})
                posting[row] = posting.get(row, 0) + 1

    # -- searching -------------------------------------------------------------------------

    def mask(self, where: dict[str, Any] | None) -> np.ndarray | None:
        """Rows passing ``where`` (already validated by ``metadata_filter``); None: every row."""
        if not where:
            return None
        keep = np.ones(self.rows, dtype=bool)
        cols = self.columns
        for key in ("agent_role", "agent_id"):
            if where.get(key) is not None:
                keep &= np.array([v == where[key] for v in cols[key]], dtype=bool)
        canvas_ids = where.get("canvas_ids")
        if canvas_ids:
            wanted = {canvas_ids} if isinstance(canvas_ids, str) else set(canvas_ids)
            keep &= np.array([v is not None and v in wanted for v in cols["canvas_id"]], dtype=bool)
        ts = np.array(cols["timestamp"], dtype=np.float64) if (
            where.get("start") is not None or where.get("end") is not None) else None
        if ts is not None and where.get("start") is not None:
            keep &= ts >= as_timestamp(where["start"], "where.start")
        if ts is not None and where.get("end") is not None:
            keep &= ts <= as_timestamp(where["end"], "where.end")
        if where.get("success_only"):
            keep &= np.array([bool(v) for v in cols["success"]], dtype=bool)
        if where.get("episode_ids") is not None:
            ids = set(where["episode_ids"])
            keep &= np.array([v in ids for v in cols["episode_id"]], dtype=bool)
        every = frozenset(where.get(METADATA_TERMS) or ())
        groups = [frozenset(g) for g in where.get("metadata_any") or ()]
        if every or groups:
            keep &= np.array([every <= row and all(row & g for g in groups) for row in self.metadata], dtype=bool)
        return keep

    def nearest(self, q: np.ndarray, k: int, keep: np.ndarray | None) -> list[tuple[int, float]]:
        """The ``k`` rows most similar to ``q`` by cosine (rows, similarity), best first."""
        qn = float(np.linalg.norm(q))
        # einsum, not BLAS: with several threads searching at once, OpenBLAS's own threads spin
        # against each other (measured: a 2,000 x 384 product took 9 ms on a loaded machine, einsum 1.6)
        sims = np.einsum("ij,j->i", self.unit, q.astype(np.float32, copy=False)) / (qn or 1.0)
        if keep is not None:
            sims = np.where(keep, sims, -np.inf)
        return _top(sims, k)

    def bm25(self, query: str, k: int, keep: np.ndarray | None) -> list[tuple[int, float]]:
        """The ``k`` best rows for ``query`` by BM25 (rows, score), best first; rows with no query
        term are never returned."""
        n = self.rows
        words = terms(query)  # a term said twice counts twice, as in LanceDB
        if not n or not words:
            return []
        lengths = np.asarray(self.lengths, dtype=np.float64)
        avgdl = float(lengths.mean()) or 1.0
        norm = K1 * (1.0 - B + B * lengths / avgdl)
        scores = np.zeros(n, dtype=np.float64)
        hit = np.zeros(n, dtype=bool)
        for w in words:
            posting = self.postings.get(w)
            if not posting:
                continue
            rows = np.fromiter(posting.keys(), dtype=np.int64, count=len(posting))
            tf = np.fromiter(posting.values(), dtype=np.float64, count=len(posting))
            idf = np.log(1.0 + (n - len(posting) + 0.5) / (len(posting) + 0.5))
            scores[rows] += idf * tf * (K1 + 1.0) / (tf + norm[rows])
            hit[rows] = True
        if keep is not None:
            hit &= keep
        return _top(np.where(hit, scores, -np.inf), k)

    def rows_out(self, found: list[tuple[int, float]], columns: Sequence[str] | None, score: str,
                 tenant_id: str) -> list[dict[str, Any]]:
        """Result dicts as the LanceDB path makes them: the columns asked for, ``vector``, the score."""
        names = COLUMNS if columns is None else [c for c in columns if c != "vector"]
        tenants, vectors = self.columns["tenant_id"], self.vectors
        cols = [(c, self.columns[c]) for c in names]
        # defence in depth, as IndexSearch._rows: a table only ever holds its own tenant's rows
        return [{**{c: col[row] for c, col in cols}, "vector": vectors[row], score: value}
                for row, value in found if tenants[row] == tenant_id]


def _read_columns(ds: Any) -> list[str]:
    """The columns a copy holds: ``COLUMNS``, the vectors, and the metadata terms of a table that
    has them (a table made before them has none until its first write adds the column)."""
    return [*COLUMNS, "vector", *([METADATA_TERMS] if METADATA_TERMS in ds.schema.names else [])]


def _top(scores: np.ndarray, k: int) -> list[tuple[int, float]]:
    """Up to ``k`` (row, score) of the finite scores, highest first (ties: lower row first)."""
    finite = np.flatnonzero(np.isfinite(scores))
    if finite.size == 0:
        return []
    if finite.size > k:
        part = np.argpartition(-scores[finite], k - 1)[:k]
        finite = finite[part]
    order = sorted(finite.tolist(), key=lambda r: (-scores[r], r))
    return [(r, float(scores[r])) for r in order]


class SmallTables:
    """The in-memory copies of small tables, by table name, each for one table version."""

    def __init__(self, dimensions: int, max_rows: int = SMALL_TABLE_ROWS, max_tables: int = CACHED_TABLES,
                 max_cached_rows: int = CACHED_ROWS) -> None:
        self.dimensions = dimensions
        self.max_rows = max_rows
        self.max_tables = max_tables
        self.max_cached_rows = max_cached_rows
        self._lock = threading.Lock()
        self._tables: OrderedDict[str, SmallTable] = OrderedDict()
        self._big: dict[str, Any] = {}  # table name -> the dataset version seen with more than max_rows rows
        self._building: dict[str, threading.Lock] = {}  # table name -> held while its copy is read
        self.counts = {"read": 0, "advanced": 0, "checked": 0}  # copies made, for benchmarks

    def get(self, name: str, ds: Any, columns: Sequence[str] | None) -> SmallTable | None:
        """The copy of table ``name`` at ``ds``'s version (read, or advanced from an older copy, if
        need be); None when the table is too big or a column asked for is not kept in memory."""
        if self.max_rows <= 0 or columns is None or not set(columns) <= {*COLUMNS, "vector"}:
            return None
        with self._lock:
            table = self._tables.get(name)
            if table is not None and table.source is ds:
                self._tables.move_to_end(name)
                return table
            if self._big.get(name) is ds:
                return None
            building = self._building.setdefault(name, threading.Lock())
        # One thread reads a table's new version; the others wait for it and share the copy
        # (16 threads each reading the same new version cost 16 times the CPU).
        with building:
            with self._lock:
                table = self._tables.get(name)
                if table is not None and table.source is ds:
                    return table
            return self._refresh(name, ds, table)

    def _refresh(self, name: str, ds: Any, table: SmallTable | None) -> SmallTable | None:
        if ds.count_rows() > self.max_rows:  # the manifest's counts: no data read
            with self._lock:
                self._big[name] = ds
                self._tables.pop(name, None)
            return None
        files = fragment_files(ds)
        if table is not None and table.files == files:
            fresh = table
            fresh.source = ds
            self.counts["checked"] += 1
        elif table is not None:
            fresh = table.advanced(ds, files, self.dimensions)
            self.counts["advanced"] += 1
        else:
            fresh = SmallTable.read(ds, files, self.dimensions)
            self.counts["read"] += 1
        with self._lock:
            self._tables[name] = fresh
            self._tables.move_to_end(name)
            held = sum(t.rows for t in self._tables.values())
            while len(self._tables) > 1 and (len(self._tables) > self.max_tables or held > self.max_cached_rows):
                held -= self._tables.popitem(last=False)[1].rows
            self._big.pop(name, None)
        return fresh

    def holds(self, name: str) -> bool:
        return name in self._tables

    def drop(self, name: str | None = None) -> None:
        with self._lock:
            if name is None:
                self._tables.clear()
                self._big.clear()
            else:
                self._tables.pop(name, None)
                self._big.pop(name, None)
