"""Query words too common to search in a big table (``fulltext_common_rows``, off by default): a
word whose every term more than ``fulltext_common_rows`` of the table's rows hold is left out of
the full-text query there.

Why (bench/README.md "Common words at 10M"): LanceDB's BM25 reads a query term's whole posting
list whenever its top hits tie, which they do when the query's words are in hundreds of thousands
of rows of templated text (block-max pruning skips a block only when its bound is *below* the k-th
score). The text half of a 10M-row recall of the bench's corpus cost ~23 ms CPU (4.4x its 1M
cost) for 50 of ~350k rows tied on one score. The rare words of a query (a ticket number, a name,
an error code) are what the text half finds that vectors miss, and their lists are short. This is
Elasticsearch's ``cutoff_frequency``: the common words are not searched; when every word of a
query is common, the text half returns nothing and recall ranks the vector candidates alone.

Why off by default: where the common words' scores do not tie they rank well. On LoCoMo's
conversations (bench/recall_quality.py, every table through its mirror) leaving out the words of
more than 1.5 % of a conversation's turns took R@10 from 0.806 to 0.766, of more than 3.6 % to 0.788.
An operator whose big tables are templated agent logs can trade that for the latency.

How common a term is comes from a sample: ``SAMPLE_ROWS`` rows spread evenly over the table's
live rows, read once (~0.13 s CPU at 1M) in a background thread the first time a table of more
than ``fulltext_common_rows`` live rows is searched, and again once its live rows moved by a
quarter (``RESAMPLE_CHANGE``) or its mirror was made again. Until then its searches take the
whole query. A term counts as common when the sample puts it in more than ``fulltext_common_rows``
rows and at least ``MIN_SAMPLED`` sampled rows hold it (so one odd row is never enough).

What it holds is the set of common terms only: words in more than ``fulltext_common_rows`` of one
tenant's rows (one table holds one tenant), never a rare word of the sample, and nothing on disk.
A table's set goes when the table is released or dropped (a purge), as ``passing_text`` does.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from worldgraph.memory.index.small import terms

log = logging.getLogger("worldgraph.memory.index.episode_index")

SAMPLE_ROWS = 2_048  # rows read to estimate how many rows hold a term
MIN_SAMPLED = 8  # a term is common only if at least this many sampled rows hold it
RESAMPLE_CHANGE = 0.25  # sample again once the live rows moved by this share since the last sample


@dataclass(frozen=True)
class Sample:
    uid: str  # the mirror sampled: a new mirror (the table made again) is sampled again
    live: int  # its live rows then
    common: frozenset[str]


class CommonTerms:
    """Every big table's common terms in this process, by table name (see the module docstring)."""

    def __init__(self, min_rows: int) -> None:
        self.min_rows = min_rows  # fulltext_common_rows (0: every word is searched)
        self._lock = threading.Lock()
        self._samples: dict[str, Sample] = {}
        self._reading: dict[str, threading.Thread] = {}
        self.counts = {"samples": 0, "pruned": 0, "emptied": 0}

    def prune(self, name: str, ds: Any, mirror: Any, text: str) -> str:
        """``text`` without its words whose every term is common in table ``name`` (read through
        ``mirror``, at ``ds``'s version); "" when no word is left. Unchanged for a table of at most
        ``min_rows`` live rows, or while its first sample is being read."""
        if self.min_rows <= 0 or mirror is None or mirror.live <= self.min_rows:
            return text
        sample = self._sample(name, ds, mirror)
        if sample is None or not sample.common:
            return text
        kept, searchable = [], False
        for word in text.split():
            word_terms = terms(word)  # none: a stop word or punctuation, kept (LanceDB drops it too)
            if word_terms and all(t in sample.common for t in word_terms):
                continue
            kept.append(word)
            searchable = searchable or bool(word_terms)
        out = " ".join(kept) if searchable else ""
        if out != text:
            self.counts["pruned" if out else "emptied"] += 1
        return out

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
            common = frozenset()  # not tried again before the live rows move by RESAMPLE_CHANGE
        with self._lock:
            if self._reading.get(name) is threading.current_thread():
                self._samples[name] = Sample(uid, live, common)
                self.counts["samples"] += 1

    def common_of(self, ds: Any) -> frozenset[str]:
        """The terms ``SAMPLE_ROWS`` rows of ``ds`` (spread evenly over its live rows) put in more
        than ``min_rows`` of its rows."""
        rows = ds.count_rows()
        if not rows:
            return frozenset()
        at = np.unique(np.linspace(0, rows - 1, min(rows, SAMPLE_ROWS)).astype(np.int64))
        texts = ds.take(at, columns=["text"]).column("text").to_pylist()
        held: Counter[str] = Counter()
        for text in texts:
            held.update(set(terms(text or "")))
        return frozenset(t for t, c in held.items() if c >= MIN_SAMPLED and c * rows > self.min_rows * len(texts))

    def drop(self, name: str | None = None) -> None:
        """Forget table ``name``'s common terms (None: every table's) in this process."""
        with self._lock:
            if name is None:
                self._samples.clear()
                self._reading.clear()
            else:
                self._samples.pop(name, None)
                self._reading.pop(name, None)

    def held(self, name: str) -> frozenset[str] | None:
        """Table ``name``'s common terms as this process holds them (None: not sampled yet)."""
        with self._lock:
            sample = self._samples.get(name)
        return None if sample is None else sample.common
