"""A mirror's rows by filter value, in process: the rows of a narrow filter without a mask of
every row, nor LanceDB's scalar indexes.

Why (bench/README.md, "A narrow filter's rows from the mirror's postings"): at 10M rows the mask
of one column costs 9-13 ms (0.8-1.3 ns a row), and a scalar index's rows ~1.5 ms plus 550-900 ns
a row passing (LanceDB reads the row addresses, mapped back to mirror rows): a canvas's 8k rows
~7 ms, one day's 111k rows by the mask 16-19 ms, on the critical path of every such recall.

``Postings`` holds, for a mirror's first ``covered`` rows: the rows of each agent and each canvas
(by their values' hashes, the mirror's ``agent`` and ``canvas`` columns: the rows of a value
contiguous, ascending) and every row in timestamp order with its timestamp (a time range is two
binary searches). A clause's rows are then a slice or a few (~0.1 ms for 100k rows), and their
count is known before they are taken: the cost model of mirror_search.py picks the narrowest
clause by its exact count. The rows past ``covered`` (added since) are checked one by one.

It is built from the mirror's columns in a background thread (``Mirrors``: ~3.5 s of one core at
10M rows, numpy's sorts release the GIL) once the mirror holds ``MIN_ROWS`` rows, and again once
it has grown by ``1 / GROWTH``; until then a search takes the other ways. ~20 bytes a row
(200 MB at 10M rows). A mirror row's values never change (a compaction moves the row in LanceDB,
not in the mirror), so the postings are never wrong, only short; whether a row is still alive (a
forget) is checked by the caller on the mirror (``Mirror.passes``). What they hold is what the
mirror holds, derived from the table: hashes, timestamps and row numbers, no words; they go with
their mirror (a purge, a rebuild).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from worldgraph.memory.index.columns import hash_value
from worldgraph.memory.index.schema import as_timestamp

MIN_ROWS = 500_000  # a mirror this big gets postings (smaller: the mask of every row is ~0.5 ms a check)
GROWTH = 8  # built again once the mirror holds 1/GROWTH more rows than they cover
BY_VALUE = {"agent_id": "agent", "canvas_ids": "canvas"}  # where key -> mirror column of value hashes
# the clauses they answer, by the LanceDB column each filters (mirror_search._clauses' keys): an
# agent, canvases, a time range (start and/or end)
ANSWERED = ("agent_id", "canvas_id", "timestamp")
FIELDS = ("agent", "canvas", "ts")  # the mirror columns postings are built from


class Stopped(Exception):
    """A build ended early (its index closed)."""


class Postings:
    """The rows of each value of ``agent`` and ``canvas`` and the rows in ``ts`` order, of a mirror's
    first ``covered`` rows (see the module docstring)."""

    def __init__(self, covered: int, by_value: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
                 ts_rows: np.ndarray, ts_sorted: np.ndarray) -> None:
        self.covered = covered
        self._by_value = by_value  # column -> (distinct hashes sorted, where each one's rows start (+ end), rows)
        self._ts_rows = ts_rows  # rows in timestamp order
        self._ts = ts_sorted  # their timestamps

    @property
    def nbytes(self) -> int:
        held = [self._ts_rows, self._ts, *(a for v in self._by_value.values() for a in v)]
        return sum(int(a.nbytes) for a in held)

    def short(self, rows: int) -> bool:
        """Whether a mirror of ``rows`` rows has outgrown them (build them again)."""
        return rows - self.covered > self.covered // GROWTH

    def _slices(self, clause: dict[str, Any]) -> list[tuple[np.ndarray, int, int]]:
        """(array, start, end) slices holding exactly the covered rows that pass ``clause`` (one of
        ``ANSWERED``: its ``where`` keys)."""
        if "start" in clause or "end" in clause:
            lo, hi = 0, len(self._ts)
            if clause.get("start") is not None:
                lo = int(np.searchsorted(self._ts, as_timestamp(clause["start"], "where.start"), "left"))
            if clause.get("end") is not None:
                hi = int(np.searchsorted(self._ts, as_timestamp(clause["end"], "where.end"), "right"))
            return [(self._ts_rows, lo, max(lo, hi))]
        (key, value), = clause.items()
        values, starts, rows = self._by_value[BY_VALUE[key]]
        named: Sequence[Any] = [value] if isinstance(value, str) or key == "agent_id" else list(value)
        wanted = np.unique(np.array([hash_value(v) for v in named], np.uint64))
        at = np.searchsorted(values, wanted)
        found = at[(at < len(values)) & (values[np.minimum(at, len(values) - 1)] == wanted)]
        return [(rows, int(starts[i]), int(starts[i + 1])) for i in found.tolist()]

    def count(self, clause: dict[str, Any]) -> int:
        """How many covered rows pass ``clause`` (alive or not), without taking them."""
        return sum(end - start for _, start, end in self._slices(clause))

    def rows(self, clause: dict[str, Any]) -> np.ndarray:
        """The covered rows that pass ``clause`` (alive or not; not in row order)."""
        parts = [array[start:end] for array, start, end in self._slices(clause)]
        if not parts:
            return np.zeros(0, np.int64)
        return (parts[0] if len(parts) == 1 else np.concatenate(parts)).astype(np.int64)


def build(columns: Mapping[str, Sequence[np.ndarray]], covered: int,
          stopped: Callable[[], bool] = lambda: False) -> Postings:
    """The postings of the first ``covered`` rows of ``columns`` (field -> the mirror's segments of
    it, ``Columns.segments``: a snapshot, read outside the mirror's lock). ``stopped``: asked
    between fields; True raises ``Stopped``."""
    index = np.int32 if covered < 2**31 else np.int64

    def values(field: str) -> np.ndarray:
        if stopped():
            raise Stopped
        base, tail = columns[field]
        return np.concatenate([base[:covered], tail[:max(covered - len(base), 0)]])

    by_value: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for field in ("agent", "canvas"):
        column = values(field)
        order = np.argsort(column, kind="stable").astype(index)  # (stable: each value's rows ascending)
        ranked = column[order]
        del column
        firsts = np.flatnonzero(np.concatenate([[True], ranked[1:] != ranked[:-1]])) if covered else np.zeros(0, np.int64)
        by_value[field] = (ranked[firsts], np.append(firsts, covered).astype(np.int64), order)
    column = values("ts")
    order = np.argsort(column).astype(index)
    return Postings(covered, by_value, order, column[order])
