"""The full-text search of an episode-id filter's rows, in process: BM25 over the terms of the rows
that pass, kept per table between searches.

Why (bench/README.md "Session and feedback filters, as episode ids from the store"): recall pushes
the episodes a feedback or session filter passes into the index as ``episode_ids``. The vector
side searches them through the mirror (mirror.py) in a few ms; LanceDB's full-text search
evaluates a prefilter of n row addresses at ~4 us each, so 5,000 passing episodes cost ~50 ms a
search, the critical path of such a recall. The set changes only when a rating, a session's links
or a forget moves it, so a process keeps the terms of the rows it has seen pass (cut by LanceDB's
own tokenizer, ``small.terms``) and scores a query over the rows that pass now, as ``small.py``
scores a small table: BM25 with k1 1.2, b 0.75, idf ln(1 + (N - n + 0.5) / (n + 0.5)), a query
term said twice counting twice. N, n and the mean length are those of the rows that pass, where
LanceDB's prefiltered search takes them from its whole index: the order can differ when a query's
terms are much rarer or commoner among the rows that pass than in the table (measured against
LanceDB's filtered search: bench/README.md, overlap@10).

A row's terms are read once (its ``text`` from LanceDB by row address, then tokenized: ~0.1-0.3 ms
a row); a search that finds more than ``SYNC_ROWS`` of its rows unread reads them in a background
thread and answers ``None`` meanwhile (the caller has LanceDB search the passing rows by their
addresses: search.py ``_allowed_text``). More than ``MAX_ROWS`` rows passing: ``None`` too. A wide
filter never comes here: search.py asks LanceDB's unfiltered search for ``k / share x 1.5`` hits
and checks them when that is at most ``WIDE_TEXT_FETCH`` hits (at k 50: from 3.75 % of the table).

What it holds is a copy of users' words (their terms, stemmed), bound to one mirror of one table
(its ``uid``: the rows are the mirror's row numbers, which never change for a row's content):
- a row the mirror no longer holds alive (a forget, here or in another process: the mirror's
  generation check sees the table's deletes at every search) has its terms dropped before any
  search of the table, a vector search too (``sync``), and a term no row uses any more leaves the
  vocabulary with it;
- a delete in this process drops the table's terms at once (``drop``), as a purge and a table's
  drop do, and a new mirror of the table (a rebuild) starts empty;
- tenants: one ``TableTexts`` per table, and a table holds one tenant's rows only.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from worldgraph.clock import seconds_left
from worldgraph.memory.index.small import K1, B, terms

log = logging.getLogger("worldgraph.memory.index.episode_index")

MAX_ROWS = 50_000  # at most this many passing rows are searched in process (more: LanceDB's search)
SYNC_ROWS = 500  # at most this many unread rows are read within a search (more: in the background)
HELD_ROWS = 200_000  # rows whose terms a process keeps in all (least recently searched tables dropped first)
VIEWS = 4  # passing sets a table keeps assembled (the last ones searched)


class TableTexts:
    """The terms of the rows of one mirror (``uid``) that some filter passed (see the module docstring)."""

    def __init__(self, uid: str) -> None:
        self.uid = uid
        self.vocab: dict[str, int] = {}  # term -> id
        self.refs: list[int] = []  # id -> rows using it (0: free, reused by the next new term)
        self.free: list[int] = []
        self.docs: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}  # mirror row -> (term ids, counts, length)
        self.have = np.zeros(0, bool)  # by mirror row: its terms are in docs
        self.views: OrderedDict[bytes, _View] = OrderedDict()  # a passing set's rows -> its assembled postings
        self.version: Any = None  # the mirror version the docs were last checked against
        self.dropped = False  # let go of (``PassingTexts.drop``): a reader still running adds nothing
        self.lock = threading.Lock()

    def add(self, row: int, words: list[str]) -> None:
        if row in self.docs:  # read by two searches at once: counted once, or a forget would leave its terms
            return
        counts: dict[int, int] = {}
        for w in words:
            tid = self.vocab.get(w)
            if tid is None:
                tid = self.free.pop() if self.free else len(self.refs)
                if tid == len(self.refs):
                    self.refs.append(0)
                self.vocab[w] = tid
            counts[tid] = counts.get(tid, 0) + 1
        for tid in counts:
            self.refs[tid] += 1
        ids = np.fromiter(counts.keys(), np.int64, len(counts))
        self.docs[row] = (ids, np.fromiter(counts.values(), np.float64, len(counts)), len(words))
        if row >= len(self.have):
            self.have = np.concatenate([self.have, np.zeros(max(row + 1 - len(self.have), len(self.have)), bool)])
        self.have[row] = True

    def unread(self, rows: np.ndarray) -> np.ndarray:
        """Those of mirror ``rows`` whose terms are not held."""
        inside = rows < len(self.have)
        held = np.zeros(len(rows), bool)
        held[inside] = self.have[rows[inside]]
        return rows[~held]

    def remove(self, rows: list[int]) -> None:
        """Forget rows' terms; a term no row uses any more leaves the vocabulary."""
        gone: set[int] = set()
        for row in rows:
            doc = self.docs.pop(row, None)
            if doc is None:
                continue
            self.have[row] = False
            for tid in doc[0].tolist():
                self.refs[tid] -= 1
                if self.refs[tid] == 0:
                    gone.add(tid)
        if gone:
            for w in [w for w, tid in self.vocab.items() if tid in gone]:
                del self.vocab[w]
            self.free.extend(gone)
        self.views.clear()

    def clear(self) -> None:
        self.dropped = True
        self.vocab, self.refs, self.free, self.docs = {}, [], [], {}
        self.have = np.zeros(0, bool)
        self.views.clear()


