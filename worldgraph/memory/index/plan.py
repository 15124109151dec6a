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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from worldgraph.memory.index.schema import as_timestamp

POST_FILTER_SHARE = 0.1  # a date range holding at least this share of the rows is checked on the hits
POST_FILTER_MARGIN = 1.5  # hits asked beyond k / share
POST_FILTER_MAX_HITS = 2_000  # a search that would need more is left to the pushed-down filter
SAMPLE_ROWS = 4_096  # timestamps sampled per table to estimate a range's share
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


def time_check(where: dict[str, Any] | None, k: int, sample: np.ndarray | None) -> TimeCheck | None:
    """The date range of ``where`` to check on the hits (None: push every filter into the search).

    ``sample``: sorted timestamps of a sample of the table's rows."""
    _, start, end = split_time(where)
    if (start is None and end is None) or sample is None or not len(sample):
        return None
    lo = 0 if start is None else int(np.searchsorted(sample, start, side="left"))
    hi = len(sample) if end is None else int(np.searchsorted(sample, end, side="right"))
    share = max(0, hi - lo) / len(sample)
    if share < POST_FILTER_SHARE:
        return None
    fetch = max(k, math.ceil(k / share * POST_FILTER_MARGIN))
    if fetch > POST_FILTER_MAX_HITS:
        return None
    return TimeCheck(start, end, fetch)


def sample_is_stale(sampled_rows: int | None, rows: int) -> bool:
    """Whether a sample taken at ``sampled_rows`` rows no longer describes a table of ``rows``."""
    if sampled_rows is None:
        return True
    return rows > sampled_rows * SAMPLE_GROWTH or rows * SAMPLE_GROWTH < sampled_rows
