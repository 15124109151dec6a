"""The LanceDB sidecar: vectors and full text of episodes, for recall.

This is derived data. The graph store is the system of record; the index can be dropped and
rebuilt from it at any time (``worldgraph reindex``). Each tenant has its own table (LanceDB's
recommendation for multi-tenant isolation): a search reads only its tenant's rows and its
tenant's ANN index, with no tenant predicate to evaluate. Table names are derived from the tenant
id (``table_name``); a tenant that never wrote has no table, and its searches return nothing.

``index_meta.json`` beside the tables records the embedder that built them and the vector size, so
opening them with another embedder fails loudly instead of comparing vectors from two models.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: LanceDB's own conflict handling only
    fcntl = None  # type: ignore[assignment]

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import EmbeddingDimensionError, InvalidInputError, ReadOnlyError
from worldgraph.memory import objectstore
from worldgraph.memory.embeddings import same_fallback_label
from worldgraph.memory.index_policy import (
    ann_due_rows, ann_search_params, compaction_due, fold_new_rows, index_partitions, vector_index_config,
)

log = logging.getLogger(__name__)

__all__ = ["EpisodeIndex", "episode_schema", "build_filter", "metadata_filter", "sql_literal", "table_name",
           "META_FILE", "TABLE_NAME"]

TABLE_NAME = "episodes"  # the single table of the old layout (META_FORMAT 1), migrated on open
META_FILE = "index_meta.json"
WRITE_LOCK_FILE = ".write.lock"
META_FORMAT = 2  # 2: one table per tenant
# Table names: "ep-<tenant>" for tenants made of lower-case letters, digits and _.- (readable, and
# distinct on case-insensitive file systems); "eph-<hex of the utf-8 bytes>" for any other tenant
# id; "eps-<sha256>" for very long ones. The three prefixes differ at their third character, so
# two tenants never share a table.
def stored_embedder_name(path: str | Path) -> str | None:
    """The embedder name recorded beside the index at ``path`` (None: new, unlabelled, or an object
    store that does not answer: opening the index then says why)."""
    try:
        if objectstore.is_remote(path):
            text = objectstore.read_meta(str(path), META_FILE)
            name = json.loads(text).get("embedder") if text is not None else None
        else:
            name = json.loads((Path(path) / META_FILE).read_text()).get("embedder")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None


_PLAIN_TENANT = re.compile(r"[a-z0-9][a-z0-9_.-]{0,127}")
TABLE_PREFIXES = ("ep-", "eph-", "eps-")
VECTOR_INDEX_NAME = "vector_idx"
FTS_INDEX_NAME = "text_idx"
# column -> index kind; BITMAP suits the low-cardinality columns, BTREE the rest.
SCALAR_INDEXES: dict[str, str] = {
    "episode_id": "BTREE",  # merge_insert and delete look rows up by it
    "tenant_id": "BTREE",
    "agent_role": "BTREE",
    "agent_id": "BTREE",
    "canvas_id": "BTREE",
    "timestamp": "BTREE",
    "success": "BITMAP",
}
WHERE_KEYS = frozenset({"agent_role", "agent_id", "canvas_ids", "start", "end", "success_only"})
STRING_COLUMNS = ("episode_id", "tenant_id", "agent_id", "agent_role", "task_type", "outcome", "text")
_COMMIT_RETRIES = 5
PK_METADATA = "lance-schema:unenforced-primary-key"


def episode_schema(dimensions: int) -> pa.Schema:
    """The arrow schema of the ``episodes`` table for vectors of ``dimensions`` floats."""
    return pa.schema([
        # Declared as the (unenforced) primary key: lance then records the keys a merge_insert
        # inserts, so two writers inserting the same new episode_id at once conflict and retry
        # instead of both committing a row (lance issue #4585).
        pa.field("episode_id", pa.string(), nullable=False, metadata={PK_METADATA: "true"}),
        pa.field("tenant_id", pa.string(), nullable=False),
        pa.field("agent_id", pa.string()),
        pa.field("agent_role", pa.string()),
        pa.field("task_type", pa.string()),
        pa.field("outcome", pa.string()),
        pa.field("success", pa.bool_()),
        pa.field("confidence", pa.float32()),
        pa.field("timestamp", pa.float64()),  # unix seconds, UTC
        pa.field("canvas_id", pa.string()),
        pa.field("canvas_action_ids", pa.list_(pa.string())),
        pa.field("text", pa.string()),
        pa.field("vector", pa.list_(pa.float32(), dimensions), nullable=False),
    ])


# ---------------------------------------------------------------------------------------------
# Filters: every literal goes through sql_literal, never raw text
# ---------------------------------------------------------------------------------------------


def sql_literal(value: Any, field: str = "value") -> str:
    """A SQL literal for ``value``: strings single-quoted with quotes doubled, finite numbers, bools."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, np.integer, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            raise InvalidInputError(field, f"must be a finite number, got {value!r}")
        return repr(f)
    if isinstance(value, str):
        if "\x00" in value:
            raise InvalidInputError(field, "must not contain NUL characters")
        return "'" + value.replace("'", "''") + "'"
    raise InvalidInputError(field, f"expected a string, number or bool, got {type(value).__name__}")