class _View:
    """The postings of one passing set: every (row, term) of its rows, ordered by term id."""

    __slots__ = ("rows", "ids", "tf", "doc", "norm")

    def __init__(self, texts: TableTexts, rows: np.ndarray) -> None:
        docs = [texts.docs[r] for r in rows.tolist()]
        self.rows = rows
        ids = np.concatenate([d[0] for d in docs]) if docs else np.zeros(0, np.int64)
        order = np.argsort(ids, kind="stable")
        self.ids = ids[order]
        self.tf = (np.concatenate([d[1] for d in docs]) if docs else np.zeros(0, np.float64))[order]
        self.doc = np.repeat(np.arange(len(docs), dtype=np.int64), [len(d[0]) for d in docs])[order]
        lengths = np.fromiter((d[2] for d in docs), np.float64, len(docs))
        avgdl = float(lengths.mean()) if len(docs) and lengths.mean() > 0 else 1.0
        self.norm = K1 * (1.0 - B + B * lengths / avgdl)

    def bm25(self, qids: list[int], k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best of the view's rows for the query's term ids (a term twice counts twice):
        their positions in ``rows`` and their scores, best first (ties: lower row first)."""
        n = len(self.rows)
        wanted, times = np.unique(np.asarray(qids, np.int64), return_counts=True)
        lo = np.searchsorted(self.ids, wanted, "left")
        hi = np.searchsorted(self.ids, wanted, "right")
        df = (hi - lo).astype(np.float64)
        if not df.any():
            return np.zeros(0, np.int64), np.zeros(0)
        hit = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())])
        tf, doc = self.tf[hit], self.doc[hit]
        idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5)) * times
        at = np.repeat(np.arange(len(wanted)), hi - lo)
        scores = np.bincount(doc, weights=idf[at] * tf * (K1 + 1.0) / (tf + self.norm[doc]), minlength=n)
        found = np.unique(doc)
        if len(found) > k:
            found = found[np.argpartition(-scores[found], k - 1)[:k]]
        order = np.lexsort((self.rows[found], -scores[found]))
        return found[order], scores[found[order]]


Reader = Callable[[np.ndarray], list[str]]  # mirror rows -> their texts (read from LanceDB)


class PassingTexts:
    """Every table's ``TableTexts`` in this process, by table name."""

    def __init__(self, max_rows: int = MAX_ROWS, sync_rows: int = SYNC_ROWS, held_rows: int = HELD_ROWS) -> None:
        self.max_rows = max_rows
        self.sync_rows = sync_rows
        self.held_rows = held_rows
        self._lock = threading.Lock()
        self._tables: OrderedDict[str, TableTexts] = OrderedDict()
        self._reading: dict[str, threading.Thread] = {}
        # rows read, searches answered here, declined (unread rows: LanceDB); searches of a filter the
        # mirror evaluated answered from LanceDB's unfiltered hits (wide) or by row addresses (allowed)
        self.counts = {"read_rows": 0, "searches": 0, "declined": 0, "wide": 0, "allowed": 0}

    def search(self, name: str, mirror: Any, rows: np.ndarray, query: str, k: int,
               read: Reader) -> tuple[np.ndarray, np.ndarray] | None:
        """BM25's best ``k`` of mirror ``rows`` (live rows passing the caller's filter, sorted) for
        ``query``: (mirror rows, scores), best first; None when they are too many, or too many of
        them are unread (read in the background meanwhile): search LanceDB instead."""
        if len(rows) > self.max_rows:
            return None
        texts = self._table(name, mirror)
        with texts.lock:
            self._sync(texts, mirror)
            unread = texts.unread(rows)
        if len(unread) > self.sync_rows:
            self._read_behind(name, texts, mirror, unread, read)
            self.counts["declined"] += 1
            return None
        if len(unread):
            self._fill(texts, unread, read)
        words = terms(query)
        with texts.lock:
            self._sync(texts, mirror)
            if len(texts.unread(rows)):  # dropped meanwhile (a forget)
                return None
            key = rows.tobytes()
            view = texts.views.get(key)
            if view is None:
                view = texts.views[key] = _View(texts, rows)
                while len(texts.views) > VIEWS:
                    texts.views.popitem(last=False)
            texts.views.move_to_end(key)
            qids = [texts.vocab[w] for w in words if w in texts.vocab]
        self.counts["searches"] += 1
        if not qids:
            return rows[:0], np.zeros(0)
        at, scores = view.bm25(qids, k)
        return rows[at], scores

    def _table(self, name: str, mirror: Any) -> TableTexts:
        with self._lock:
            texts = self._tables.get(name)
            if texts is not None and texts.uid != mirror.uid:
                with texts.lock:
                    texts.clear()
            if texts is None or texts.uid != mirror.uid:  # a new mirror (the table made again): start empty
                texts = self._tables[name] = TableTexts(mirror.uid)
            self._tables.move_to_end(name)
            held = sum(len(t.docs) for t in self._tables.values())
            while len(self._tables) > 1 and held > self.held_rows:
                old = self._tables.popitem(last=False)[1]
                held -= len(old.docs)
                with old.lock:
                    old.clear()
            return texts

    @staticmethod
    def _sync(texts: TableTexts, mirror: Any) -> None:
        """Drop the terms of rows the mirror no longer holds alive (forgotten), once per mirror
        version (the caller holds ``texts.lock``)."""
        if texts.version == mirror.version:
            return
        if texts.docs:
            held = np.fromiter(texts.docs.keys(), np.int64, len(texts.docs))
            alive = mirror.alive
            dead = held[(held >= len(alive)) | ~alive[np.minimum(held, max(len(alive) - 1, 0))]] \
                if len(alive) else held
            if len(dead):
                texts.remove(dead.tolist())
        texts.version = mirror.version

    def _fill(self, texts: TableTexts, rows: np.ndarray, read: Reader) -> None:
        """Read and tokenize ``rows``' texts, and keep their terms (unless forgotten meanwhile)."""
        words = [terms(t or "") for t in read(rows)]
        with texts.lock:
            if texts.dropped:
                return
            for row, w in zip(rows.tolist(), words):
                texts.add(row, w)
            texts.version = None  # checked against the mirror again at the next search
        self.counts["read_rows"] += len(rows)

    def _read_behind(self, name: str, texts: TableTexts, mirror: Any, rows: np.ndarray, read: Reader) -> None:
        with self._lock:
            if name in self._reading and self._reading[name].is_alive():
                return

            def run() -> None:
                try:
                    for start in range(0, len(rows), 4096):
                        if texts.dropped:
                            return
                        self._fill(texts, rows[start:start + 4096], read)
                        with texts.lock:
                            self._sync(texts, mirror)
                except Exception:  # noqa: BLE001 - the searches go on through LanceDB
                    log.warning("reading the texts of %s's passing rows failed", name, exc_info=True)

            thread = threading.Thread(target=run, name="worldgraph-passing-texts", daemon=True)
            self._reading[name] = thread
            thread.start()

    def sync(self, name: str, mirror: Any) -> None:
        """Drop the terms table ``name`` holds of rows ``mirror`` (just brought to the table's
        newest version) no longer holds alive, or all of them when ``mirror`` is None (the table
        is not searched through one now): every search of the table calls it, a vector search
        too, so a forget elsewhere takes the words out before this process's next recall."""
        with self._lock:
            texts = self._tables.get(name)
        if texts is None:
            return
        if mirror is None or texts.uid != mirror.uid:
            self.drop(name)
            return
        with texts.lock:
            self._sync(texts, mirror)

    def drop(self, name: str | None = None) -> None:
        """Forget the terms of table ``name`` (None: of every table) in this process."""
        with self._lock:
            gone = list(self._tables.values()) if name is None else [t for t in [self._tables.get(name)] if t]
            if name is None:
                self._tables.clear()
            else:
                self._tables.pop(name, None)
        for texts in gone:
            with texts.lock:
                texts.clear()

    def close(self, deadline: float | None = None) -> None:
        """Stop the texts being read behind the searches (each stops at its next chunk of 4,096
        rows) and wait for them, until ``deadline`` (monotonic) if given: no thread of this
        process is left inside LanceDB's read when it exits."""
        with self._lock:
            reading = list(self._reading.values())
        self.drop()
        for thread in reading:
            thread.join(seconds_left(deadline))

    def held(self, name: str) -> TableTexts | None:
        """Table ``name``'s terms as this process holds them (for tests and benchmarks)."""
        with self._lock:
            return self._tables.get(name)
