"""Common words in a big table's full-text query: the rows holding a rare word lead (Lucene's
common-terms query).

In a table searched through its mirror, a query term held by more than ``fulltext_common_share``
of the rows (or more than ``fulltext_common_rows`` rows, where set) is common. When a query holds
both rare and common words and its common words together hold more than
``fulltext_common_budget`` rows, its full-text search is ``rare words MUST, common words SHOULD``:
the hits are the rows holding at least one rare word, each scored by every word of the query (a
boolean query's score is the sum of its clauses': the same BM25 score the whole query gives that
row). Any other query is searched whole, as in a small table.

Why (bench/README.md "Common words at 10M"): LanceDB's BM25 reads a query term's whole posting
list whenever its top hits tie, which they do when the query's words are in hundreds of thousands
of rows of templated text (block-max pruning skips a block only when its bound is *below* the k-th
score). The text half of a 10M-row recall of the bench's corpus cost ~23-48 ms CPU (linear in the
rows) for 50 of ~350k rows tied on one score; led by its rare words, 2-3 ms. The rare words of a
query (a ticket number, a name, an error code) are what the text half finds that vectors miss,
and their lists are short.

What it costs: the rows holding only common words are not hits, and a query whose rare words are
in no row has none. On LoCoMo's conversations through the mirror with no budget, that took R@10
from 0.806 to 0.781. So the budget: a query whose common words hold fewer rows together than
``fulltext_common_budget`` (300,000: ~5 ms of postings) is searched whole, exactly; the rows-only
semantics apply where the whole query would read more than that.

How common a term is comes from a sample: ``SAMPLE_ROWS`` rows spread evenly over the table's
live rows, read once (~0.13 s CPU at 1M) in a background thread the first time a big table is
searched, and again once its live rows moved by a quarter (``RESAMPLE_CHANGE``) or its mirror was
made again. Until then its searches take the whole query. A term counts as common when at least
``MIN_SAMPLED`` sampled rows hold it (so one odd row is never enough).

What it holds is the common terms only, each with the share of the sampled rows holding it: words
in more than a share of one tenant's rows (one table holds one tenant), never a rare word of the
sample, and nothing on disk. A table's set goes when the table is released or dropped (a purge),
as ``passing_text`` does.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter
from collections.abc import Container
from dataclasses import dataclass
from typing import Any

import numpy as np

from worldgraph.clock import seconds_left
from worldgraph.memory.index.small import terms

log = logging.getLogger("worldgraph.memory.index.episode_index")

_PIECES = re.compile(r"[^\W_]+")  # runs of letters and digits: the simple tokenizer's tokens

SAMPLE_ROWS = 2_048  # rows read to estimate how many rows hold a term
MIN_SAMPLED = 8  # a term is common only if at least this many sampled rows hold it
RESAMPLE_CHANGE = 0.25  # sample again once the live rows moved by this share since the last sample


@dataclass(frozen=True)
class Sample:
    uid: str  # the mirror sampled: a new mirror (the table made again) is sampled again
    live: int  # its live rows then
    common: dict[str, float]  # each common term: the share of the sampled rows holding it


class CommonTerms:
    """Every big table's common terms in this process, by table name (see the module docstring)."""

    def __init__(self, min_rows: int, share: float = 0.0, budget: int = 0) -> None:
        self.min_rows = min_rows  # fulltext_common_rows (0: no count makes a term common)
        self.share = share  # fulltext_common_share (0: no share makes a term common)
        self.budget = budget  # fulltext_common_budget (0: every query of both kinds is split)
        self._lock = threading.Lock()
        self._samples: dict[str, Sample] = {}
        self._reading: dict[str, threading.Thread] = {}
        self.counts = {"samples": 0, "split": 0}

    def query(self, name: str, ds: Any, mirror: Any, text: str) -> Any:
        """The full-text query of ``text`` in table ``name`` (read through ``mirror``, at ``ds``'s
        version): where ``text`` holds both rare and common words and the common ones hold more
        than ``budget`` rows together, the rows holding a rare word, each scored by every word;
        else every word's rows (a ``MatchQuery`` of ``text``, as before the table is sampled)."""
        from lance.query import MatchQuery

        whole = MatchQuery(text, "text")
        if (self.min_rows <= 0 and self.share <= 0) or mirror is None or mirror.live <= self.min_rows:
            return whole
        sample = self._sample(name, ds, mirror)
        if sample is None or not sample.common:
            return whole
        rare, common = split(text, sample.common)
        if not rare or not common or self._rows_of(common, sample) * mirror.live <= self.budget:
            return whole
        with self._lock:
            self.counts["split"] += 1
        return led_by_rare(rare, common)

    def _sample(self, name: str, ds: Any, mirror: Any) -> Sample | None:
        with self._lock:
            sample = self._samples.get(name)
            fresh = sample is not None and sample.uid == mirror.uid and \
                abs(mirror.live - sample.live) <= RESAMPLE_CHANGE * max(sample.live, 1)
            if not fresh:
                reading = self._reading.get(name)
                if reading is None or not reading.is_alive():
                    thread = threading.Thread(target=self._read, args=(name, ds, mirror.uid, mirror.live),
                                              name="worldgraph-common-terms", daemon=True)
                    self._reading[name] = thread
                    thread.start()
            # a stale sample of the same mirror still serves meanwhile; another mirror's does not
            return sample if sample is not None and sample.uid == mirror.uid else None

    def _read(self, name: str, ds: Any, uid: str, live: int) -> None:
        try:
            common = self.common_of(ds)
        except Exception:  # noqa: BLE001 - the searches go on with whole queries
            log.warning("sampling the words of %s failed", name, exc_info=True)
            common = {}  # not tried again before the live rows move by RESAMPLE_CHANGE
        with self._lock:
            if self._reading.get(name) is threading.current_thread():
                self._samples[name] = Sample(uid, live, common)
                self.counts["samples"] += 1

    @staticmethod
    def _rows_of(words: str, sample: Sample) -> float:
        """The share of the rows holding ``words``' terms, summed over the terms (their postings)."""
        return sum(sample.common.get(t, 0.0) for t in terms(words))

    def common_of(self, ds: Any) -> dict[str, float]:
        """The terms ``SAMPLE_ROWS`` rows of ``ds`` (spread evenly over its live rows) put in more
        than ``min_rows`` of its rows or more than ``share`` of them (each where set)."""
        rows = ds.count_rows()
        if not rows:
            return {}
        at = np.unique(np.linspace(0, rows - 1, min(rows, SAMPLE_ROWS)).astype(np.int64))
        texts = ds.take(at, columns=["text"]).column("text").to_pylist()
        held: Counter[str] = Counter()
        for text in texts:
            held.update(set(terms(text or "")))
        n = len(texts)
        return {t: c / n for t, c in held.items() if c >= MIN_SAMPLED and (
            (self.min_rows > 0 and c * rows > self.min_rows * n) or (self.share > 0 and c > self.share * n))}

    def drop(self, name: str | None = None) -> None:
        """Forget table ``name``'s common terms (None: every table's) in this process."""
        with self._lock:
            if name is None:
                self._samples.clear()
                self._reading.clear()
            else:
                self._samples.pop(name, None)
                self._reading.pop(name, None)

    def close(self, deadline: float | None = None) -> None:
        """Wait for the samples being read (one ``take`` of ``SAMPLE_ROWS`` rows each), until
        ``deadline`` (monotonic) if given: a process that exits right after its first search must
        not end inside LanceDB's read (a daemon thread there aborts the interpreter's exit)."""
        with self._lock:
            reading = list(self._reading.values())
        for thread in reading:
            thread.join(seconds_left(deadline))

    def held(self, name: str) -> frozenset[str] | None:
        """Table ``name``'s common terms as this process holds them (None: not sampled yet)."""
        with self._lock:
            sample = self._samples.get(name)
        return None if sample is None else frozenset(sample.common)


def split(text: str, common: Container[str]) -> tuple[str, str]:
    """``text``'s rare and common words (each joined by spaces): a word is cut where LanceDB's
    tokenizer cuts it (at every character that is not a letter or digit), so each piece is at
    most one term; a piece without a term (a stop word) is in neither."""
    rare: list[str] = []
    held: list[str] = []
    for piece in _PIECES.findall(text):
        piece_terms = terms(piece)
        if piece_terms:
            (held if all(t in common for t in piece_terms) else rare).append(piece)
    return " ".join(rare), " ".join(held)


def led_by_rare(rare: str, common: str) -> Any:
    """The full-text query of the rows holding a word of ``rare``, each scored by every word of
    ``rare`` and ``common``: a boolean query's score is the sum of its clauses', so each hit's is
    the one the whole text gives it."""
    from lance.query import BooleanQuery, MatchQuery, Occur

    return BooleanQuery([(Occur.MUST, MatchQuery(rare, "text")), (Occur.SHOULD, MatchQuery(common, "text"))])
