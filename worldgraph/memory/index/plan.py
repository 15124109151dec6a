"""How a filtered search runs: which filters LanceDB evaluates before the search, and which are
checked on the hits after it.

A filter pushed into a LanceDB search is first turned into a row-id mask from the scalar indexes.
For an equality on a BITMAP-indexed column (role, agent, success) that is cheap, but a date range
that holds a large share of the table costs in proportion to the rows it holds: at 1M episodes a
30-day window (a third of the rows) took 35 ms to evaluate from the `timestamp` BTREE, and the
search with it 53 ms, against 13-20 ms for the same search without it, asking for 300 hits and
dropping the ones outside the window (bench/README.md, "Filtered recall and ten million
episodes"). So a date range that a sample of the table's timestamps says holds at least
``POST_FILTER_SHARE`` of the rows is checked on the hits instead: the search asks for
``k / share x POST_FILTER_MARGIN`` hits, with the other filters pushed in, and keeps those inside
the range. When fewer than ``k`` are left although the search returned all it was asked for (the
sample was off: it is refreshed as the table grows, not at every write), the search runs again
with every filter pushed in, so the result is always what the fully pushed-down search would give.
A narrow range stays pushed in: its mask is cheap (a 1-day window: 0.8 ms at 1M).

A filter that very few rows pass is the other case. The IVF search probes ``ann_nprobes``
partitions and goes on only while fewer than k rows have passed; when the rows that pass are
spread over every partition, the nearest of them are often in partitions it never probes (at 1M,
filters passing 0.08-0.09 % of the rows: recall@10 0.66-0.75 against the exact filtered top 10).
So when the sample says at most ``EXACT_ROWS`` rows pass, the search is exact: a scan of the
vectors of the rows that pass (LanceDB reads a row at ~25 us: 26 ms for 938 rows at 1M).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from worldgraph.memory.index.schema import METADATA_TERMS, as_timestamp

POST_FILTER_SHARE = 0.1  # a date range holding at least this share of the rows is checked on the hits
POST_FILTER_MARGIN = 1.5  # hits asked beyond k / share
POST_FILTER_MAX_HITS = 2_000  # a search that would need more is left to the pushed-down filter
EXACT_ROWS = 1_000  # a filter estimated to pass at most this many rows is searched exactly
SAMPLE_ROWS = 4_096  # rows sampled per table to estimate a filter's share
SAMPLE_COLUMNS = ("agent_role", "agent_id", "canvas_id", "timestamp", "success")
SAMPLE_GROWTH = 1.25  # the sample is taken again once the table has grown (or shrunk) by this factor


@dataclass(frozen=True)
class TimeCheck:
    """A date range checked on a search's hits, and how many hits to ask for."""

    start: float | None
    end: float | None
    fetch: int

    def keeps(self, ts: float) -> bool:
        return (self.start is None or ts >= self.start) and (self.end is None or ts <= self.end)


def split_time(where: dict[str, Any] | None) -> tuple[dict[str, Any], float | None, float | None]:
    """``where`` without its date range, and the range's bounds (unix seconds; None: open)."""
    rest = {key: value for key, value in (where or {}).items() if key not in ("start", "end")}
    start, end = (where or {}).get("start"), (where or {}).get("end")
    return (rest, None if start is None else as_timestamp(start, "where.start"),
            None if end is None else as_timestamp(end, "where.end"))


@dataclass(frozen=True)
class Sample:
    """The filter columns of a sample of a table's rows (``SAMPLE_COLUMNS``, as arrays), and the
    table's row count when it was taken."""

    columns: dict[str, np.ndarray]
    rows: int

    @property
    def size(self) -> int:
        return len(self.columns["timestamp"])

    def share(self, where: dict[str, Any] | None) -> float:
        """The share of the sampled rows that pass ``where`` (validated by ``metadata_filter``)."""
        if not self.size:
            return 0.0
        w = where or {}
        keep = np.ones(self.size, dtype=bool)
        cols = self.columns
        for key in ("agent_role", "agent_id"):
            if w.get(key) is not None:
                keep &= cols[key] == w[key]
        canvas_ids = w.get("canvas_ids")
        if canvas_ids:
            keep &= np.isin(cols["canvas_id"], [canvas_ids] if isinstance(canvas_ids, str) else list(canvas_ids))
        _, start, end = split_time(where)
        if start is not None:
            keep &= cols["timestamp"] >= start
        if end is not None:
            keep &= cols["timestamp"] <= end
        if w.get("success_only"):
            keep &= cols["success"]
        every = frozenset(w.get(METADATA_TERMS) or ())
        groups = [frozenset(g) for g in w.get("metadata_any") or ()]
        if (every or groups) and METADATA_TERMS in cols:
            keep &= np.array([every <= row and all(row & g for g in groups) for row in cols[METADATA_TERMS]],
                             dtype=bool)
        if w.get("episode_ids") is not None:  # not in the sample: as if the ids were spread evenly
            return float(keep.mean()) * min(1.0, len(w["episode_ids"]) / max(self.rows, 1))
        return float(keep.mean())

    def time_share(self, start: float | None, end: float | None) -> float:
        ts = self.columns["timestamp"]
        if not len(ts):
            return 0.0
        return float(((ts >= (-np.inf if start is None else start)) & (ts <= (np.inf if end is None else end))).mean())


def sample_of(table: Any, rows: int) -> Sample:
    """A sample of an Arrow table of ``SAMPLE_COLUMNS``, of a table of ``rows`` rows."""
    cols = {c: table.column(c).to_numpy(zero_copy_only=False) for c in SAMPLE_COLUMNS}
    if METADATA_TERMS in table.column_names:  # each row's metadata terms, as a set
        cols[METADATA_TERMS] = np.array([frozenset(t or ()) for t in table.column(METADATA_TERMS).to_pylist()],
                                        dtype=object)
    cols["timestamp"] = np.asarray(cols["timestamp"], dtype=np.float64)
    cols["success"] = np.asarray(cols["success"], dtype=bool)
    for c in ("agent_role", "agent_id", "canvas_id"):
        cols[c] = np.asarray(cols[c], dtype=object)
    return Sample(cols, rows)


def maybe_exact(where: dict[str, Any] | None, sample: Sample | None) -> bool:
    """Whether a filtered vector search may pass few enough rows to scan them instead of the IVF
    index: the sample says at most ``EXACT_ROWS`` x 4 (a few sampled rows estimate a narrow
    filter's count only roughly; the caller counts the rows that pass to decide, cheap for a
    narrow filter: ~1 ms at 1M)."""
    if not where or sample is None or not sample.size:
        return False
    return sample.share(where) * sample.rows <= EXACT_ROWS * 4


def time_check(where: dict[str, Any] | None, k: int, sample: Sample | None) -> TimeCheck | None:
    """The date range of ``where`` to check on the hits (None: push every filter into the search)."""
    _, start, end = split_time(where)
    if (start is None and end is None) or sample is None or not sample.size:
        return None
    share = sample.time_share(start, end)
    if share < POST_FILTER_SHARE:
        return None
    fetch = max(k, math.ceil(k / share * POST_FILTER_MARGIN))
    if fetch > POST_FILTER_MAX_HITS:
        return None
    return TimeCheck(start, end, fetch)


def sample_is_stale(sampled_rows: int, rows: int) -> bool:
    """Whether a sample taken at ``sampled_rows`` rows no longer describes a table of ``rows``."""
    return rows > sampled_rows * SAMPLE_GROWTH or rows * SAMPLE_GROWTH < sampled_rows
