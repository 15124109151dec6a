"""Searching a big table through its mirror (mirror.py): the part of ``IndexSearch`` that runs in
process, over the mirror's filter columns, codes and lists (ivf.py)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from worldgraph.memory.index import filter_postings, ivf
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
# What a narrow filter's rows cost each way (measured on the bench's 1M and 10M stores by
# bench/filter_paths.py; bench/README.md, "A narrow filter's rows: the cheaper way, and the nearest
# lists"): the mask of every row ~0.9 ns a row per check (one
# check per canvas named; 0.5-1.0 at 1M, 0.8-1.3 at 10M); a scalar index's rows ~1.5 ms, ~0.35 ms
# more a canvas named beyond the first, and ~600 ns a row its clause passes (row addresses read,
# mapped to mirror rows, checked: 200-400 at 1M, 550-900 at 10M).
MASK_NS_PER_ROW = 0.9
INDEX_NS = 1_500_000
INDEX_LOOKUP_NS = 350_000
INDEX_NS_PER_ROW = 600
# ... and from the mirror's postings (filter_postings.py): ~POSTED_NS_PER_ROW a row the narrowest clause
# passes per check made on it (whether it is alive, each other clause: 8-9 at 1M, 15-16 at 10M)
POSTED_NS_PER_ROW = 12


def _clauses(where: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``where``'s clauses a scalar index answers, by column (start and end: one clause)."""
    out: dict[str, dict[str, Any]] = {}
    for key, column in FILTER_COLUMNS.items():
        value = where.get(key)
        if value is None or (key in ("canvas_ids", "success_only") and not value):
            continue  # (as metadata_filter: no canvas named or success not asked is no filter)
        out.setdefault(column, {})[key] = value
    return out


def _canvases(clause: dict[str, Any]) -> int:
    """How many canvases a clause names (a single string is one)."""
    named = clause.get("canvas_ids")
    return 1 if isinstance(named, str) else len(named or ())


def _mask_checks(clauses: dict[str, dict[str, Any]]) -> int:
    """How many column checks the mask of these clauses makes (each canvas named is one)."""
    return sum(len(c) + max(_canvases(c) - 1, 0) for c in clauses.values())


