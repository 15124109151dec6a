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

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError, ReadOnlyError
from worldgraph.filemodes import PrivateTree, private_dir, private_umask
from worldgraph.memory.embeddings import same_fallback_label
from worldgraph.memory.index import objectstore
from worldgraph.memory.index.common_terms import CommonTerms
from worldgraph.memory.index.lance_import import drop_sessions, import_lancedb, sessions
from worldgraph.memory.index.maintenance import run_maintenance_tasks
from worldgraph.memory.index.mirror_files import Mirrors
from worldgraph.memory.index.passing_text import PassingTexts
from worldgraph.memory.index.schema import (  # noqa: F401 - re-exported: the index's public names
    FTS_INDEX_NAME,
    META_FILE,
    META_FORMAT,
    SCALAR_INDEXES,
    TABLE_NAME,
    TABLE_PREFIXES,
    VECTOR_INDEX_NAME,
    WHERE_KEYS,
    build_filter,
    episode_schema,
    is_tenant_table,
    metadata_filter,
    sql_literal,
    stored_embedder_name,
    table_name,
)
from worldgraph.memory.index.search import IndexSearch
from worldgraph.memory.index.small import SmallTables, rows_limit
from worldgraph.memory.index.tables import TenantTable
from worldgraph.memory.index.worker import serve
from worldgraph.memory.index.writes import IndexWrites

log = logging.getLogger(__name__)

__all__ = [
    "META_FILE",
    "TABLE_NAME",
    "EpisodeIndex",
    "build_filter",
    "episode_schema",
    "metadata_filter",
    "sql_literal",
    "stored_embedder_name",
    "table_name",
]