def _as_timestamp(value: Any, field: str) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise InvalidInputError(field, f"expected unix seconds (float) or a datetime, got {value!r}")
    f = float(value)
    if not math.isfinite(f):
        raise InvalidInputError(field, f"must be a finite number, got {value!r}")
    return f


def _check_tenant(tenant_id: Any) -> str:
    if not isinstance(tenant_id, str) or not tenant_id:
        raise InvalidInputError("tenant_id", "must be a non-empty string")
    return tenant_id


def table_name(tenant_id: str) -> str:
    """The LanceDB table that holds ``tenant_id``'s episodes (a pure function of the id)."""
    _check_tenant(tenant_id)
    if _PLAIN_TENANT.fullmatch(tenant_id):
        return "ep-" + tenant_id
    raw = tenant_id.encode("utf-8")
    if len(raw) <= 100:
        return "eph-" + raw.hex()
    return "eps-" + hashlib.sha256(raw).hexdigest()


def _is_part_name(name: str) -> bool:
    return name.startswith(TABLE_PREFIXES)


def _where_parts(where: dict[str, Any] | None) -> list[str]:
    if not where:
        return []
    if not isinstance(where, dict):
        raise InvalidInputError("where", f"expected a dict of filters, got {type(where).__name__}")
    unknown = set(where) - WHERE_KEYS
    if unknown:
        raise InvalidInputError(
            "where", f"unknown filter(s) {sorted(unknown)}; allowed: {sorted(WHERE_KEYS)}"
        )
    parts: list[str] = []
    for key in ("agent_role", "agent_id"):
        value = where.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise InvalidInputError(f"where.{key}", f"expected a string, got {type(value).__name__}")
            parts.append(f"{key} = {sql_literal(value, f'where.{key}')}")
    canvas_ids = where.get("canvas_ids")
    if canvas_ids:
        if isinstance(canvas_ids, str):
            canvas_ids = [canvas_ids]
        lits = [sql_literal(c, "where.canvas_ids") if isinstance(c, str)
                else _raise(InvalidInputError("where.canvas_ids", f"expected strings, got {c!r}"))
                for c in canvas_ids]
        parts.append(f"canvas_id IN ({', '.join(lits)})")
    start, end = where.get("start"), where.get("end")
    if start is not None:
        parts.append(f"timestamp >= {sql_literal(_as_timestamp(start, 'where.start'))}")
    if end is not None:
        parts.append(f"timestamp <= {sql_literal(_as_timestamp(end, 'where.end'))}")
    if where.get("success_only"):
        parts.append("success = true")
    return parts


def metadata_filter(where: dict[str, Any] | None = None) -> str | None:
    """The SQL predicate for the optional recall filters alone (None: no filter).

    ``where`` keys: ``agent_role`` / ``agent_id`` (str), ``canvas_ids`` (list of str; empty means no filter),
    ``start`` / ``end`` (unix seconds or datetime, inclusive), ``success_only`` (bool).
    """
    parts = _where_parts(where)
    if not parts:
        return None
    return " AND ".join(f"({p})" for p in parts)


def build_filter(tenant_id: str, where: dict[str, Any] | None = None) -> str:
    """The SQL predicate for a tenant and the optional recall filters (see ``metadata_filter``).

    The index no longer needs the tenant part (each tenant has its own table); this is kept for
    callers that filter a table holding several tenants.
    """
    parts = [f"tenant_id = {sql_literal(_check_tenant(tenant_id), 'tenant_id')}"] + _where_parts(where)
    if len(parts) == 1:
        return parts[0]
    return " AND ".join(f"({p})" for p in parts)


def _raise(exc: Exception) -> Any:
    raise exc


