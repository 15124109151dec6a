"""Reading the episode index: vector search, BM25 search, lookups by id, counts."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from worldgraph.errors import EmbeddingDimensionError, InvalidInputError
from worldgraph.memory.cosine import cosine_to
from worldgraph.memory.index import objectstore
from worldgraph.memory.index.mirror import Mirror
from worldgraph.memory.index.mirror_search import MirrorSearch
from worldgraph.memory.index.plan import (
    EXACT_ROWS,
    SAMPLE_COLUMNS,
    SAMPLE_ROWS,
    Sample,
    maybe_exact,
    sample_is_stale,
    sample_of,
    split_time,
    time_check,
)
from worldgraph.memory.index.policy import ann_search_params
from worldgraph.memory.index.schema import (
    FTS_INDEX_NAME,
    METADATA_TERMS,
    VECTOR_INDEX_NAME,
    first_per_episode,
    metadata_filter,
    require_tenant_id,
    sql_literal,
    table_name,
)
from worldgraph.memory.index.small import SmallTable
from worldgraph.memory.index.tables import TenantTable

log = logging.getLogger("worldgraph.memory.index.episode_index")

# An episode-id filter's full-text search over a mirrored table asks LanceDB's unfiltered search for
# k / share x WIDE_TEXT_SLACK hits and checks them when that is at most WIDE_TEXT_FETCH (at k 50: from
# 3.75 % of the table); else it is searched in process when the rows' terms are held, else by LanceDB
# over the rows' addresses.
WIDE_TEXT_SLACK = 1.5
WIDE_TEXT_FETCH = 2_000
# A filter of the mirror's columns (role, agent, canvases, dates, success) that a sample of
# WIDE_SAMPLE rows says passes at least this share of the rows is checked the same way (a fetch of
# at most k x 6; above 1: never). At 1M rows: success (75 %) 7.0 ms p50 checked against 9.2 by
# LanceDB's prefilter; a role (12 %, a fetch of ~640) 7.7 against 5.9 (bench/README.md, "Full-text
# search of the mirror's filters").
WIDE_FILTER_SHARE = 0.25
WIDE_SAMPLE = 2_048

class IndexSearch(MirrorSearch):
    """The read path of ``EpisodeIndex``."""

    @objectstore.guarded("counting episode rows")
    def count(self, tenant_id: str | None = None) -> int:
        """Rows in the index, of one tenant or of all."""
        if tenant_id is None:
            return sum(int(p.table.count_rows()) for p in self._all_parts())
        part = self._part(tenant_id)
        return int(part.table.count_rows()) if part is not None else 0

    def get(self, tenant_id: str, episode_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Rows of ``tenant_id`` by episode id (missing ids are left out), vectors included."""
        ids = list(dict.fromkeys(episode_ids))
        part = self._part(tenant_id)
        if not ids or part is None:
            return []
        pred = "episode_id IN (" + ", ".join(sql_literal(e, "episode_ids") for e in ids) + ")"
        return self._rows(part.table.search().where(pred).limit(len(ids)).to_arrow(), tenant_id)

    def warm_mirror(self, tenant_id: str, timeout: float | None = None) -> bool:
        """Bring ``tenant_id``'s mirror (mirror.py) to the table's newest version now, waiting for
        a background build if one is needed (a search meanwhile goes to LanceDB); False when the
        table is not searched through a mirror (too small, or none) or the wait timed out."""
        part = self._part(tenant_id)
        if part is None:
            return False
        ds = part.latest_dataset()
        if not self._mirrored(ds):
            return False
        if self._mirrors.get(part.name, ds) is not None:
            return True
        return self._mirrors.wait(timeout) and self._mirrors.get(part.name, part.latest_dataset()) is not None

    def mirror_stats(self, tenant_id: str) -> dict[str, Any] | None:
        """The mirror of ``tenant_id``'s table as this process holds it (rows, live rows, rows saved,
        rows read and moved so far; None: not searched through a mirror yet), for benchmarks."""
        mirror = self._mirrors.held(table_name(tenant_id))
        return None if mirror is None else mirror.stats()

    def in_process(self, tenant_id: str) -> bool:
        """Whether ``tenant_id``'s table was last searched in process (a small table; a lookup, no I/O)."""
        part = self._parts.get(table_name(tenant_id))
        return part is not None and self._small.holds(part.name)

    def _small_table(self, part: TenantTable, select: Sequence[str] | None, ds: Any = None) -> SmallTable | None:
        """The in-memory copy of a small table (with or without an ANN index: small.py) at its newest
        version, ``ds`` if the caller has it (None: search it with LanceDB or its mirror)."""
        return self._small.get(part.name, part.latest_dataset() if ds is None else ds, select)

    def _select(self, columns: Sequence[str] | None) -> list[str] | None:
        """Columns to read: None for all; else episode_id, the given ones and vector."""
        if columns is None:
            return None
        if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
            raise InvalidInputError("columns", "expected a list of column names")
        unknown = [c for c in columns if c not in self.schema.names]
        if unknown:
            raise InvalidInputError("columns", f"unknown column(s) {unknown}; allowed: {self.schema.names}")
        return list(dict.fromkeys(["episode_id", *columns, "vector"]))

    def _rows(self, tbl: pa.Table, tenant_id: str, score_col: str | None = None,
              out_name: str | None = None) -> list[dict[str, Any]]:
        """Arrow results -> dicts of the columns read, ``vector`` as a float32 np.ndarray."""
        n = tbl.num_rows
        if n == 0:
            return []
        names = [c for c in self.schema.names if c != "vector" and c in tbl.column_names]
        cols = {c: tbl.column(c).to_pylist() for c in names}
        vec_col = tbl.column("vector").combine_chunks()
        # float16 as stored (float32 in tables of earlier versions): scores are computed in float32
        vectors = vec_col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(
            n, self.dimensions)
        scores = tbl.column(score_col).to_pylist() if score_col else None
        out: list[dict[str, Any]] = []
        for i in range(n):
            row = {c: cols[c][i] for c in names}
            if "canvas_action_ids" in row:
                row["canvas_action_ids"] = row["canvas_action_ids"] or []
            row["vector"] = vectors[i]
            if scores is not None and out_name is not None:
                row[out_name] = float(scores[i])
            out.append(row)
        if "tenant_id" in cols and any(t != tenant_id for t in cols["tenant_id"]):
            # defence in depth: a table only ever receives its own tenant's rows
            log.error("episode index: table %s holds rows of another tenant", table_name(tenant_id))
            out = [r for r in out if r["tenant_id"] == tenant_id]
        return out

    @objectstore.guarded("searching episodes by vector")
    def vector_search(
        self,
        tenant_id: str,
        vector: Any,
        k: int = 100,
        where: dict[str, Any] | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Top ``k`` rows of ``tenant_id`` by cosine similarity (highest first), filtered first.

        Each result has every column (or ``episode_id`` plus ``columns``), ``vector``
        (np.ndarray) and ``similarity`` (1 - cosine distance).
        """
        if not isinstance(k, int) or k <= 0:
            raise InvalidInputError("k", f"must be a positive integer, got {k!r}")
        require_tenant_id(tenant_id)
        pred = metadata_filter(where)
        select = self._select(columns)
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dimensions:
            raise EmbeddingDimensionError(
                "vector", f"expected length {self.dimensions} (index dimensions), got {q.shape[0]}"
            )
        if not np.isfinite(q).all() or not np.any(q):
            raise EmbeddingDimensionError("vector", "query vector is zero, NaN or infinite")
        part = self._part(tenant_id)
        if part is None:
            return []
        # one look for the table's newest version a search (~0.3-1 ms at 10M rows: it lists the
        # table's versions), shared by the steps below
        ds = part.latest_dataset()
        where, pred = self._for_table(ds, where, pred)
        small = self._small_table(part, select, ds)
        if small is not None:  # exact cosine in process (index_small.py)
            return small.rows_out(small.nearest(q, k, small.mask(where)), select, "similarity", tenant_id)
        # the mirror holds no metadata terms: a metadata filter is pushed into LanceDB's search
        mirror = self._mirrors.get(part.name, ds) if self._mirrored(ds) and not _has_metadata(where) else None
        if mirror is not None:  # the in-process index in front of a big table (mirror.py)
            return self._mirror_search(part, ds, mirror, q, k, where, select, tenant_id)
        sample = self._sample(part, ds) if where else None
        check = time_check(where, k, sample)
        if check is not None:  # a wide date range, checked on the hits (plan.py)
            rest = metadata_filter(split_time(where)[0])
            rows = self._rows(self._nearest(part, ds, q, check.fetch, rest, self._with_time(select)), tenant_id)
            kept = [r for r in rows if check.keeps(r["timestamp"])]
            if len(kept) >= k or len(rows) < check.fetch:
                return self._rescored(self._strip_time(kept, select), q, k)
        # Every candidate is re-scored with exact cosine, so the order is exact. A filter that very
        # few rows pass is searched exactly (plan.py: the IVF search misses their nearest).
        exact = maybe_exact(where, sample) and int(ds.count_rows(pred)) <= EXACT_ROWS
        tbl = self._nearest(part, ds, q, k, pred, select, exact=exact)
        return self._rescored(self._rows(tbl, tenant_id), q, k)

    @staticmethod
    def _for_table(ds: Any, where: dict[str, Any] | None,
                   pred: str | None) -> tuple[dict[str, Any] | None, str | None]:
        """``where`` and its predicate for the table at ``ds``: a table made before the metadata terms
        (read only, so not upgraded) cannot evaluate them, and recall checks the metadata on the hits."""
        if not where or not (where.get(METADATA_TERMS) or where.get("metadata_any")) \
                or METADATA_TERMS in ds.schema.names:
            return where, pred
        rest = {k: v for k, v in where.items() if k not in (METADATA_TERMS, "metadata_any")}
        return rest, metadata_filter(rest)

    def _nearest(self, part: TenantTable, ds: Any, q: np.ndarray, k: int, pred: str | None,
                 select: Sequence[str] | None, exact: bool = False) -> pa.Table:
        """LanceDB's top ``k`` of ``ds`` by cosine, ``pred`` pushed into the search (``exact``: a
        scan of the rows that pass it, not the ANN index)."""
        nearest: dict[str, Any] = {"column": "vector", "q": q, "k": k, "metric": "cosine"}
        if exact:
            nearest["use_index"] = False
        elif VECTOR_INDEX_NAME in self._indexes(part):
            nearest.update(ann_search_params(self.config, k, self.ann_overfetch))
        # The dataset is searched directly: lancedb's query builder costs ~4 ms a query here (it
        # fetches the schema three times on its event loop) for the same search. A metadata filter
        # is applied before the search (prefilter, from the scalar indexes), and the probing goes
        # on past ann_nprobes partitions until k rows pass it.
        tbl: pa.Table = ds.to_table(columns=None if select is None else list(select), filter=pred,
                                    prefilter=pred is not None, nearest=nearest, disable_scoring_autoprojection=True)
        return tbl

    def _sample(self, part: TenantTable, ds: Any) -> Sample:
        """The filter columns of a sample of the table's rows (``plan.SAMPLE_ROWS``), taken again
        as the table grows (~24 ms at 1M); it only chooses how a search runs, never what it returns."""
        rows = int(ds.count_rows())  # the manifest's count: no data read
        sample: Sample | None = part.sample
        if sample is None or sample_is_stale(sample.rows, rows):
            columns = [*SAMPLE_COLUMNS, *([METADATA_TERMS] if METADATA_TERMS in ds.schema.names else [])]
            tbl = ds.sample(SAMPLE_ROWS, columns=columns) if rows > SAMPLE_ROWS else ds.to_table(columns=columns)
            sample = part.sample = sample_of(tbl, rows)
        return sample

    @staticmethod
    def _with_time(select: Sequence[str] | None) -> list[str] | None:
        """``select`` with ``timestamp`` (read to check a date range on the hits)."""
        return None if select is None else list(dict.fromkeys([*select, "timestamp"]))

    @staticmethod
    def _strip_time(rows: list[dict[str, Any]], select: Sequence[str] | None) -> list[dict[str, Any]]:
        """The rows without ``timestamp`` when the caller did not ask for it."""
        if select is None or "timestamp" in select:
            return rows
        for row in rows:
            row.pop("timestamp", None)
        return rows

    @staticmethod
    def _rescored(results: list[dict[str, Any]], q: np.ndarray, k: int) -> list[dict[str, Any]]:
        """Exact cosine for every candidate, best first, duplicates dropped, top ``k``."""
        if not results:
            return []
        vectors = np.stack([r["vector"] for r in results])
        sims = cosine_to(vectors, q)
        for row, sim in zip(results, sims):
            row["similarity"] = float(sim)
        results.sort(key=lambda r: r["similarity"], reverse=True)
        return first_per_episode(results)[:k]

    @objectstore.guarded("searching episodes by text")
    def text_search(
        self,
        tenant_id: str,
        query: str,
        k: int = 20,
        where: dict[str, Any] | None = None,
        columns: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Top ``k`` rows of ``tenant_id`` by BM25 on ``text``; each result carries ``bm25``.

        Each result has every column (or ``episode_id`` plus ``columns``) and ``vector``.
        Returns [] when the full-text index does not exist yet or the query has no searchable
        terms (only stop words or punctuation).
        """
        if not isinstance(k, int) or k <= 0:
            raise InvalidInputError("k", f"must be a positive integer, got {k!r}")
        if not isinstance(query, str):
            raise InvalidInputError("query", f"expected a string, got {type(query).__name__}")
        require_tenant_id(tenant_id)
        pred = metadata_filter(where)
        select = self._select(columns)
        text = " ".join(query.replace("\x00", " ").split())
        if not any(ch.isalnum() for ch in text):
            return []
        part = self._part(tenant_id)
        if part is None:
            return []
        ds = part.latest_dataset()  # once a search, as in vector_search
        where, pred = self._for_table(ds, where, pred)
        if FTS_INDEX_NAME not in self._indexes(part) and FTS_INDEX_NAME not in self._indexes(part, refresh=True):
            return []
        small = self._small_table(part, select, ds)
        if small is not None:  # BM25 in process, LanceDB's terms and scores (index_small.py)
            return small.rows_out(small.bm25(text, k, small.mask(where)), select, "bm25", tenant_id)
        if part.look_unfolded is None:  # rows another process left unfolded: folded if it stopped writing
            self._searched(part)
        # a big table's hits take their ids and vectors from its mirror (mirror.py), not LanceDB
        mirror = self._mirrors.get(part.name, ds) if self._mirrored(ds) else None
        self._texts.sync(part.name, mirror)  # the kept terms of forgotten rows go first (passing_text.py)
        # a big table's query of rare and common words: the rows holding a rare word (common_terms.py;
        # an episode-id filter's rows searched in process, passing_text.py, are few: searched whole)
        query = self._common.query(part.name, ds, mirror, text) if mirror is not None else _match(text)
        ids_in_mirror = mirror is not None and (where or {}).get("episode_ids") is not None
        # a filter the mirror can evaluate: a wide one checked on LanceDB's unfiltered hits, episode
        # ids searched in process or by their rows' addresses (_mirror_text); else LanceDB's prefilter
        if mirror is not None and where and not _has_metadata(where):
            found = self._mirror_text(part.name, ds, mirror, text, query, k, where)
            if found is not None:
                rows, scores = found
                return first_per_episode(self._mirror_rows(ds, mirror, rows, mirror.unit_vectors(rows),
                                                           [("bm25", float(x)) for x in scores], select, tenant_id))
        check = time_check(where, k, self._sample(part, ds) if where else None)
        allow = None
        if mirror is not None and where and ids_in_mirror:  # (with metadata terms) the ids as their rows'
            id_rows = np.flatnonzero(mirror.mask({"episode_ids": where["episode_ids"]}))  # addresses, the rest SQL
            if not len(id_rows):
                return []
            allow = row_addr_set(mirror.cols.addr[id_rows])

        def pred_of(w: dict[str, Any] | None) -> str | None:
            return metadata_filter({key: v for key, v in (w or {}).items() if key != "episode_ids"}) \
                if ids_in_mirror else metadata_filter(w)

        pred = pred_of(where)
        try:
            if check is not None:  # a wide date range, checked on the hits (plan.py)
                hits = self._matches(ds, query, check.fetch, pred_of(split_time(where)[0]),
                                     self._with_time(select), tenant_id, mirror, allow)
                kept = [r for r in hits if check.keeps(r["timestamp"])]
                if len(kept) >= k or len(hits) < check.fetch:
                    return self._strip_time(kept, select)[:k]
            return self._matches(ds, query, k, pred, select, tenant_id, mirror, allow)
        except ValueError as exc:
            if "index" in str(exc).lower():
                return []
            raise

    def _mirror_text(self, name: str, ds: Any, mirror: Mirror, text: str, query: Any, k: int,
                     where: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
        """BM25's best ``k`` of the mirror rows passing ``where`` (no metadata terms), ranked and
        scored as LanceDB's prefiltered search does: (mirror rows, scores), best first; None:
        search LanceDB with the filter as SQL (a prefilter from its scalar indexes).

        - A filter of the mirror's columns that ``WIDE_SAMPLE`` rows spread over the mirror say
          at least ``WIDE_FILTER_SHARE`` of the rows pass: LanceDB's unfiltered top ``k / share x
          WIDE_TEXT_SLACK`` checked on the mirror's columns of the hits (no prefilter of most of
          the table). A narrower one goes to LanceDB: its prefilter from a BITMAP or BTREE index
          costs less than the mirror's mask and the rows' addresses, and its search of the
          passing rows costs the same either way (at 1M rows, an agent: 10.6 ms prefiltered,
          10.2 by the addresses, 12.3 with the addresses written).
        - Episode ids: checked on LanceDB's unfiltered hits when that fetch is at most
          ``WIDE_TEXT_FETCH``, else searched in process (passing_text.py) when their terms are
          held, else LanceDB's search over their rows' addresses (``_allowed_text``)."""
        if where.get("episode_ids") is None:
            if WIDE_FILTER_SHARE > 1.0:
                return None
            n = mirror.cols.n
            sample = np.linspace(0, n - 1, min(n, WIDE_SAMPLE)).astype(np.int64)
            share = float(mirror.passes(where, sample).sum()) / max(int(mirror.alive[sample].sum()), 1)
            if share <= 0 or share < WIDE_FILTER_SHARE:
                return None
            return self._wide_text(ds, mirror, query, k, lambda r: mirror.passes(where, r),
                                   _fetch(k, mirror.live, share * mirror.live))
        keep = mirror.mask(where)
        rows = np.flatnonzero(keep)
        if not len(rows):
            return rows, np.zeros(0)
        fetch = _fetch(k, mirror.live, len(rows))
        found = self._wide_text(ds, mirror, query, k, lambda r: keep[r], fetch) if fetch <= WIDE_TEXT_FETCH \
            else self._passing_text(name, ds, mirror, rows, text, k)
        return found if found is not None else self._allowed_text(ds, mirror, query, k, rows)

    def _passing_text(self, name: str, ds: Any, mirror: Mirror, rows: np.ndarray, text: str,
                      k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """BM25's best ``k`` of mirror ``rows`` (those an episode-id filter passes), searched in
        process over their kept terms (passing_text.py): (rows, scores); None: search LanceDB."""

        def read(wanted: np.ndarray) -> list[str]:
            tbl = ds._take_rows(mirror.addresses(wanted), columns=["text"])
            return [str(t or "") for t in tbl.column("text").to_pylist()]

        return self._texts.search(name, mirror, rows, text, k, read)

    def _wide_text(self, ds: Any, mirror: Mirror, query: Any, k: int, passes: Callable[[np.ndarray], np.ndarray],
                   fetch: int) -> tuple[np.ndarray, np.ndarray] | None:
        """A wide filter's full-text search: LanceDB's unfiltered BM25 top ``fetch`` (``k / share x
        WIDE_TEXT_SLACK``), the mirror rows ``passes`` accepts, best first: (rows, scores), what
        its prefiltered search gives (its scores take the whole table's statistics either way),
        without a prefilter. None: fewer than ``k`` passed of a full fetch (or no full-text index)."""
        hits = _mirror_hits(ds, mirror, query, fetch)
        if hits is None:
            return None
        rows, scores = hits
        found = rows >= 0
        found[found] = passes(rows[found])
        if int(found.sum()) < k and len(rows) >= fetch:
            return None
        rows, scores = rows[found], scores[found]
        order = np.argsort(-scores, kind="stable")[:k]
        self._texts.counts["wide"] += 1
        return rows[order], scores[order]

    def _allowed_text(self, ds: Any, mirror: Mirror, query: Any, k: int,
                      rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """LanceDB's BM25 top ``k`` of mirror ``rows`` (a filter's passing rows): their addresses
        are the search's prefilter (``row_addr_allowlist``), so no scalar index is read and no SQL
        predicate evaluated; the ranking and scores are those of the same search with the filter
        (the whole table's statistics). None: no full-text index."""
        hits = _mirror_hits(ds, mirror, query, k, row_addr_set(mirror.cols.addr[rows]))
        if hits is None:
            return None
        found, scores = hits
        scores, found = scores[found >= 0], found[found >= 0]
        order = np.argsort(-scores, kind="stable")
        self._texts.counts["allowed"] += 1
        return found[order], scores[order]

    def _matches(self, ds: Any, query: Any, k: int, pred: str | None, select: Sequence[str] | None,
                 tenant_id: str, mirror: Mirror | None = None, allow: bytes | None = None) -> list[dict[str, Any]]:
        """LanceDB's top ``k`` of ``ds`` by BM25 for the full-text ``query``, ``pred`` pushed into the
        search, best first (with a mirror: row addresses and scores from LanceDB, the rows from the
        mirror; and ``allow``, row addresses (``row_addr_set``) the search is restricted to beside
        ``pred``). The dataset directly, as in vector_search (lancedb's query builder adds ~4 ms)."""
        if mirror is not None:
            tbl = ds.scanner(columns=["_score"], with_row_address=True, full_text_query=query, filter=pred,
                             prefilter=pred is not None, row_addr_allowlist=allow, limit=k).to_table()
            rows = mirror.rows_of(tbl.column("_rowaddr").to_numpy())
            found = rows >= 0
            rows = rows[found]
            scores = np.asarray(tbl.column("_score").to_numpy(zero_copy_only=False))[found]
            results = self._mirror_rows(ds, mirror, rows, mirror.unit_vectors(rows),
                                        [("bm25", float(x)) for x in scores], select, tenant_id)
        else:
            tbl = ds.to_table(columns=None if select is None else [*select, "_score"],  # by name: lance warns otherwise
                              full_text_query=query, filter=pred, prefilter=pred is not None, limit=k)
            results = self._rows(tbl, tenant_id, "_score", "bm25")
        results.sort(key=lambda r: r["bm25"], reverse=True)
        return first_per_episode(results)


def _fetch(k: int, live: int, passing: float) -> int:
    """Hits of an unfiltered search that hold ``k`` of a filter ``passing`` rows of ``live`` pass,
    with ``WIDE_TEXT_SLACK`` for chance."""
    return max(k, math.ceil(k * live / max(passing, 1.0) * WIDE_TEXT_SLACK))


def _match(text: str) -> Any:
    """A ``MatchQuery`` of ``text`` on the text column: what lancedb makes of a plain string (no
    query syntax), each word's rows scored by BM25."""
    from lance.query import MatchQuery

    return MatchQuery(text, "text")


def _mirror_hits(ds: Any, mirror: Mirror, query: Any, limit: int,
                 allow: bytes | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """LanceDB's BM25 top ``limit`` of ``ds`` for the full-text ``query`` (restricted to the row
    addresses ``allow``, if given) as mirror rows (-1: a row the mirror does not hold) and scores;
    None: no full-text index."""
    try:
        tbl = ds.scanner(columns=["_score"], with_row_address=True, full_text_query=query,
                         row_addr_allowlist=allow, limit=limit).to_table()
    except ValueError as exc:
        if "index" in str(exc).lower():
            return None
        raise
    return (mirror.rows_of(tbl.column("_rowaddr").to_numpy()),
            np.asarray(tbl.column("_score").to_numpy(zero_copy_only=False), np.float64))


def row_addr_set(addrs: np.ndarray) -> bytes:
    """Row addresses as lance's ``RowAddrTreeMap::serialize_into`` writes them (what
    ``lance.dataset.serialize_row_addrs`` makes of a list, ~10x faster for 100k addresses): per
    fragment, its id, the byte size and a portable roaring bitmap of its offsets (no run containers:
    arrays of up to 4,096 offsets, else bitmaps of 65,536 bits).

    The format is lance's, not a documented one: the first call checks this encoder against
    lance's own serializer on a sample with both container kinds, and a pylance that writes
    otherwise gets its own serializer's bytes (slower, never wrong)."""
    if not _ROW_ADDR_SET_OK:
        _ROW_ADDR_SET_OK.append(_encodes_like_lance())
    if not _ROW_ADDR_SET_OK[0]:
        from lance.dataset import serialize_row_addrs

        return bytes(serialize_row_addrs(sorted(set(np.asarray(addrs, np.int64).tolist()))))
    return _row_addr_set(addrs)


_ROW_ADDR_SET_OK: list[bool] = []  # [whether _row_addr_set writes what this pylance writes], once checked


def _encodes_like_lance() -> bool:
    """Whether ``_row_addr_set`` writes what the installed lance's ``serialize_row_addrs`` writes,
    on addresses of two fragments, one with an array container and one with a bitmap."""
    try:
        from lance.dataset import serialize_row_addrs
    except ImportError:  # pragma: no cover - a pylance without it has no allowlist either
        return True
    sample = np.r_[np.arange(3, 9000, 2, dtype=np.int64), (np.int64(5) << 32) + np.array([1, 70_000, 70_001])]
    same = _row_addr_set(sample) == bytes(serialize_row_addrs(sample.tolist()))
    if not same:
        log.warning("this pylance serializes row addresses otherwise: its own serializer is used (slower)")
    return bool(same)


def _row_addr_set(addrs: np.ndarray) -> bytes:
    """``row_addr_set``'s encoder (see there)."""
    a = np.asarray(addrs, np.int64)
    if len(a) > 1 and not bool(np.all(a[1:] > a[:-1])):  # a mirror's rows are mostly in address order
        a = np.sort(a, kind="stable")  # (np.unique: 5x slower, it hashes first)
        a = a[np.r_[True, a[1:] != a[:-1]]]
    frags = a >> 32
    starts = np.flatnonzero(np.r_[True, frags[1:] != frags[:-1]]) if len(a) else np.zeros(0, np.int64)
    out = [np.uint32(len(starts)).tobytes()]
    for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(a)]):
        offsets = (a[start:end] & 0xFFFFFFFF).astype(np.uint32)
        keys = offsets >> 16
        firsts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        cards = np.diff(np.r_[firsts, len(offsets)])
        blocks = []
        for first, card in zip(firsts.tolist(), cards.tolist()):
            low = (offsets[first:first + card] & 0xFFFF).astype("<u2")
            if card <= 4096:
                blocks.append(low.tobytes())
            else:
                bits = np.zeros(65536, bool)
                bits[low] = True
                blocks.append(np.packbits(bits, bitorder="little").tobytes())
        n = len(firsts)
        head = np.empty(2 * n, "<u2")
        head[0::2], head[1::2] = keys[firsts], cards - 1
        at = 8 + 8 * n + np.cumsum([0, *[len(b) for b in blocks[:-1]]])
        body = b"".join([np.array([12346, n], "<u4").tobytes(), head.tobytes(), at.astype("<u4").tobytes(), *blocks])
        out += [np.array([int(a[start] >> 32), len(body)], "<u4").tobytes(), body]
    return b"".join(out)


def _has_metadata(where: dict[str, Any] | None) -> bool:
    """Whether ``where`` filters on episode metadata (terms the mirror does not hold)."""
    return bool(where and (where.get(METADATA_TERMS) or where.get("metadata_any")))