class EpisodeIndex(IndexWrites, IndexSearch):
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
        lancedb = import_lancedb()  # without the REST client it does not need (lance_import.py)

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
            private_dir(self.path)  # 0700 (tightened with a warning if others can read it)
        # an object store answers within config.object_store_timeout_seconds (objectstore.py, "Deadlines")
        deadline = self.config.object_store_timeout_seconds
        with objectstore.object_store_errors(self.path, "opening the index"):
            self._db: Any = None if self._absent else lancedb.connect(
                self.path, read_consistency_interval=read_consistency_interval,
                storage_options=objectstore.storage_options(self.path, deadline),
                session=sessions(self.config)[0])  # the process's, its caches bounded (lance_import.py)
        self._lock = threading.RLock()  # serialises this object's writes
        self._index_lock = threading.RLock()  # serialises index creation / optimize
        self._building_held: set[str] = set()  # tables.py, _building
        self._parts_lock = threading.Lock()  # guards opening / creating tables
        self._parts: dict[str, TenantTable] = {}  # table name -> part (opened lazily, cached)
        self._maint_lock = threading.Lock()
        self._maint_thread: threading.Thread | None = None
        self._maint_pending: set[tuple[str, str]] = set()  # (task, table name)
        self._maint_cv = threading.Condition(self._maint_lock)
        self._maint_active = 0
        self._maint_arms = 0
        self._maint_worker = None
        self._maint_closed = False
        self.maintenance_runs: list[dict[str, Any]] = []  # background runs: tasks, ok, seconds, steps
        self.maintenance_steps: list[dict[str, Any]] = []  # maintenance steps run by this object (timed)
        self._small = SmallTables(dimensions, rows_limit(self.config.mirror_min_rows))
        self._private = PrivateTree(self.path) if self._is_local and not read_only else None
        self._mirrors = Mirrors(dimensions, self.path if self._is_local else None, writable=not read_only,
                                build_rows=self.config.mirror_build_rows)
        self._texts = PassingTexts()
        self._common = CommonTerms(self.config.fulltext_common_rows, self.config.fulltext_common_share,
                                   self.config.fulltext_common_budget)
        with objectstore.object_store_errors(self.path, "opening the index"):
            if self._is_local:
                self._open(rebuild)
            else:
                objectstore.with_deadline(self.path, "opening the index", lambda: self._open(rebuild), deadline)

    # -- opening -----------------------------------------------------------------------------

    def _open(self, rebuild: bool) -> None:
        names = self._table_names()
        if rebuild:
            for name in names:
                if is_tenant_table(name) or name == TABLE_NAME:
                    self._db.drop_table(name)
            self._mirrors.drop()  # the saved mirrors of the dropped tables
            self._texts.drop()
            self._common.drop()
            self._write_meta()
            return
        meta = self._read_meta()
        existing_name = (meta or {}).get("embedder")
        existing_dim = (meta or {}).get("dimensions")
        part_names = [n for n in names if is_tenant_table(n)]
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


    def close(self, wait: bool = True, timeout: float | None = None) -> None:
        """Let background maintenance end (``wait``: the runs asked for so far; otherwise the one
        in progress), end the kept child, save the changed mirrors and make what was written
        private now (worldgraph.filemodes); LanceDB itself is embedded: nothing to release.
        Afterwards no thread or child of this index writes into its folder. ``timeout`` (s)
        bounds it all: a run still going then has its child killed (each of its steps is one
        LanceDB commit), a mirror build still going is not saved (the next process builds it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if wait:
            self._wait_runs(deadline)
        self._close_maintenance(deadline)
        self._common.close(deadline)  # the threads reading LanceDB behind the searches end first
        self._texts.close(deadline)
        self._mirrors.close(deadline)  # before the sweep below, which makes the saved files private too
        if self._private is not None:
            self._private.close()

    def __enter__(self) -> EpisodeIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"EpisodeIndex(path={self.path!r}, dimensions={self.dimensions}, embedder={self.embedder_name!r})"


def _maintain_main(argv: list[str]) -> int:
    """``python -m worldgraph.memory.index.episode_index maintain PATH DIMS EMBEDDER CONFIG_JSON TASKS_JSON``
    runs the tasks once; ``... serve PATH DIMS EMBEDDER CONFIG_JSON`` reads a JSON list of tasks
    per line on stdin and answers each (the kept child, worker.py).

    TASKS_JSON: a list of ``[task, table name]``, task ``ann`` or ``optimize``.
    """
    usage = ("usage: python -m worldgraph.memory.index.episode_index maintain PATH DIMS EMBEDDER CONFIG_JSON "
             "TASKS_JSON | serve PATH DIMS EMBEDDER CONFIG_JSON")
    if not ((len(argv) == 6 and argv[0] == "maintain") or (len(argv) == 5 and argv[0] == "serve")):
        print(usage, file=sys.stderr)
        return 2
    private_umask()  # a worldgraph child: what it writes is private (worldgraph.filemodes)
    path, dims, name, cfg_json = argv[1:5]
    config = WorldGraphConfig.model_validate_json(cfg_json)
    if config.maintenance_nice:  # background work: the parent's reads and writes go first
        os.nice(config.maintenance_nice)

    def run(tasks: list[list[str]]) -> list[dict[str, Any]]:
        # opened for each run: it then sees what other processes wrote, forgot and purged meanwhile
        wall, cpu = time.perf_counter(), time.process_time()
        idx = EpisodeIndex(path, int(dims), name, config)
        opened = {"table": "", "step": "open", "s": round(time.perf_counter() - wall, 3),
                  "cpu_s": round(time.process_time() - cpu, 3)}
        try:
            return [opened, *run_maintenance_tasks(idx, tasks)]
        finally:
            idx.close(wait=False)
            del idx
            drop_sessions()  # this run's caches go with its index (worker.serve then trims the heap)

    if argv[0] == "serve":
        return serve(run)
    run(json.loads(argv[5]))
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through the maintenance thread
    logging.basicConfig(level=logging.WARNING)
    raise SystemExit(_maintain_main(sys.argv[1:]))