def _unique(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """First row of each episode_id (a defensive guard: the table should hold one per id)."""
    seen: set[str] = set()
    out = []
    for r in results:
        if r["episode_id"] not in seen:
            seen.add(r["episode_id"])
            out.append(r)
    return out


def _is_commit_conflict(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "conflict" in text or "retryable" in text or "concurrent" in text


# ---------------------------------------------------------------------------------------------
# The index
# ---------------------------------------------------------------------------------------------


class _Part:
    """One tenant's table and this process's bookkeeping for it."""

    __slots__ = ("name", "table", "index_names", "writes", "rows_since_optimize", "rows_base", "rows_added",
                 "ann_requested", "dataset", "ann_partitions")

    def __init__(self, name: str, table: Any) -> None:
        self.name = name
        self.table = table
        self.index_names: set[str] | None = None  # cache of the table's index names
        self.writes = 0  # writes through this process
        self.rows_since_optimize = 0  # rows written through this process since the last optimize
        self.rows_base: int | None = None  # last count_rows() seen while the ANN index is missing
        self.rows_added = 0  # rows written since rows_base
        self.ann_requested = False  # an ANN build is queued / running in the background
        self.dataset: Any = None  # the table's pylance dataset, for the unfiltered search path
        self.ann_partitions: int | None = None  # IVF partitions of the ANN index (cache)

    def latest_dataset(self) -> Any:
        """The pylance dataset at the table's newest version (this or another process's
        commits). Opening one costs ~50 ms; checking its version ~2 ms, so it is kept."""
        ds = self.dataset
        if ds is None:
            ds = self.dataset = self.table.to_lance()
        elif ds.latest_version != ds.version:
            ds = self.dataset = ds.checkout_version(ds.latest_version)
        return ds


class EpisodeIndex:
    """LanceDB tables of episodes at ``path``, one per tenant: upsert, delete, vector search, BM25 search.

    ``rebuild=True`` drops every table (for ``worldgraph reindex``). Several processes may open
    the same path: ``read_consistency_interval=0`` (default) makes every read see other
    processes' commits; local writes to a table are serialised by a lock file per table and
    commit races are retried. ``ann_overfetch`` extra ANN candidates (up to k) are re-scored
    exactly once the vector index exists: 0 is fastest, 100 gives ~100% recall at about twice
    the cost.
    """

    def __init__(
        self,
        path: str | Path,
        dimensions: int,
        embedder_name: str,
        config: WorldGraphConfig | None = None,
        *,
        rebuild: bool = False,
        read_consistency_interval: timedelta | None = timedelta(seconds=0),
        ann_overfetch: int = 0,
        read_only: bool = False,
    ) -> None:
        import lancedb

        if not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions <= 0:
            raise InvalidInputError("dimensions", f"must be a positive integer, got {dimensions!r}")
        if not embedder_name or not isinstance(embedder_name, str):
            raise InvalidInputError("embedder_name", "must be a non-empty string")
        self.config = config if config is not None else WorldGraphConfig()
        self.path = str(path)
        self.dimensions = dimensions
        self.embedder_name = embedder_name
        self.ann_overfetch = max(0, int(ann_overfetch))
        self.schema = episode_schema(dimensions)
        self.read_only = read_only
        if read_only and rebuild:
            raise ReadOnlyError("rebuilding the episode index", "the index was opened read-only")
        self._is_local = "://" not in self.path
        # Read-only: no folder is made; an index that was never written has no tables.
        self._absent = read_only and self._is_local and not Path(self.path).is_dir()
        if self._is_local and not read_only:
            Path(self.path).mkdir(parents=True, exist_ok=True)
        with objectstore.object_store_errors(self.path, "opening the index"):
            self._db: Any = None if self._absent else lancedb.connect(
                self.path, read_consistency_interval=read_consistency_interval,
                storage_options=objectstore.storage_options(self.path))
        self._lock = threading.RLock()  # serialises this object's writes
        self._index_lock = threading.RLock()  # serialises index creation / optimize
        self._parts_lock = threading.Lock()  # guards opening / creating tables
        self._parts: dict[str, _Part] = {}  # table name -> part (opened lazily, cached)
        self._maint_lock = threading.Lock()
        self._maint_thread: threading.Thread | None = None
        self._maint_pending: set[tuple[str, str]] = set()  # (task, table name)
        self.maintenance_runs: list[dict[str, Any]] = []  # background runs: tasks, ok, seconds
        with objectstore.object_store_errors(self.path, "opening the index"):
            self._open(rebuild)

    # -- opening -----------------------------------------------------------------------------

    @property
    def meta_path(self) -> Path:
        return Path(self.path) / META_FILE

    def _read_meta(self) -> dict[str, Any] | None:
        try:
            if not self._is_local:  # an object store: one GET beside the tables
                text = objectstore.read_meta(self.path, META_FILE) if self._db is not None else None
                return None if text is None else json.loads(text)
            return json.loads(self.meta_path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("%s is not valid JSON; treating the index as unlabelled", self.meta_path)
            return None

    def _write_meta(self) -> None:
        if self.read_only:
            return
        meta = {"format": META_FORMAT, "layout": "table-per-tenant", "embedder": self.embedder_name,
                "dimensions": self.dimensions}
        if not self._is_local:  # one PUT replaces the object whole, as os.replace does the file
            objectstore.write_meta(self.path, META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n")
            return
        tmp = self.meta_path.with_name(f".{META_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.meta_path)

    def _table_names(self) -> list[str]:
        # lancedb 0.40: table_names() is deprecated, table_exists() is namespace-only (raises
        # NotImplementedError on a local connection); list_tables() pages.
        names: list[str] = []
        token = None
        if self._db is None:
            return names
        while True:
            resp = self._db.list_tables(page_token=token)
            names.extend(resp.tables or [])
            token = resp.page_token
            if not token:
                return names

    def _open(self, rebuild: bool) -> None:
        names = self._table_names()
        if rebuild:
            for name in names:
                if _is_part_name(name) or name == TABLE_NAME:
                    self._db.drop_table(name)
            self._write_meta()
            return
        meta = self._read_meta()
        existing_name = (meta or {}).get("embedder")
        existing_dim = (meta or {}).get("dimensions")
        part_names = [n for n in names if _is_part_name(n)]
        # the tables themselves are the authority on the vector size
        if TABLE_NAME in names:
            existing_dim = self._vector_size(self._db.open_table(TABLE_NAME))
        elif part_names:
            part = self._part_by_name(part_names[0], create=False)
            if part is not None:
                existing_dim = self._vector_size(part.table)
        relabel = existing_name is not None and existing_name != self.embedder_name \
            and same_fallback_label(existing_name, self.embedder_name)
        if relabel:
            # the label earlier versions derived from the class's module and name: the same class,
            # whatever its module was called when the index was built
            log.warning("episode index at %s: embedder label %r is now %r", self.path, existing_name, self.embedder_name)
            existing_name = self.embedder_name
        if (existing_dim is not None and existing_dim != self.dimensions) or (
                existing_name is not None and existing_name != self.embedder_name):
            raise InvalidInputError(
                "embedder",
                f"the episode index at {self.path} was built by {existing_name or 'an unknown embedder'} "
                f"with {existing_dim}-d vectors, but this process uses {self.embedder_name} with "
                f"{self.dimensions}-d vectors; run `worldgraph reindex` to rebuild the index for the "
                "new embedder",
            )
        if relabel or meta is None or meta.get("format") != META_FORMAT:
            if meta is None and (part_names or TABLE_NAME in names):
                log.warning("%s has no %s; recording embedder %s", self.path, META_FILE, self.embedder_name)
            self._write_meta()  # before any table, so a table never exists without its label
        if TABLE_NAME in names:
            if self.read_only:
                raise ReadOnlyError("migrating the episode index to one table per tenant",
                                    f"the index at {self.path} was opened read-only and still has the old layout")
            self._migrate_single_table()

    @staticmethod
    def _vector_size(table: Any) -> int | None:
        return getattr(table.schema.field("vector").type, "list_size", None)

    def _migrate_single_table(self) -> None:
        """Move the rows of the old single ``episodes`` table into per-tenant tables, then drop it.

        Vectors are copied, nothing is re-embedded; merge-inserts make an interrupted migration
        safe to run again. One process migrates; the others wait for it.
        """
        with self._file_lock(".migrate.lock"):
            if TABLE_NAME not in self._table_names():
                return  # another process finished it
            legacy = self._db.open_table(TABLE_NAME)
            log.warning("episode index at %s: moving %d rows of the single table %r into one table per tenant",
                        self.path, legacy.count_rows(), TABLE_NAME)
            try:
                batches: Iterable[pa.RecordBatch] = legacy.to_lance().to_batches(batch_size=10_000)
            except Exception:  # pragma: no cover - no pylance
                batches = legacy.to_arrow().to_batches(max_chunksize=10_000)
            with self._lock:
                for batch in batches:
                    self._merge_by_tenant(pa.Table.from_batches([batch]).select(self.schema.names)
                                          .cast(self.schema), "migrate")
            self._db.drop_table(TABLE_NAME)
            for part in list(self._parts.values()):
                self._after_write(part, 0)  # scalar / FTS indexes; ANN in the background

    def _open_table(self, name: str) -> Any | None:
        if self._db is None or (self._is_local and not (Path(self.path) / f"{name}.lance").is_dir()):
            return None  # a stat, not an exception, for tenants that never wrote
        try:
            return self._db.open_table(name)
        except Exception as exc:
            if isinstance(exc, FileNotFoundError) or "not found" in str(exc).lower() \
                    or "does not exist" in str(exc).lower():
                return None
            raise

    def _part_by_name(self, name: str, create: bool) -> _Part | None:
        part = self._parts.get(name)
        if part is not None:
            return part
        with self._parts_lock:
            part = self._parts.get(name)
            if part is not None:
                return part
            table = self._open_table(name)
            if table is None:
                if not create:
                    return None
                self._writable("creating an episode table")
                with self._commit_lock(None):  # another process may be creating it too
                    table = self._open_table(name)
                    if table is None:
                        table = self._db.create_table(name, schema=self.schema, exist_ok=True)
            part = _Part(name, table)
            self._parts[name] = part
            return part

    def _part(self, tenant_id: str, create: bool = False) -> _Part | None:
        return self._part_by_name(table_name(tenant_id), create)

    def _all_parts(self) -> list[_Part]:
        parts = [self._part_by_name(n, create=False) for n in self._table_names() if _is_part_name(n)]
        return [p for p in parts if p is not None]

    def table_for(self, tenant_id: str) -> Any | None:
        """The ``lancedb`` table of ``tenant_id`` (None before its first write), for maintenance and inspection."""
        part = self._part(tenant_id)
        return part.table if part is not None else None

    def tenant_tables(self) -> list[str]:
        """Names of the per-tenant tables that exist (see ``table_name``)."""
        return sorted(n for n in self._table_names() if _is_part_name(n))

    def close(self, wait: bool = True) -> None:
        """Wait for background maintenance (LanceDB itself is embedded: nothing to release)."""
        if wait:
            self.wait_for_maintenance()

    def __enter__(self) -> "EpisodeIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ------------------------------------------------------------------------------

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyError(operation, f"the episode index at {self.path} was opened read-only")

    def _to_arrow(self, rows: Sequence[dict[str, Any]]) -> pa.Table:
        n = len(rows)
        d = self.dimensions
        vectors = np.empty((n, d), dtype=np.float32)
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
            try:
                arr = np.asarray(vec, dtype=np.float32).reshape(-1)
            except (TypeError, ValueError) as exc:
                raise EmbeddingDimensionError(f"rows[{i}].vector", f"expected {d} numbers: {exc}") from exc
            if arr.shape[0] != d:
                raise EmbeddingDimensionError(
                    f"rows[{i}].vector", f"expected length {d} (index dimensions), got {arr.shape[0]}"
                )
            if not np.isfinite(arr).all():
                raise EmbeddingDimensionError(f"rows[{i}].vector", "contains NaN or infinite values")
            vectors[i] = arr
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
            cols["success"].append(bool(row.get("success", False)))
            conf = row.get("confidence")
            cols["confidence"].append(0.0 if conf is None else float(conf))
            ts = row.get("timestamp")
            cols["timestamp"].append(now if ts is None else _as_timestamp(ts, f"rows[{i}].timestamp"))
            if eid in seen:  # the last row of a batch wins, as if written one after another
                keep[seen[eid]] = -1
            seen[eid] = len(keep)
            keep.append(i)
        arrays: list[pa.Array] = []
        for field in self.schema:
            if field.name == "vector":
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), d))
            else:
                arrays.append(pa.array(cols[field.name], type=field.type))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        if len(seen) != n:
            table = table.take(pa.array([i for i in keep if i >= 0]))
        return table

    @objectstore.guarded("writing episode rows")
    def upsert(self, rows: list[dict[str, Any]]) -> None:
        """Insert or replace rows by ``episode_id`` within their tenant (every column is overwritten)."""
        self._writable("writing episode index rows")
        rows = list(rows)
        if not rows:
            return
        with self._lock:
            for part, n in self._merge_by_tenant(self._to_arrow(rows), "upsert"):
                self._after_write(part, n)

    def _merge_by_tenant(self, data: pa.Table, what: str) -> list[tuple[_Part, int]]:
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

    def _write_part(self, part: _Part, data: pa.Table) -> None:
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
    def adding(self, tenant_id: str) -> Iterator[Callable[[list[dict[str, Any]]], None]]:
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
        _check_tenant(tenant_id)
        part: _Part | None = None
        if self._is_local:
            try:
                part = self._part(tenant_id, create=True)
            except Exception as exc:  # noqa: BLE001 - see the docstring
                log.warning("episode index: cannot open the table of %r (%s); indexing by upsert", tenant_id, exc)
        if part is None:
            yield self.upsert
            return
        appended: list[int] = []

        def add(rows: list[dict[str, Any]]) -> None:
            data = self._to_arrow(list(rows))
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
                    self._after_write(part, 0)

    def delete_tenant(self, tenant_id: str) -> None:
        """Remove every row of one tenant (before reindexing it from the graph store)."""
        self._writable("deleting episode index rows")
        part = self._part(tenant_id)
        if part is None:
            return
        with self._lock:
            self._retry(part, lambda: part.table.delete("true"), "delete_tenant")
            self._after_write(part, 0)

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

    @contextmanager
    def _commit_lock(self, part: _Part | None) -> Iterator[None]:
        """Exclusive lock shared by every process writing one table of this (local) index.

        LanceDB resolves most commit races itself, but under concurrent compaction two
        processes inserting the same new episode_id could both commit (lance issue #4585 and
        follow-ups). Writes are short, so on one machine we simply serialise them, per table
        (``part=None``: the lock for creating tables). Object stores (s3://) have no such lock
        and rely on LanceDB's conflict detection alone.
        """
        with self._file_lock(WRITE_LOCK_FILE if part is None else f".write.{part.name}.lock"):
            yield

    @contextmanager
    def _file_lock(self, filename: str) -> Iterator[None]:
        """An exclusive flock on ``filename`` beside the tables (a no-op off the local disk)."""
        if fcntl is None or not self._is_local:
            yield
            return
        with open(Path(self.path) / filename, "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _retry(self, part: _Part, fn: Any, what: str, lock: bool = True) -> Any:
        delay = 0.05
        for attempt in range(1, _COMMIT_RETRIES + 1):
            try:
                if not lock:
                    return fn()
                with self._commit_lock(part):
                    return fn()
            except Exception as exc:  # lancedb raises plain OSError/RuntimeError/ValueError
                if attempt == _COMMIT_RETRIES or not _is_commit_conflict(exc):
                    raise
                log.info("%s lost a commit race (attempt %d): %s; retrying", what, attempt, exc)
                time.sleep(delay)
                delay *= 2
                try:
                    part.table.checkout_latest()
                except Exception:  # pragma: no cover
                    pass
        return None  # pragma: no cover

    # -- maintenance ---------------------------------------------------------------------------

    def _indexes(self, part: _Part, refresh: bool = False) -> set[str]:
        if part.index_names is None or refresh:
            part.index_names = {ix.name for ix in part.table.list_indices()}
        return part.index_names

    def _after_write(self, part: _Part, n_rows: int) -> None:
        """Cheap bookkeeping after a write; expensive work runs in the background, rarely."""
        part.writes += 1
        part.rows_since_optimize += n_rows
        part.rows_added += n_rows
        try:
            names = self._indexes(part)
            if FTS_INDEX_NAME not in names or any(f"{c}_idx" not in names for c in SCALAR_INDEXES):
                # first write of this table: it is small, so these indexes are quick to build
                self._ensure_part(part, vector=False, fold=False)
            if not part.ann_requested:
                # The ANN index is built at ann_index_min_rows and retrained as the table outgrows
                # its partitions. count_rows reads only the manifest; look at it only once the rows
                # written since the last look could have taken the table past the threshold.
                due = self._ann_due_rows(part)
                if part.rows_base is None or part.rows_base + part.rows_added >= due:
                    part.rows_base, part.rows_added = int(part.table.count_rows()), 0
                    if part.rows_base >= due:
                        part.ann_requested = True
                        self._start_maintenance("ann", part.name)
            # Compaction, and folding new rows into the existing indexes: rows written after an
            # index was built are searched by a flat scan until then.
            if (part.writes % self.config.compact_every_writes == 0
                    or part.rows_since_optimize >= self.config.optimize_every_rows):
                part.rows_since_optimize = 0
                self._start_maintenance("optimize", part.name)
        except Exception as exc:  # maintenance never fails a write that already committed
            log.warning("episode index maintenance failed (will retry later): %s", exc)

    def _start_maintenance(self, what: str, name: str) -> None:
        """Run index building / optimize in one background thread (writes and reads go on)."""
        with self._maint_lock:
            self._maint_pending.add((what, name))
            if self._maint_thread is not None and self._maint_thread.is_alive():
                return
            self._maint_thread = threading.Thread(
                target=self._maintenance_loop, name="worldgraph-index-maintenance", daemon=True
            )
            self._maint_thread.start()

    def _maintenance_loop(self) -> None:
        while True:
            with self._maint_lock:
                if not self._maint_pending:
                    return
                pending = sorted(self._maint_pending)  # "ann" before "optimize" for a table
                self._maint_pending.clear()
            started = time.perf_counter()
            ok = False
            try:
                self._run_maintenance_process(pending)
                ok = True
            except Exception as exc:
                log.warning("episode index background maintenance failed (will retry later): %s", exc)
            finally:
                self.maintenance_runs.append({"tasks": [list(t) for t in pending], "ok": ok,
                                              "seconds": round(time.perf_counter() - started, 3)})
                for name in {n for _, n in pending}:
                    part = self._parts.get(name)
                    if part is None:
                        continue
                    try:
                        part.table.checkout_latest()
                        self._indexes(part, refresh=True)
                    except Exception:  # pragma: no cover
                        pass
                    part.ann_partitions = None  # the child may have (re)built the ANN index
                    part.ann_requested = False

    def _run_maintenance_process(self, tasks: list[tuple[str, str]]) -> None:
        """ANN build / optimize of some tables in a child process.

        lancedb's synchronous API runs every call on one background event loop per process, so
        a long create_index in a thread stalls every other read and write of the process
        (measured: a 2k-row upsert waited 115 s behind an HNSW build). A child process keeps
        this process's recalls and writes flowing.
        """
        if self.path.startswith("memory://"):  # another process cannot see this one's memory
            _run_tasks(self, tasks)
            return
        # An object store too: the child opens the same URI with the AWS_* variables it inherits.
        pkg_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "worldgraph.memory.index", "maintain", self.path, str(self.dimensions),
               self.embedder_name, self.config.model_dump_json(), json.dumps(tasks)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"maintenance process failed ({proc.returncode}): {proc.stderr[-2000:]}")

    def wait_for_maintenance(self, timeout: float | None = None) -> bool:
        """Block until background index building / optimize is done; False on timeout."""
        thread = self._maint_thread
        if thread is None:
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _selected_parts(self, tenant_id: str | None) -> list[_Part]:
        if tenant_id is None:
            return self._all_parts()
        part = self._part(tenant_id)
        return [part] if part is not None else []

    def ensure_indexes(self, vector: bool = True, tenant_id: str | None = None) -> list[str]:
        """Make the indexes of every tenant's table (or of one) ready, synchronously; returns the names created.

        Scalar indexes on the filter columns and the BM25 index on ``text`` always; the ANN
        vector index (unless ``vector=False``) once a table holds ``config.ann_index_min_rows``
        rows (below that an exact scan is exact and fast enough). Rows written after an index
        was built (``num_unindexed_rows``) are then folded in with ``optimize``. Safe to call
        repeatedly and from several processes.
        """
        self._writable("building episode index indexes")
        created: list[str] = []
        for part in self._selected_parts(tenant_id):
            for name in self._ensure_part(part, vector=vector, fold=True):
                if name not in created:
                    created.append(name)
        return created

    def _ensure_part(self, part: _Part, vector: bool = True, fold: bool = True) -> list[str]:
        from lancedb.index import FTS, Bitmap, BTree

        created: list[str] = []
        with self._index_lock:
            names = self._indexes(part, refresh=True)
            for column, kind in SCALAR_INDEXES.items():
                name = f"{column}_idx"
                if name in names:
                    continue
                cfg = Bitmap() if kind == "BITMAP" else BTree()
                try:
                    self._create_index(part, column, cfg, name)
                except Exception as exc:
                    if kind != "BITMAP" or "already exists" in str(exc).lower():
                        raise
                    # BITMAP not supported for this column / version: a BTREE does the job
                    self._create_index(part, column, BTree(), name)
                created.append(name)
            if FTS_INDEX_NAME not in names:
                self._create_index(part, "text", FTS(), FTS_INDEX_NAME)
                created.append(FTS_INDEX_NAME)
            if vector:
                rows = int(part.table.count_rows())
                if VECTOR_INDEX_NAME not in names and rows >= self.config.ann_index_min_rows:
                    self._create_vector_index(part)
                    created.append(VECTOR_INDEX_NAME)
                elif VECTOR_INDEX_NAME in names and self._ann_stale(part, rows):
                    log.info("episode index %s: retraining the ANN index for %d rows", part.name, rows)
                    self._create_vector_index(part)
                    created.append(VECTOR_INDEX_NAME)
            names = self._indexes(part, refresh=True)
            if fold and self._has_unindexed_rows(part, names):
                self._optimize_part(part, full=True)
        if created:
            log.info("episode index %s: created %s", part.name, ", ".join(created))
        return created

    def _has_unindexed_rows(self, part: _Part, names: Iterable[str]) -> bool:
        for name in names:
            try:
                stats = part.table.index_stats(name)
            except Exception as exc:  # pragma: no cover - e.g. dropped by another process
                log.info("index_stats(%s) of %s failed: %s", name, part.name, exc)
                continue
            if stats is not None and (stats.num_unindexed_rows or 0) > 0:
                return True
        return False

    def _create_index(self, part: _Part, column: str, cfg: Any, name: str) -> None:
        """create_index that tolerates another process having just created the same index."""
        try:
            self._retry(part, lambda: part.table.create_index(column, config=cfg, name=name, replace=False),
                        f"create index {name}")
        except Exception as exc:
            if "already exists" in str(exc).lower() or name in self._indexes(part, refresh=True):
                return
            raise

    def _create_vector_index(self, part: _Part) -> None:
        """Train the ANN index on the table as it is now (replacing an older one)."""
        rows = int(part.table.count_rows())
        cfg = vector_index_config(self.config, rows, self.dimensions)
        part.table.create_index("vector", config=cfg, name=VECTOR_INDEX_NAME, replace=True)
        part.ann_partitions = None

    def _ann_partitions(self, part: _Part) -> int | None:
        """IVF partitions of the table's ANN index (None: no index)."""
        if part.ann_partitions is None:
            part.ann_partitions = index_partitions(part.latest_dataset(), VECTOR_INDEX_NAME)
        return part.ann_partitions

    def _ann_due_rows(self, part: _Part) -> int:
        """Rows at which the table's ANN index is built (none yet) or retrained (index_policy.ann_due_rows)."""
        has = VECTOR_INDEX_NAME in self._indexes(part)
        return ann_due_rows(self.config, (self._ann_partitions(part) or 1) if has else None)

    def _ann_stale(self, part: _Part, rows: int) -> bool:
        return rows >= self._ann_due_rows(part)

    def rebuild_vector_index(self, tenant_id: str) -> bool:
        """Train ``tenant_id``'s ANN index again on every row it has now, synchronously (after a
        bulk load, say; writes go on meanwhile). False if the table is below ann_index_min_rows."""
        self._writable("building the ANN index")
        part = self._part(tenant_id)
        if part is None or part.table.count_rows() < self.config.ann_index_min_rows:
            return False
        with self._index_lock:
            self._create_vector_index(part)
            self._indexes(part, refresh=True)
        return True

    def optimize(self, tenant_id: str | None = None) -> None:
        """Compaction, then folding new rows into the existing indexes (no retraining), each index
        merged into one segment, of every tenant's table or of one.

        Only the compaction holds the cross-process write lock; the index update, which can
        take seconds on a large table, runs beside other processes' writes.
        """
        self._writable("optimizing the episode index")
        for part in self._selected_parts(tenant_id):
            self._optimize_part(part, full=True)

    def _optimize_part(self, part: _Part, full: bool = False) -> None:
        """Compact, fold new rows into the indexes (index_policy.fold_new_rows), drop old versions."""
        with self._index_lock:
            part.rows_since_optimize = 0
            table = part.table
            try:
                table.to_lance()
            except Exception:  # pragma: no cover - no pylance: lancedb's all-in-one optimize
                self._retry(part, lambda: table.optimize(), "optimize")
            else:
                # Fragments reaching compact_target_rows are left alone: with lance's default
                # (1M rows) the growing fragment was rewritten by every compaction. The background
                # compacts only once the small fragments fill one (index_policy.compaction_due).
                target = self.config.compact_target_rows
                if full or compaction_due(table.to_lance(), target):
                    self._retry(part, lambda: table.to_lance().optimize.compact_files(target_rows_per_fragment=target),
                                "compact")
                self._retry(part, lambda: fold_new_rows(table.to_lance(), self.config, full), "optimize indexes",
                            lock=False)
                try:
                    # Each compaction and index update leaves a copy of what it replaced; readers
                    # always move to the newest version, so old ones need not be kept for long.
                    keep = timedelta(seconds=self.config.index_version_retention_seconds)
                    table.to_lance().cleanup_old_versions(older_than=keep)
                except Exception as exc:  # pragma: no cover
                    log.info("cleanup of old index versions failed: %s", exc)
            table.checkout_latest()
            self._indexes(part, refresh=True)

    def has_vector_index(self, tenant_id: str | None = None) -> bool:
        """Whether ``tenant_id``'s table has its ANN index (no tenant: whether any table has one)."""
        return any(VECTOR_INDEX_NAME in self._indexes(p, refresh=True) for p in self._selected_parts(tenant_id))

    # -- reads -------------------------------------------------------------------------------

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
        vectors = vec_col.flatten().to_numpy(zero_copy_only=False).reshape(n, self.dimensions)
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
        _check_tenant(tenant_id)
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
        nearest: dict[str, Any] = {"column": "vector", "q": q, "k": k, "metric": "cosine"}
        if VECTOR_INDEX_NAME in self._indexes(part):
            nearest.update(ann_search_params(self.config, k, self.ann_overfetch))
        # The dataset is searched directly: lancedb's query builder costs ~4 ms a query here (it
        # fetches the schema three times on its event loop) for the same search. A metadata filter
        # is applied before the search (prefilter, from the scalar indexes), and the probing goes
        # on past ann_nprobes partitions until k rows pass it.
        tbl = part.latest_dataset().to_table(columns=None if select is None else list(select), filter=pred,
                                             prefilter=pred is not None, nearest=nearest,
                                             disable_scoring_autoprojection=True)
        # Every candidate is re-scored with exact cosine, so the order is exact.
        return self._rescored(self._rows(tbl, tenant_id), q, k)

    @staticmethod
    def _rescored(results: list[dict[str, Any]], q: np.ndarray, k: int) -> list[dict[str, Any]]:
        """Exact cosine for every candidate, best first, duplicates dropped, top ``k``."""
        if not results:
            return []
        vectors = np.stack([r["vector"] for r in results])
        norms = np.linalg.norm(vectors, axis=1) * float(np.linalg.norm(q))
        sims = (vectors @ q) / np.where(norms == 0, 1.0, norms)
        for row, sim in zip(results, sims):
            row["similarity"] = float(sim)
        results.sort(key=lambda r: r["similarity"], reverse=True)
        return _unique(results)[:k]

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
        _check_tenant(tenant_id)
        pred = metadata_filter(where)
        select = self._select(columns)
        text = " ".join(query.replace("\x00", " ").split())
        if not any(ch.isalnum() for ch in text):
            return []
        part = self._part(tenant_id)
        if part is None:
            return []
        if FTS_INDEX_NAME not in self._indexes(part) and FTS_INDEX_NAME not in self._indexes(part, refresh=True):
            return []
        from lance.query import MatchQuery

        try:
            # The dataset directly, as in vector_search (lancedb's query builder adds ~4 ms); a
            # MatchQuery of the text, as lancedb makes of a plain string (no query syntax).
            tbl = part.latest_dataset().to_table(
                columns=None if select is None else [*select, "_score"],  # by name: lance warns otherwise
                full_text_query=MatchQuery(text, "text"), filter=pred, prefilter=pred is not None, limit=k)
        except ValueError as exc:
            if "index" in str(exc).lower():
                return []
            raise
        results = self._rows(tbl, tenant_id, "_score", "bm25")
        results.sort(key=lambda r: r["bm25"], reverse=True)
        return _unique(results)

    def __repr__(self) -> str:
        return f"EpisodeIndex(path={self.path!r}, dimensions={self.dimensions}, embedder={self.embedder_name!r})"


def _run_tasks(idx: EpisodeIndex, tasks: Iterable[Sequence[str]]) -> None:
    for what, name in tasks:
        part = idx._part_by_name(name, create=False)
        if part is None:  # dropped meanwhile
            continue
        if what == "ann":
            idx._ensure_part(part, vector=True, fold=False)
        elif what == "optimize":
            idx._optimize_part(part)


def _maintain_main(argv: list[str]) -> int:
    """``python -m worldgraph.memory.index maintain PATH DIMS EMBEDDER CONFIG_JSON TASKS_JSON``.

    TASKS_JSON: a list of ``[task, table name]``, task ``ann`` or ``optimize``.
    """
    if len(argv) != 6 or argv[0] != "maintain":
        print("usage: python -m worldgraph.memory.index maintain PATH DIMS EMBEDDER CONFIG_JSON TASKS_JSON",
              file=sys.stderr)
        return 2
    _, path, dims, name, cfg_json, tasks_json = argv
    config = WorldGraphConfig.model_validate_json(cfg_json)
    idx = EpisodeIndex(path, int(dims), name, config)
    _run_tasks(idx, json.loads(tasks_json))
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through the maintenance thread
    logging.basicConfig(level=logging.WARNING)
    raise SystemExit(_maintain_main(sys.argv[1:]))
