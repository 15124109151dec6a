"""The LanceDB sidecar: vectors and full text of episodes, for recall.

This is derived data. The graph store is the system of record; the index can be dropped and
rebuilt from it at any time (``worldgraph reindex``). One table, ``episodes``, holds every
tenant; every search is pre-filtered by ``tenant_id``.

``index_meta.json`` beside the table records the embedder that built it and the vector size, so
opening it with another embedder fails loudly instead of comparing vectors from two models.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: LanceDB's own conflict handling only
    fcntl = None  # type: ignore[assignment]

import numpy as np
import pyarrow as pa

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import EmbeddingDimensionError, InvalidInputError

log = logging.getLogger(__name__)

__all__ = ["EpisodeIndex", "episode_schema", "build_filter", "sql_literal", "META_FILE", "TABLE_NAME"]

TABLE_NAME = "episodes"
META_FILE = "index_meta.json"
WRITE_LOCK_FILE = ".write.lock"
META_FORMAT = 1
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


def build_filter(tenant_id: str, where: dict[str, Any] | None = None) -> str:
    """The SQL predicate for a tenant and the optional recall filters.

    ``where`` keys: ``agent_role`` / ``agent_id`` (str), ``canvas_ids`` (list of str; empty means no filter),
    ``start`` / ``end`` (unix seconds or datetime, inclusive), ``success_only`` (bool).
    """
    if not isinstance(tenant_id, str) or not tenant_id:
        raise InvalidInputError("tenant_id", "must be a non-empty string")
    parts = [f"tenant_id = {sql_literal(tenant_id, 'tenant_id')}"]
    if not where:
        return parts[0]
    if not isinstance(where, dict):
        raise InvalidInputError("where", f"expected a dict of filters, got {type(where).__name__}")
    unknown = set(where) - WHERE_KEYS
    if unknown:
        raise InvalidInputError(
            "where", f"unknown filter(s) {sorted(unknown)}; allowed: {sorted(WHERE_KEYS)}"
        )
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


class EpisodeIndex:
    """LanceDB table ``episodes`` at ``path``: upsert, delete, vector search, BM25 search.

    ``rebuild=True`` drops and recreates the table (for ``worldgraph reindex``). Several
    processes may open the same path: ``read_consistency_interval=0`` (default) makes every
    read see other processes' commits; local writes are serialised by a lock file and commit
    races are retried. ``ann_overfetch`` extra ANN candidates (up to k) are re-scored exactly
    once the vector index exists: 0 is fastest, 100 gives ~100% recall at about twice the cost.
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
        self._is_local = "://" not in self.path
        if self._is_local:
            Path(self.path).mkdir(parents=True, exist_ok=True)
        self._lock_path = Path(self.path) / WRITE_LOCK_FILE
        self._db = lancedb.connect(self.path, read_consistency_interval=read_consistency_interval)
        self._lock = threading.RLock()  # serialises this object's writes
        self._index_lock = threading.RLock()  # serialises index creation / optimize
        self._maint_lock = threading.Lock()
        self._maint_thread: threading.Thread | None = None
        self._maint_pending: set[str] = set()
        self._writes = 0
        self._index_names: set[str] | None = None  # cache of existing index names
        self._ann_checked_rows = 0
        self._table = self._open(rebuild)

    # -- opening -----------------------------------------------------------------------------

    @property
    def meta_path(self) -> Path:
        return Path(self.path) / META_FILE

    def _read_meta(self) -> dict[str, Any] | None:
        if not self._is_local:
            return None
        try:
            return json.loads(self.meta_path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            log.warning("%s is not valid JSON; treating the index as unlabelled", self.meta_path)
            return None

    def _write_meta(self) -> None:
        if not self._is_local:
            return
        meta = {"format": META_FORMAT, "table": TABLE_NAME, "embedder": self.embedder_name,
                "dimensions": self.dimensions}
        tmp = self.meta_path.with_name(f".{META_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.meta_path)

    def _table_exists(self) -> bool:
        # lancedb 0.40: table_names() is deprecated, table_exists() is namespace-only (raises
        # NotImplementedError on a local connection); list_tables() pages.
        token = None
        while True:
            resp = self._db.list_tables(page_token=token)
            if TABLE_NAME in (resp.tables or []):
                return True
            token = resp.page_token
            if not token:
                return False

    def _open(self, rebuild: bool) -> Any:
        if rebuild:
            if self._table_exists():
                self._db.drop_table(TABLE_NAME)
            self._write_meta()
            return self._db.create_table(TABLE_NAME, schema=self.schema, exist_ok=True)
        if self._table_exists():
            table = self._db.open_table(TABLE_NAME)
            vec_type = table.schema.field("vector").type
            existing_dim = getattr(vec_type, "list_size", None)
            meta = self._read_meta()
            existing_name = (meta or {}).get("embedder")
            if existing_dim != self.dimensions or (existing_name is not None and existing_name != self.embedder_name):
                raise InvalidInputError(
                    "embedder",
                    f"the episode index at {self.path} was built by {existing_name or 'an unknown embedder'} "
                    f"with {existing_dim}-d vectors, but this process uses {self.embedder_name} with "
                    f"{self.dimensions}-d vectors; run `worldgraph reindex` to rebuild the index for the "
                    "new embedder",
                )
            if meta is None:
                log.warning("%s has no %s; recording embedder %s", self.path, META_FILE, self.embedder_name)
                self._write_meta()
            field_meta = table.schema.field("episode_id").metadata or {}
            if PK_METADATA.encode() not in field_meta:  # a table from before the key was declared
                try:
                    # lancedb stubs: defined on LanceTable/RemoteTable, missing from the Table base class
                    table.set_unenforced_primary_key("episode_id")  # type: ignore[attr-defined]
                except Exception as exc:  # pragma: no cover - another process set it first
                    log.info("could not declare episode_id as primary key: %s", exc)
            return table
        self._write_meta()  # before the table, so a table never exists without its label
        return self._db.create_table(TABLE_NAME, schema=self.schema, exist_ok=True)

    @property
    def table(self) -> Any:
        """The underlying ``lancedb`` table (for maintenance and inspection)."""
        return self._table

    def close(self, wait: bool = True) -> None:
        """Wait for background maintenance (LanceDB itself is embedded: nothing to release)."""
        if wait:
            self.wait_for_maintenance()

    def __enter__(self) -> "EpisodeIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writes ------------------------------------------------------------------------------

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

    def upsert(self, rows: list[dict[str, Any]]) -> None:
        """Insert or replace rows by ``episode_id`` (every column is overwritten)."""
        rows = list(rows)
        if not rows:
            return
        data = self._to_arrow(rows)
        with self._lock:
            self._retry(lambda: (
                self._table.merge_insert("episode_id")
                .when_matched_update_all()
                .when_not_matched_insert_all()
                .execute(data)
            ), "upsert")
            self._after_write(data.num_rows)

    def delete(self, episode_ids: Iterable[str]) -> None:
        """Remove rows by episode id (ids that are not there are ignored)."""
        ids = [e for e in dict.fromkeys(episode_ids)]
        for e in ids:
            if not isinstance(e, str) or not e:
                raise InvalidInputError("episode_ids", f"expected non-empty strings, got {e!r}")
        with self._lock:
            for start in range(0, len(ids), 1000):
                chunk = ids[start:start + 1000]
                pred = f"episode_id IN ({', '.join(sql_literal(e, 'episode_ids') for e in chunk)})"
                self._retry(lambda pred=pred: self._table.delete(pred), "delete")
            if ids:
                self._after_write(0)

    def delete_tenant(self, tenant_id: str) -> None:
        """Remove every row of one tenant (before reindexing it from the graph store)."""
        pred = build_filter(tenant_id)
        with self._lock:
            self._retry(lambda: self._table.delete(pred), "delete_tenant")
            self._after_write(0)

    def clear(self) -> None:
        """Delete every row of every tenant (the table, its label and its indexes stay)."""
        with self._lock:
            self._retry(lambda: self._table.delete("true"), "clear")

    def count(self, tenant_id: str | None = None) -> int:
        """Rows in the index, of one tenant or of all."""
        if tenant_id is None:
            return int(self._table.count_rows())
        return int(self._table.count_rows(build_filter(tenant_id)))

    def get(self, tenant_id: str, episode_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Rows of ``tenant_id`` by episode id (missing ids are left out), vectors included."""
        ids = list(dict.fromkeys(episode_ids))
        if not ids:
            return []
        pred = build_filter(tenant_id) + " AND episode_id IN (" + ", ".join(
            sql_literal(e, "episode_ids") for e in ids) + ")"
        return self._rows(self._table.search().where(pred).limit(len(ids)).to_arrow())

    @contextmanager
    def _commit_lock(self) -> Iterator[None]:
        """Exclusive lock shared by every process writing this (local) index.

        LanceDB resolves most commit races itself, but under concurrent compaction two
        processes inserting the same new episode_id could both commit (lance issue #4585 and
        follow-ups). Writes are short, so on one machine we simply serialise them. Object
        stores (s3://) have no such lock and rely on LanceDB's conflict detection alone.
        """
        if fcntl is None or not self._is_local:
            yield
            return
        with open(self._lock_path, "a+b") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)

    def _retry(self, fn: Any, what: str, lock: bool = True) -> Any:
        delay = 0.05
        for attempt in range(1, _COMMIT_RETRIES + 1):
            try:
                if not lock:
                    return fn()
                with self._commit_lock():
                    return fn()
            except Exception as exc:  # lancedb raises plain OSError/RuntimeError/ValueError
                if attempt == _COMMIT_RETRIES or not _is_commit_conflict(exc):
                    raise
                log.info("%s lost a commit race (attempt %d): %s; retrying", what, attempt, exc)
                time.sleep(delay)
                delay *= 2
                try:
                    self._table.checkout_latest()
                except Exception:  # pragma: no cover
                    pass
        return None  # pragma: no cover

    # -- maintenance ---------------------------------------------------------------------------

    def _indexes(self, refresh: bool = False) -> set[str]:
        if self._index_names is None or refresh:
            self._index_names = {ix.name for ix in self._table.list_indices()}
        return self._index_names

    def _after_write(self, n_rows: int) -> None:
        """Cheap bookkeeping after a write; expensive work runs in the background, rarely."""
        self._writes += 1
        try:
            names = self._indexes()
            if FTS_INDEX_NAME not in names or any(f"{c}_idx" not in names for c in SCALAR_INDEXES):
                # first write of this table: it is small, so these indexes are quick to build
                self.ensure_indexes(vector=False)
            if VECTOR_INDEX_NAME not in self._indexes():
                self._ann_checked_rows += n_rows
                # count_rows reads only the manifest; still, look at it once per ~1000 rows
                if self._ann_checked_rows >= min(1000, self.config.ann_index_min_rows):
                    self._ann_checked_rows = 0
                    if self._table.count_rows() >= self.config.ann_index_min_rows:
                        self._start_maintenance("ann")
            if self._writes % self.config.compact_every_writes == 0:
                self._start_maintenance("optimize")
        except Exception as exc:  # maintenance never fails a write that already committed
            log.warning("episode index maintenance failed (will retry later): %s", exc)

    def _start_maintenance(self, what: str) -> None:
        """Run index building / optimize in one background thread (writes and reads go on)."""
        with self._maint_lock:
            self._maint_pending.add(what)
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
                pending = set(self._maint_pending)
                self._maint_pending.clear()
            try:
                self._run_maintenance_process(sorted(pending))
            except Exception as exc:
                log.warning("episode index background maintenance failed (will retry later): %s", exc)
            finally:
                try:
                    self._table.checkout_latest()
                    self._indexes(refresh=True)
                except Exception:  # pragma: no cover
                    pass

    def _run_maintenance_process(self, what: list[str]) -> None:
        """ANN build / optimize in a child process.

        lancedb's synchronous API runs every call on one background event loop per process, so
        a long create_index in a thread stalls every other read and write of the process
        (measured: a 2k-row upsert waited 115 s behind an HNSW build). A child process keeps
        this process's recalls and writes flowing.
        """
        if not self._is_local:  # object stores: same work, in this process
            if "ann" in what:
                self.ensure_indexes()
            if "optimize" in what:
                self.optimize()
            return
        pkg_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        cmd = [sys.executable, "-m", "worldgraph.memory.index", "maintain", self.path, str(self.dimensions),
               self.embedder_name, self.config.model_dump_json(), ",".join(what)]
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

    def ensure_indexes(self, vector: bool = True) -> list[str]:
        """Create the indexes that are missing (synchronously); returns the names created.

        Scalar indexes on the filter columns and the BM25 index on ``text`` always; the ANN
        vector index (unless ``vector=False``) once the table holds ``config.ann_index_min_rows``
        rows (below that an exact scan is exact and fast enough). Safe to call repeatedly and
        from several processes.
        """
        from lancedb.index import FTS, Bitmap, BTree

        created: list[str] = []
        with self._index_lock:
            names = self._indexes(refresh=True)
            for column, kind in SCALAR_INDEXES.items():
                name = f"{column}_idx"
                if name in names:
                    continue
                cfg = Bitmap() if kind == "BITMAP" else BTree()
                try:
                    self._create_index(column, cfg, name)
                except Exception as exc:
                    if kind != "BITMAP" or "already exists" in str(exc).lower():
                        raise
                    # BITMAP not supported for this column / version: a BTREE does the job
                    self._create_index(column, BTree(), name)
                created.append(name)
            if FTS_INDEX_NAME not in names:
                self._create_index("text", FTS(), FTS_INDEX_NAME)
                created.append(FTS_INDEX_NAME)
            if vector and VECTOR_INDEX_NAME not in names:
                rows = self._table.count_rows()
                if rows >= self.config.ann_index_min_rows:
                    self._create_vector_index(rows)
                    created.append(VECTOR_INDEX_NAME)
            self._indexes(refresh=True)
        if created:
            log.info("episode index: created %s", ", ".join(created))
        return created

    def _create_index(self, column: str, cfg: Any, name: str) -> None:
        """create_index that tolerates another process having just created the same index."""
        try:
            self._retry(lambda: self._table.create_index(column, config=cfg, name=name, replace=False),
                        f"create index {name}")
        except Exception as exc:
            if "already exists" in str(exc).lower() or name in self._indexes(refresh=True):
                return
            raise

    def _create_vector_index(self, rows: int) -> None:
        from lancedb.index import IvfHnswSq

        # IVF + HNSW graphs over 8-bit scalar-quantised vectors. Candidates are re-scored with
        # exact cosine in vector_search, so SQ error never changes the returned order.
        cfg = IvfHnswSq(distance_type="cosine")
        self._table.create_index("vector", config=cfg, name=VECTOR_INDEX_NAME, replace=True)

    def optimize(self) -> None:
        """Compaction, then folding new rows into the existing indexes (no retraining).

        Only the compaction holds the cross-process write lock; the index update, which can
        take seconds on a large table, runs beside other processes' writes.
        """
        with self._index_lock:
            try:
                ds_optimizer = self._table.to_lance().optimize
            except Exception:  # pragma: no cover - no pylance: lancedb's all-in-one optimize
                self._retry(lambda: self._table.optimize(), "optimize")
            else:
                self._retry(lambda: self._table.to_lance().optimize.compact_files(), "compact")
                self._retry(lambda: self._table.to_lance().optimize.optimize_indices(), "optimize indexes",
                            lock=False)
                del ds_optimizer
                try:
                    self._table.to_lance().cleanup_old_versions(older_than=timedelta(days=7))
                except Exception as exc:  # pragma: no cover
                    log.info("cleanup of old index versions failed: %s", exc)
            self._table.checkout_latest()
            self._indexes(refresh=True)

    def has_vector_index(self) -> bool:
        return VECTOR_INDEX_NAME in self._indexes(refresh=True)

    # -- reads -------------------------------------------------------------------------------

    def _rows(self, tbl: pa.Table, score_col: str | None = None, out_name: str | None = None) -> list[dict[str, Any]]:
        """Arrow results -> dicts of every column, ``vector`` as a float32 np.ndarray."""
        n = tbl.num_rows
        if n == 0:
            return []
        names = [c for c in self.schema.names if c != "vector"]
        cols = {c: tbl.column(c).to_pylist() for c in names}
        vec_col = tbl.column("vector").combine_chunks()
        vectors = vec_col.flatten().to_numpy(zero_copy_only=False).reshape(n, self.dimensions)
        scores = tbl.column(score_col).to_pylist() if score_col else None
        out: list[dict[str, Any]] = []
        for i in range(n):
            row = {c: cols[c][i] for c in names}
            row["canvas_action_ids"] = row["canvas_action_ids"] or []
            row["vector"] = vectors[i]
            if scores is not None and out_name is not None:
                row[out_name] = float(scores[i])
            out.append(row)
        return out

    def vector_search(
        self,
        tenant_id: str,
        vector: Any,
        k: int = 100,
        where: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Top ``k`` rows of ``tenant_id`` by cosine similarity (highest first), filtered first.

        Each result has every column, ``vector`` (np.ndarray) and ``similarity`` (1 - cosine distance).
        """
        if not isinstance(k, int) or k <= 0:
            raise InvalidInputError("k", f"must be a positive integer, got {k!r}")
        pred = build_filter(tenant_id, where)
        q = np.asarray(vector, dtype=np.float32).reshape(-1)
        if q.shape[0] != self.dimensions:
            raise EmbeddingDimensionError(
                "vector", f"expected length {self.dimensions} (index dimensions), got {q.shape[0]}"
            )
        if not np.isfinite(q).all() or not np.any(q):
            raise EmbeddingDimensionError("vector", "query vector is zero, NaN or infinite")
        indexed = VECTOR_INDEX_NAME in self._indexes()
        # Every candidate is re-scored with exact cosine below, so the order is exact; with the
        # ANN index, ann_overfetch extra candidates trade latency for recall.
        fetch = k + min(k, self.ann_overfetch) if indexed else k
        query = (
            self._table.search(q, vector_column_name="vector")
            .distance_type("cosine")
            .where(pred, prefilter=True)
            .limit(fetch)
        )
        if indexed:
            # A selective filter (small tenant) leaves few rows in the probed partitions:
            # maximum_nprobes=0 lets the search visit more partitions until it has enough rows.
            query = query.maximum_nprobes(0)
            if fetch > k:
                query = query.ef(2 * fetch)
        results = self._rows(query.to_arrow())
        if not results:
            return []
        vectors = np.stack([r["vector"] for r in results])
        norms = np.linalg.norm(vectors, axis=1) * float(np.linalg.norm(q))
        sims = (vectors @ q) / np.where(norms == 0, 1.0, norms)
        for row, sim in zip(results, sims):
            row["similarity"] = float(sim)
        results.sort(key=lambda r: r["similarity"], reverse=True)
        return _unique(results)[:k]

    def text_search(
        self,
        tenant_id: str,
        query: str,
        k: int = 20,
        where: dict[str, Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Top ``k`` rows of ``tenant_id`` by BM25 on ``text``; each result carries ``bm25``.

        Returns [] when the full-text index does not exist yet or the query has no searchable
        terms (only stop words or punctuation).
        """
        if not isinstance(k, int) or k <= 0:
            raise InvalidInputError("k", f"must be a positive integer, got {k!r}")
        if not isinstance(query, str):
            raise InvalidInputError("query", f"expected a string, got {type(query).__name__}")
        pred = build_filter(tenant_id, where)
        text = " ".join(query.replace("\x00", " ").split())
        if not any(ch.isalnum() for ch in text):
            return []
        if FTS_INDEX_NAME not in self._indexes() and FTS_INDEX_NAME not in self._indexes(refresh=True):
            return []
        try:
            tbl = (
                self._table.search(text, query_type="fts", fts_columns="text")
                .where(pred, prefilter=True)
                .limit(k)
                .to_arrow()
            )
        except ValueError as exc:
            if "index" in str(exc).lower():
                return []
            raise
        results = self._rows(tbl, "_score", "bm25")
        results.sort(key=lambda r: r["bm25"], reverse=True)
        return _unique(results)

    def __repr__(self) -> str:
        return f"EpisodeIndex(path={self.path!r}, dimensions={self.dimensions}, embedder={self.embedder_name!r})"


def _maintain_main(argv: list[str]) -> int:
    """``python -m worldgraph.memory.index maintain PATH DIMS EMBEDDER CONFIG_JSON ann,optimize``."""
    if len(argv) != 6 or argv[0] != "maintain":
        print("usage: python -m worldgraph.memory.index maintain PATH DIMS EMBEDDER CONFIG_JSON WHAT",
              file=sys.stderr)
        return 2
    _, path, dims, name, cfg_json, what = argv
    config = WorldGraphConfig.model_validate_json(cfg_json)
    idx = EpisodeIndex(path, int(dims), name, config)
    tasks = set(what.split(","))
    if "ann" in tasks:
        idx.ensure_indexes()
    if "optimize" in tasks:
        idx.optimize()
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through the maintenance thread
    logging.basicConfig(level=logging.WARNING)
    raise SystemExit(_maintain_main(sys.argv[1:]))