class MirrorSearch(IndexTables):
    """Vector search of a big table through its mirror (``IndexSearch`` decides when)."""

    def _mirrored(self, ds: Any) -> bool:
        """Whether a table is searched through its mirror (mirror.py): at least mirror_min_rows rows."""
        least = self.config.mirror_min_rows
        return least > 0 and int(ds.count_rows()) >= least

    def _mirror_search(self, part: TenantTable, ds: Any, mirror: Mirror, q: np.ndarray, k: int,
                       where: dict[str, Any] | None, select: Sequence[str] | None,
                       tenant_id: str) -> list[dict[str, Any]]:
        """The top ``k`` through the table's mirror (mirror.py): a wide filter (by a sample) checked
        on the rows of the lists nearest the query; a narrower one's rows found in process (from
        the mirror's postings, ``_posted_rows``, a scalar index, ``_indexed_rows``, or a mask of
        every row), those of them in the lists nearest the query searched exactly by their codes
        (through the lists path instead when that checks fewer rows: a mask's rows when more than
        ``mirror_exact_rows`` pass, found rows when more than sqrt(want x ``ivf.MIN_PASSING`` x the
        table's rows) do), or, without
        lists yet, the ANN index's hits checked against the filter; ids, vectors and cosines from
        the mirror (columns other than those read from LanceDB for the ``k`` rows only)."""
        self._texts.sync(part.name, mirror)  # a forget elsewhere: its words leave this process (passing_text.py)
        want = 2 * k + RESCORE_MARGIN
        listed = mirror.lists is not None and mirror.cols.n - mirror.lists.covered <= ivf.TAIL_ROWS
        share = mirror.share(where) if listed and where else 0.0
        if share * mirror.live > WIDE_MARGIN * self.config.mirror_exact_rows:
            # clearly wide (a sample says so): its filter is checked on the lists' rows only, no mask
            # of every row (18-34 ms a column at 10M rows)
            found = self._list_rows(mirror, q, want, lambda r: mirror.passes(where, r), share)
            return self._mirror_out(ds, mirror, found, q, k, select, tenant_id)
        # a narrower filter's rows: from the mirror's postings or LanceDB's scalar indexes where
        # that is cheaper, else a mask
        rows = self._posted_rows(mirror, where) if where else None
        if rows is None and listed and where:
            rows = self._indexed_rows(part, ds, mirror, where, share)
        keep = mirror.mask(where) if where and rows is None else None
        passing = len(rows) if rows is not None else mirror.live if keep is None else int(np.count_nonzero(keep))
        if passing == 0:
            return []
        if rows is not None and listed and passing <= want * ivf.MIN_PASSING * mirror.live / passing:
            # of a filter's rows, those of the lists nearest the query: one look-up of its list per
            # row, fewer than the rows of the lists the lists path below would check
            found = mirror.nearest_codes(q, want, self._in_nearest_lists(mirror, q, want, rows))
        elif (where and passing <= self.config.mirror_exact_rows) or VECTOR_INDEX_NAME not in self._indexes(part):
            chosen = rows if rows is not None else np.flatnonzero(keep if keep is not None else mirror.alive)
            if where and listed:
                chosen = self._in_nearest_lists(mirror, q, want, chosen)
            found = mirror.nearest_codes(q, want, chosen)
        elif listed:
            passes = keep if keep is not None else mirror.alive if rows is None else _rows_mask(rows, mirror.cols.n)
            found = self._list_rows(mirror, q, want, lambda r: passes[r], passing / max(mirror.live, 1))
        else:  # no lists yet: LanceDB's IVF index (a filter's rows from the postings: as a mask)
            keep = keep if rows is None else _rows_mask(rows, mirror.cols.n)
            found = self._ann_rows(part, ds, mirror, q, want, keep, passing)
        return self._mirror_out(ds, mirror, found, q, k, select, tenant_id)

    @staticmethod
    def _posted_rows(mirror: Mirror, where: dict[str, Any]) -> np.ndarray | None:
        """The live mirror rows passing ``where``, from the mirror's postings (filter_postings.py) of its
        narrowest clause they answer (by exact count), the other clauses and liveness checked on
        those rows, the rows past the postings checked one by one; None (another way) when the
        mirror has no postings yet, none of the clauses is theirs (a role, success), an
        episode-id filter, or the mask of every row costs less (a wide filter)."""
        post = mirror.postings
        if post is None or where.get("episode_ids") is not None:
            return None
        clauses = _clauses(where)
        answered = [c for column, c in clauses.items() if column in filter_postings.ANSWERED]
        if not answered:
            return None
        counts = [post.count(c) for c in answered]
        clause = answered[int(np.argmin(counts))]
        rest = {k: v for k, v in where.items() if k not in clause}
        n = min(mirror.cols.n, len(mirror.alive))
        checks = _mask_checks(clauses)
        posted_ns = POSTED_NS_PER_ROW * min(counts) * (1 + _mask_checks(_clauses(rest))) + \
            MASK_NS_PER_ROW * max(n - post.covered, 0) * checks
        if posted_ns >= MASK_NS_PER_ROW * mirror.live * checks:
            return None
        rows: np.ndarray = post.rows(clause)
        rows = rows[mirror.passes(rest, rows)]
        if n > post.covered:  # rows added since the postings were built
            added = np.arange(post.covered, n, dtype=np.int64)
            rows = np.concatenate([rows, added[mirror.passes(where, added)]])
        return rows

    def _indexed_rows(self, part: TenantTable, ds: Any, mirror: Mirror, where: dict[str, Any],
                      share: float) -> np.ndarray | None:
        """The live mirror rows passing ``where``, found by the LanceDB scalar index of its
        narrowest clause's column (exactly the rows that pass it), its other clauses and the rows'
        liveness checked on the mirror's columns (the rows the mask would pass), where the cost
        model above says that is cheaper than the mask of every row: at 10M rows a canvas's or two
        hours' ~9k rows in ~5 ms against 13-18 ms for the mask, ten canvases' 80k in ~31 against
        ~97; at 1M rows the mask (0.3-6 ms). ``share``: the sample's share of the whole filter (no clause passes fewer).
        The rows are then searched exactly by their codes, or through the lists if too many.
        None (make the mask): the mask is cheaper, an episode-id filter (the mirror's own
        lookup), no clause with its scalar index (LanceDB would read the whole column), or an
        index on an object store (its index pages are requests away; the mask is in memory)."""
        if where.get("episode_ids") is not None or not self._is_local:
            return None
        clauses = _clauses(where)
        mask_ns = MASK_NS_PER_ROW * mirror.live * _mask_checks(clauses)
        indexes = self._indexes(part)
        indexed = [c for column, c in clauses.items() if f"{column}_idx" in indexes]
        if not indexed or INDEX_NS + share * mirror.live * INDEX_NS_PER_ROW >= mask_ns:
            return None  # (a clause passes at least the rows the whole filter passes)
        # the narrowest clause (by the sample; the whole filter's share when it is the only one)
        shares = [share] if len(clauses) == 1 else [mirror.share(c) for c in indexed]
        narrowest = int(np.argmin(shares))
        lookups = max(_canvases(indexed[narrowest]) - 1, 0)
        index_ns = INDEX_NS + INDEX_LOOKUP_NS * lookups + shares[narrowest] * mirror.live * INDEX_NS_PER_ROW
        if index_ns >= mask_ns:
            return None
        filt = metadata_filter(indexed[narrowest])
        tbl = ds.scanner(filter=filt, columns=[], with_row_address=True).to_table()
        rows = np.unique(mirror.rows_of(tbl.column("_rowaddr").to_numpy()))
        rows = rows[rows >= 0]
        rest = {k: v for k, v in where.items() if k not in indexed[narrowest]}  # (live, and the other clauses)
        passing: np.ndarray = rows[mirror.passes(rest, rows)]
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

    @staticmethod
    def _in_nearest_lists(mirror: Mirror, q: np.ndarray, want: int, rows: np.ndarray) -> np.ndarray:
        """Of a narrow filter's ``rows`` (in any order), those the lists path would rank: the rows of the
        lists nearest the query, lists taken nearest first (at least ``ivf.NPROBE``) until
        ``ivf.MIN_PASSING`` times ``want`` of the rows are in them, and the rows not in a list yet.
        Each row ranked is one scattered read of its code (~3 us at 10M): a canvas's 8k rows
        at 10M cost ~25 ms of reads, the ~2.2k of its nearest lists a quarter of that
        (bench/README.md, "A narrow filter's rows: the cheaper way, and the nearest lists")."""
        lists = mirror.lists
        target = want * ivf.MIN_PASSING
        if lists is None or len(rows) <= target:
            return rows
        assign = lists.assign  # (a snapshot: a fill extends it by a new array)
        inside = rows[rows < len(assign)]
        rank = np.empty(lists.nlist, np.int64)
        rank[lists.ranked(q)] = np.arange(lists.nlist)
        of = rank[assign[inside]]  # each row's list, by its nearness to the query
        last = max(int(np.searchsorted(np.cumsum(np.bincount(of, minlength=lists.nlist)), target)), ivf.NPROBE - 1)
        return np.concatenate([inside[of <= last], rows[rows >= len(assign)]])

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
