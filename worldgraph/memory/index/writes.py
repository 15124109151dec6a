"""Writing the episode index: upserts, appends of new episodes, deletes, prune."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from worldgraph.errors import EmbeddingDimensionError, InvalidInputError
from worldgraph.memory.index import objectstore
from worldgraph.memory.index.maintenance import IndexMaintenance, scalar_index_config
from worldgraph.memory.index.schema import (
    FTS_INDEX_NAME,
    METADATA_TERMS,
    SCALAR_INDEXES,
    STRING_COLUMNS,
    as_timestamp,
    require_tenant_id,
    sql_literal,
    table_name,
)
from worldgraph.memory.index.tables import TenantTable
from worldgraph.memory.record import EpisodeRows

log = logging.getLogger("worldgraph.memory.index.episode_index")


class IndexWrites(IndexMaintenance):
    """The write path of ``EpisodeIndex``; each write is followed by cheap bookkeeping (``_after_write``)."""

    def _to_arrow(self, rows: Sequence[dict[str, Any]]) -> pa.Table:
        if isinstance(rows, EpisodeRows):
            table = self._columns_to_arrow(rows)
            if table is not None:
                return table
            rows = list(rows)  # anything unusual: row by row, so an error names the row
        n = len(rows)
        d = self.dimensions
        vecs: list[Any] = []
        cols: dict[str, list[Any]] = {name: [] for name in self.schema.names if name != "vector"}
        seen: dict[str, int] = {}
        keep: list[int] = []
        now = time.time()
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                raise InvalidInputError(f"rows[{i}]", f"expected a dict, got {type(row).__name__}")
            eid = row.get("episode_id")
            if not isinstance(eid, str) or not eid:
                raise InvalidInputError(f"rows[{i}].episode_id", "must be a non-empty string")
            tid = row.get("tenant_id")
            if not isinstance(tid, str) or not tid:
                raise InvalidInputError(f"rows[{i}].tenant_id", "must be a non-empty string")
            vec = row.get("vector")
            if vec is None:
                raise InvalidInputError(f"rows[{i}].vector", "is required")
            vecs.append(vec)
            for name in STRING_COLUMNS:
                value = row.get(name)
                if value is None:
                    value = ""
                elif not isinstance(value, str):
                    value = str(value)
                cols[name].append(value)
            canvas = row.get("canvas_id")
            cols["canvas_id"].append(None if canvas in (None, "") else str(canvas))
            actions = row.get("canvas_action_ids") or []
            if isinstance(actions, str):
                actions = [actions]
            cols["canvas_action_ids"].append([str(a) for a in actions])
            terms = row.get(METADATA_TERMS) or []
            if isinstance(terms, str) or not all(isinstance(t, str) for t in terms):
                raise InvalidInputError(f"rows[{i}].{METADATA_TERMS}", "must be a list of strings")
            cols[METADATA_TERMS].append(list(terms))
            cols["success"].append(bool(row.get("success", False)))
            conf = row.get("confidence")
            cols["confidence"].append(0.0 if conf is None else float(conf))
            ts = row.get("timestamp")
            cols["timestamp"].append(now if ts is None else as_timestamp(ts, f"rows[{i}].timestamp"))
            if eid in seen:  # the last row of a batch wins, as if written one after another
                keep[seen[eid]] = -1
            seen[eid] = len(keep)
            keep.append(i)
        vectors = self._vector_matrix(vecs)
        arrays: list[pa.Array] = []
        for field in self.schema:
            if field.name == "vector":
                values = pa.array(vectors.reshape(-1)).cast(field.type.value_type)
                arrays.append(pa.FixedSizeListArray.from_arrays(values, d))
            else:
                arrays.append(pa.array(cols[field.name], type=field.type))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if len(seen) != n:
            table = table.take(pa.array([i for i in keep if i >= 0]))
        return table

    def _columns_to_arrow(self, rows: EpisodeRows) -> pa.Table | None:
        """The table ``_to_arrow`` makes of these rows, built from their columns (``EpisodeRows``:
        records the store holds, so every check of the row path holds by construction, and is
        only confirmed here per column); None when a column needs the row path's conversions or
        errors (a value of another type, a repeated id, a timestamp that is not finite)."""
        cols: dict[str, Any] = rows.columns()
        n = len(rows)
        if n == 0:
            return None
        ids = cols["episode_id"]
        if not all(type(x) is str and x for x in ids) or not all(type(x) is str and x for x in cols["tenant_id"]):
            return None
        if len(set(ids)) != n:  # the row path keeps the last row of an id
            return None
        for name in STRING_COLUMNS:
            if not all(type(x) is str for x in cols[name]):
                return None
        cols["canvas_id"] = [None if c in (None, "") else c for c in cols["canvas_id"]]
        if not all(c is None or type(c) is str for c in cols["canvas_id"]):
            return None
        if not all(type(a) is str for acts in cols["canvas_action_ids"] for a in acts):
            return None
        if not np.isfinite(np.asarray(cols["timestamp"], dtype=np.float64)).all():
            return None
        vectors = self._vector_matrix(list(rows.vectors[:n]))
        arrays: list[pa.Array] = []
        for field in self.schema:
            if field.name == "vector":
                values = pa.array(vectors.reshape(-1)).cast(field.type.value_type)
                arrays.append(pa.FixedSizeListArray.from_arrays(values, self.dimensions))
            else:
                arrays.append(pa.array(cols[field.name], type=field.type))
        return pa.Table.from_arrays(arrays, schema=self.schema)

    def _vector_matrix(self, vecs: list[Any]) -> np.ndarray:
        """The rows' vectors as one float32 matrix, each checked: ``dimensions`` finite numbers.
        One conversion and one check for the whole batch (per row they were ~4 us each, the
        most of this step's time); a batch that does not convert as a whole is taken row by row,
        so the error names the row."""
        d = self.dimensions
        try:
            matrix = np.asarray(vecs, dtype=np.float32)
        except (TypeError, ValueError):
            matrix = None
        if matrix is None or matrix.shape != (len(vecs), d):
            matrix = np.empty((len(vecs), d), dtype=np.float32)
            for i, vec in enumerate(vecs):
                try:
                    arr = np.asarray(vec, dtype=np.float32).reshape(-1)
                except (TypeError, ValueError) as exc:
                    raise EmbeddingDimensionError(f"rows[{i}].vector", f"expected {d} numbers: {exc}") from exc
                if arr.shape[0] != d:
                    raise EmbeddingDimensionError(
                        f"rows[{i}].vector", f"expected length {d} (index dimensions), got {arr.shape[0]}"
                    )
                matrix[i] = arr
        finite = np.isfinite(matrix).all(axis=1)
        if not finite.all():
            raise EmbeddingDimensionError(f"rows[{int(np.argmin(finite))}].vector", "contains NaN or infinite values")
        return matrix

    @objectstore.guarded("writing episode rows")
    def upsert(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace rows by ``episode_id`` within their tenant (every column is overwritten)."""
        self._writable("writing episode index rows")
        if not isinstance(rows, EpisodeRows):
            rows = list(rows)
        if not rows:
            return
        with self._lock:
            for part, n in self._merge_by_tenant(self._to_arrow(rows), "upsert"):
                self._after_write(part, n)

    def _merge_by_tenant(self, data: pa.Table, what: str) -> list[tuple[TenantTable, int]]:
        """Merge-insert ``data`` (keyed by episode_id) into each of its tenants' tables;
        returns the tables written and how many rows each got."""
        tenants = data.column("tenant_id").unique().to_pylist()
        written = []
        for tenant in tenants:
            sub = data if len(tenants) == 1 else data.filter(pc.equal(data.column("tenant_id"), tenant))
            part = self._part(tenant, create=True)
            assert part is not None
            self._retry(part, lambda part=part, sub=sub: self._write_part(part, sub), what)
            written.append((part, sub.num_rows))
        return written

    def _write_part(self, part: TenantTable, data: pa.Table) -> None:
        """Merge-insert ``data`` by episode_id (an append while the table is empty: a reindex's
        first batch, a new tenant). Fresh episodes take the cheaper path of ``adding``."""
        if self._is_local and part.table.count_rows() == 0:
            part.table.add(data)
            return
        (part.table.merge_insert("episode_id")
         .when_matched_update_all()
         .when_not_matched_insert_all()
         .execute(data))

    @contextmanager
    def adding(self, tenant_id: str) -> Iterator[Callable[[Sequence[dict[str, Any]]], None]]:
        """A window for indexing episodes that are being stored for the first time; yields ``add(rows)``.

        A merge-insert joins its batch against the whole table, so its cost grows with the table
        (~0.2 s per 1,000 rows at 1M); an append does not look at the table at all (~10 ms). An
        append is only safe if no one else can have written these episode ids, and the window
        makes that so: it holds the table's write lock from before the caller stores the
        episodes (in the graph store, which refuses an id it already holds) until ``add`` has
        appended their rows. Anyone else who writes index rows for these ids (``retry_indexing``
        of another process, a reindex) reads them from the store, so only after the store commit,
        and writes under the same lock, so only after the append: its merge-insert then finds
        the rows. Off the local disk there is no such lock, and ``add`` is ``upsert``.

        The window never fails to open: if the table cannot be reached, ``add`` is ``upsert``
        and raises, so the caller's store write still happens and the episodes are marked for
        re-indexing.
        """
        self._writable("writing episode index rows")
        require_tenant_id(tenant_id)
        part: TenantTable | None = None
        if self._is_local:
            try:
                part = self._part(tenant_id, create=True)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.warning("episode index: cannot open the table of %r (%s); indexing by upsert", tenant_id, exc)
        if part is None:
            yield self.upsert
            return
        appended: list[int] = []

        def add(rows: Sequence[dict[str, Any]]) -> None:
            data = self._to_arrow(rows if isinstance(rows, EpisodeRows) else list(rows))
            if data.num_rows == 0:
                return
            if any(t != tenant_id for t in data.column("tenant_id").unique().to_pylist()):
                raise InvalidInputError("rows.tenant_id", f"every row must belong to tenant {tenant_id!r}")
            self._retry(part, lambda: part.table.add(data), "append", lock=False)  # the window holds it
            appended.append(data.num_rows)

        with self._lock, self._commit_lock(part):
            yield add
        for n in appended:
            self._after_write(part, n)

    @objectstore.guarded("deleting episode rows")
    def delete(self, episode_ids: Iterable[str]) -> None:
        """Remove rows by episode id, whatever their tenant (ids that are not there are ignored)."""
        self._writable("deleting episode index rows")
        ids = [e for e in dict.fromkeys(episode_ids)]
        for e in ids:
            if not isinstance(e, str) or not e:
                raise InvalidInputError("episode_ids", f"expected non-empty strings, got {e!r}")
        if not ids:
            return
        with self._lock:
            for part in self._all_parts():
                touched = False
                for start in range(0, len(ids), 1000):
                    chunk = ids[start:start + 1000]
                    pred = f"episode_id IN ({', '.join(sql_literal(e, 'episode_ids') for e in chunk)})"
                    # a lookup on the episode_id index; only tables holding the ids get a commit
                    if part.table.count_rows(pred) == 0:
                        continue
                    self._retry(part, lambda part=part, pred=pred: part.table.delete(pred), "delete")
                    touched = True
                if touched:
                    self._texts.drop(part.name)  # the forgotten rows' words leave this process at once
                    self._after_write(part, 0)

    def delete_tenant(self, tenant_id: str) -> None:
        """Remove every row of one tenant (before reindexing it from the graph store)."""
        self._writable("deleting episode index rows")
        part = self._part(tenant_id)
        if part is None:
            return
        with self._lock:
            self._retry(part, lambda: part.table.delete("true"), "delete_tenant")
            self._texts.drop(part.name)
            self._common.drop(part.name)
            self._after_write(part, 0)

    @objectstore.guarded("purging forgotten episode rows")
    def purge(self, episode_ids: Iterable[str], tenants: Iterable[str], drop_tenants: Iterable[str],
              progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
        """Physical removal of forgotten rows: delete ``episode_ids`` (rows a forget could not
        delete, after a crash), drop the tables of ``drop_tenants``, then in each of ``tenants``'
        tables rewrite every fragment that has deleted rows (compaction with no threshold),
        rebuild the full-text and scalar indexes from the rows that remain (an index keeps the
        terms of deleted rows until rebuilt) and delete every older version's files. Afterwards no
        file of those tables holds a forgotten row. The ANN index holds vectors only; compaction
        remaps it to the rows that remain. ``progress(done, total)`` is called after each table
        (dropped or rewritten)."""
        from lancedb.index import FTS

        self._writable("purging the episode index")
        ids = [e for e in dict.fromkeys(episode_ids) if isinstance(e, str) and e]
        if ids:
            self.delete(ids)
        drops, rewrites = list(dict.fromkeys(drop_tenants)), list(dict.fromkeys(tenants))
        total, done = len(drops) + len(rewrites), 0
        if progress:
            progress(0, total)
        dropped = 0
        for tenant in drops:
            name = table_name(tenant)
            with self._lock, self._parts_lock:
                if name in self._table_names():
                    self._db.drop_table(name)
                    dropped += 1
                self._parts.pop(name, None)
                self._small.drop(name)
                self._mirrors.drop(name)
                self._texts.drop(name)
                self._common.drop(name)
            done += 1
            if progress:
                progress(done, total)
        rewritten = 0
        for tenant in rewrites:
            part = self._part(tenant)
            done += 1
            if part is None:
                if progress:
                    progress(done, total)
                continue
            # a compaction or index update in progress first ends: it may copy rows this purge
            # removes, and what it writes must not be deleted under it (tables.py, _building)
            with self._lock, self._building(part), self._compaction_lock(part), self._commit_lock(part):
                ds = part.open_dataset()
                if any(f.metadata.deletion_file is not None for f in ds.get_fragments()):
                    ds.optimize.compact_files(target_rows_per_fragment=max(self.config.compact_target_rows, 1),
                                              materialize_deletions=True, materialize_deletions_threshold=0.0)
                    rewritten += 1
                part.table.checkout_latest()
                names = self._indexes(part, refresh=True)
                if part.table.count_rows() > 0:
                    for column, kind in SCALAR_INDEXES.items():
                        if f"{column}_idx" in names:
                            part.table.create_index(column, config=scalar_index_config(kind), name=f"{column}_idx",
                                                    replace=True)
                    if FTS_INDEX_NAME in names:
                        part.table.create_index("text", config=FTS(), name=FTS_INDEX_NAME, replace=True)
                # every file no version names too, however young: what a writer, an index update or
                # a compaction killed before its commit left may copy the forgotten rows; under
                # these locks none is in progress (a local folder: an object store has no locks,
                # and there LanceDB deletes such files once they are 7 days old)
                part.open_dataset().cleanup_old_versions(older_than=timedelta(0), delete_unverified=self._is_local)
                part.table.checkout_latest()
                self._indexes(part, refresh=True)
                self._small.drop(part.name)
                self._mirrors.drop(part.name)
                self._texts.drop(part.name)
                self._common.drop(part.name)
            if progress:
                progress(done, total)
        self.keep_private(now=True)
        return {"index_rows_deleted": len(ids), "index_tables_dropped": dropped, "index_tables_rewritten": rewritten}

    def clear(self) -> None:
        """Delete every row of every tenant (the tables, the label and the indexes stay)."""
        self._writable("clearing the episode index")
        with self._lock:
            for part in self._all_parts():
                self._retry(part, lambda part=part: part.table.delete("true"), "clear")

    def prune(self, keep: dict[str, set[str]], tenant_id: str | None = None) -> int:
        """Delete the rows whose episode is not in ``keep`` (tenant id -> ids of the episodes the
        graph store holds), in every table or in ``tenant_id``'s; returns how many went. The
        last step of a reindex, which overwrites rows in place instead of emptying tables first."""
        self._writable("pruning the episode index")
        removed = 0
        with self._lock:
            for part in self._selected_parts(tenant_id):
                cols = part.latest_dataset().to_table(columns=["episode_id", "tenant_id"])
                stale = [e for e, t in zip(cols.column("episode_id").to_pylist(), cols.column("tenant_id").to_pylist())
                         if e not in keep.get(t, ())]
                for start in range(0, len(stale), 1000):
                    pred = "episode_id IN (" + ", ".join(sql_literal(e, "episode_ids")
                                                         for e in stale[start:start + 1000]) + ")"
                    self._retry(part, lambda part=part, pred=pred: part.table.delete(pred), "prune")
                if stale:
                    removed += len(stale)
                    self._after_write(part, 0)
        return removed
