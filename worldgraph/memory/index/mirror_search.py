"""Searching a big table through its mirror (mirror.py): the part of ``IndexSearch`` that runs in
process, over the mirror's filter columns, codes and lists (ivf.py)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from worldgraph.memory.index import ivf
from worldgraph.memory.index.mirror import Mirror
from worldgraph.memory.index.schema import VECTOR_INDEX_NAME, metadata_filter, table_name
from worldgraph.memory.index.tables import IndexTables, TenantTable

log = logging.getLogger("worldgraph.memory.index.episode_index")

# 2k + RESCORE_MARGIN hits are ranked by the cosine of int8 codes (the query's and the rows'), then
# re-ranked by the float query against the rows' codes (mirror.py): the query's rounding no longer
# swaps near ties at the k-th place.
RESCORE_MARGIN = 20
MIRROR_MAX_FETCH = 5_000  # ANN hits asked at most for a filtered search through the mirror
WIDE_MARGIN = 4  # a filter a sample says passes this many times mirror_exact_rows skips the full mask
# the filters the scalar indexes answer (``where`` key -> column): a narrower filter's rows come from them
FILTER_COLUMNS = {"agent_role": "agent_role", "agent_id": "agent_id", "canvas_ids": "canvas_id",
                  "start": "timestamp", "end": "timestamp", "success_only": "success"}



class MirrorSearch(IndexTables):
    """Vector search of a big table through its mirror (``IndexSearch`` decides when)."""

    def _mirrored(self, ds: Any) -> bool:
        """Whether a table is searched through its mirror (mirror.py): at least mirror_min_rows rows."""
        least = self.config.mirror_min_rows
        return least > 0 and int(ds.count_rows()) >= least

    def _mirror_search(self, part: TenantTable, ds: Any, mirror: Mirror, q: np.ndarray, k: int,
                       where: dict[str, Any] | None, select: Sequence[str] | None,
                       tenant_id: str) -> list[dict[str, Any]]:
        """The top ``k`` through the table's mirror (mirror.py): the rows passing ``where`` found in
        process, a narrow filter's rows searched exactly by their codes, otherwise the ANN index's
        hits checked against the filter; ids, vectors and cosines from the mirror (columns other
        than those read from LanceDB for the ``k`` rows only)."""
        self._texts.sync(part.name, mirror)  # a forget elsewhere: its words leave this process (passing_text.py)
        want = 2 * k + RESCORE_MARGIN
        listed = mirror.lists is not None and mirror.cols.n - mirror.lists.covered <= ivf.TAIL_ROWS
        share = mirror.share(where) if listed and where else 0.0
        if share * mirror.live > WIDE_MARGIN * self.config.mirror_exact_rows:
            # clearly wide (a sample says so): its filter is checked on the lists' rows only, no mask
            # of every row (18-34 ms a column at 10M rows)
            found = self._list_rows(mirror, q, want, lambda r: mirror.passes(where, r), share)
            return self._mirror_out(ds, mirror, found, q, k, select, tenant_id)
        # a narrower filter's rows: from LanceDB's scalar indexes where they answer it, else a mask
        rows = self._indexed_rows(part, ds, mirror, where) \
            if listed and where and share * mirror.live <= self.config.mirror_exact_rows else None
        keep = mirror.mask(where) if where and rows is None else None
        passing = len(rows) if rows is not None else mirror.live if keep is None else int(np.count_nonzero(keep))
        if passing == 0:
            return []
        if (where and passing <= self.config.mirror_exact_rows) or VECTOR_INDEX_NAME not in self._indexes(part):
            found = mirror.nearest_codes(q, want, rows if rows is not None else
                                         np.flatnonzero(keep if keep is not None else mirror.alive))
        elif listed:
            passes = keep if keep is not None else mirror.alive if rows is None else _rows_mask(rows, mirror.cols.n)
            found = self._list_rows(mirror, q, want, lambda r: passes[r], passing / max(mirror.live, 1))
        else:  # no lists yet: LanceDB's IVF index
            found = self._ann_rows(part, ds, mirror, q, want, keep, passing)
        return self._mirror_out(ds, mirror, found, q, k, select, tenant_id)

    def _indexed_rows(self, part: TenantTable, ds: Any, mirror: Mirror, where: dict[str, Any]) -> np.ndarray | None:
        """The live mirror rows passing ``where``, found by LanceDB's scalar indexes of its
        columns, then checked on the mirror's columns (so never a row the mask would not pass):
        at 10M rows 1.5-2 ms for ~9k rows (a canvas, two hours) against 18-34 ms a column for the
        mask of every row. Called for a filter a sample says at most ``mirror_exact_rows`` pass
        (searched exactly by their codes); for more rows (110-150k at 10M) the indexes' addresses
        and the check cost more than the mask (bench/README.md, "Common words at 10M: the rare
        words lead"). None (make the mask): an episode-id filter (the mirror's own lookup), a
        column without its scalar index (LanceDB would read the whole column), or an index on an
        object store (its index pages are requests away; the mask is in memory)."""
        if where.get("episode_ids") is not None or not self._is_local:
            return None
        indexes = self._indexes(part)
        if any(f"{column}_idx" not in indexes for key, column in FILTER_COLUMNS.items() if where.get(key)):
            return None
        tbl = ds.scanner(filter=metadata_filter(where), columns=[], with_row_address=True).to_table()
        rows = np.unique(mirror.rows_of(tbl.column("_rowaddr").to_numpy()))
        rows = rows[rows >= 0]
        passing: np.ndarray = rows[mirror.passes(where, rows)]
        return passing

    def _mirror_out(self, ds: Any, mirror: Mirror, found: tuple[np.ndarray, np.ndarray], q: np.ndarray, k: int,
                    select: Sequence[str] | None, tenant_id: str) -> list[dict[str, Any]]:
        """The best ``k`` of the candidate mirror rows (with their codes: ``Mirror.nearest_codes``)
        by code plus residual, as result dicts."""
        rows, vectors, sims = mirror.results(found[0], q, k, found[1])
        return self._mirror_rows(ds, mirror, rows, vectors, [("similarity", s) for s in sims.tolist()], select,
                                 tenant_id)

    def _mirror_rows(self, ds: Any, mirror: Mirror, rows: np.ndarray, vectors: np.ndarray,
                     scores: list[tuple[str, float]], select: Sequence[str] | None,
                     tenant_id: str) -> list[dict[str, Any]]:
        """Result dicts of mirror ``rows``: episode_id and vector from the mirror, any other column
        asked for read from LanceDB by row address, and each row's score."""
        if not len(rows):
            return []
        ids = mirror.cols.episode_ids(rows)
        held = {"episode_id", "vector", "timestamp"}  # what the mirror holds itself
        present = set(ds.schema.names)  # (a table made before a column, opened read-only, lacks it)
        others = [c for c in (self.schema.names if select is None else select) if c not in held and c in present]
        if select is None or "timestamp" in select:
            others.append("timestamp")
        extra: dict[str, list[Any]] = {}
        if others:
            taken = [c for c in others if c != "timestamp"]
            if taken:
                tbl = ds._take_rows(mirror.addresses(rows), columns=taken)
                extra = {c: tbl.column(c).to_pylist() for c in taken}
            if "timestamp" in others:
                extra["timestamp"] = mirror.cols.take("ts", rows).tolist()
        out = []
        for i, (eid, (name, score)) in enumerate(zip(ids, scores)):
            row: dict[str, Any] = {"episode_id": eid, **{c: v[i] for c, v in extra.items()}, "vector": vectors[i],
                                   name: float(score)}
            if "canvas_action_ids" in row:
                row["canvas_action_ids"] = row["canvas_action_ids"] or []
            out.append(row)
        if "tenant_id" in extra and any(t != tenant_id for t in extra["tenant_id"]):
            log.error("episode index: table %s holds rows of another tenant", table_name(tenant_id))
            out = [r for r in out if r["tenant_id"] == tenant_id]
        return out

    @staticmethod
    def _list_rows(mirror: Mirror, q: np.ndarray, want: int, passes: Callable[[np.ndarray], np.ndarray],
                   share: float) -> tuple[np.ndarray, np.ndarray]:
        """Mirror rows of the best ``want`` by their codes among the rows of the lists nearest the
        query and the rows not in a list yet, those ``passes`` accepts (ivf.py). The lists are
        taken nearest first, ``ivf.NPROBE`` then twice as many each time, until as many of their
        rows pass as would of ``NPROBE`` lists' rows if the filter had nothing to do with the
        vectors (its share of the table, times ``ivf.SHARE_SLACK`` for chance), and at least
        ``ivf.MIN_PASSING`` times ``want``: a filter whose rows lie far from the query (a role
        that other topics belong to) takes more lists, never fewer rows."""
        lists = mirror.lists
        ranked = lists.ranked(q)
        covered = lists.covered
        tail = np.arange(covered, mirror.cols.n, dtype=np.int64)
        found = [tail[passes(tail)]]
        got, target, taken, step = len(found[0]), want, 0, ivf.NPROBE
        while taken < len(ranked):
            rows = lists.rows_in(ranked[taken:taken + step])
            if taken == 0:
                target = max(want * ivf.MIN_PASSING, math.ceil(share * ivf.SHARE_SLACK * len(rows)))
            taken += step
            rows = rows[passes(rows)]
            found.append(rows)
            got += len(rows)
            if got >= target:
                break
            step *= 2
        return mirror.nearest_codes(q, want, np.concatenate(found), probe=True)

    def _ann_rows(self, part: TenantTable, ds: Any, mirror: Mirror, q: np.ndarray, want: int,
                  keep: np.ndarray | None, passing: int) -> tuple[np.ndarray, np.ndarray]:
        """Mirror rows of the best ``want`` by their codes among the ANN index's hits that pass
        ``keep``: it is asked ``want / share x 1.5`` hits (row addresses only), and once more with
        the filter pushed in if too few pass."""
        share = passing / max(mirror.live, 1)
        fetch = min(MIRROR_MAX_FETCH, max(want, math.ceil(want / share * 1.5)))
        nearest = {"column": "vector", "q": q, "k": fetch, "metric": "cosine", "minimum_nprobes": self.config.ann_nprobes}
        hits = ds.to_table(columns=[], with_row_address=True, nearest=nearest, disable_scoring_autoprojection=True)
        rows = mirror.rows_of(hits.column("_rowaddr").to_numpy())
        rows = rows[rows >= 0]
        if keep is not None:
            rows = rows[keep[rows]]
            if len(rows) < want and hits.num_rows >= fetch:  # too few passed: every row that passes, exactly
                rows = np.flatnonzero(keep)
        return mirror.nearest_codes(q, want, rows)


def _rows_mask(rows: np.ndarray, n: int) -> np.ndarray:
    """A mask of ``n`` mirror rows holding ``rows``."""
    keep = np.zeros(n, bool)
    keep[rows[rows < n]] = True
    return keep
