"""Opening the episode index's per-tenant tables, its label file, and its write locks.

``IndexTables`` is the base of ``EpisodeIndex`` (index.py): the state every part of the index
shares (the connection, the cached tables, the locks) and the methods that find a tenant's table.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import ReadOnlyError, StorageError
from worldgraph.filemodes import PrivateTree, create_private_file
from worldgraph.locks import file_lock
from worldgraph.memory.index import objectstore
from worldgraph.memory.index.common_terms import CommonTerms
from worldgraph.memory.index.lance_import import sessions
from worldgraph.memory.index.mirror_files import Mirrors
from worldgraph.memory.index.passing_text import PassingTexts
from worldgraph.memory.index.schema import (
    COMMIT_RETRIES,
    COMPACT_ATTEMPTS,
    META_FILE,
    META_FORMAT,
    METADATA_TERMS,
    WRITE_LOCK_FILE,
    is_commit_conflict,
    is_tenant_table,
    table_name,
)
from worldgraph.memory.index.small import SmallTables

log = logging.getLogger("worldgraph.memory.index.episode_index")


class BuildingBusy(Exception):
    """Another process holds a table's index lock (``IndexTables._building(wait=False)``)."""


class TenantTable:
    """One tenant's table and this process's bookkeeping for it."""

    __slots__ = (
        "ann_partitions",
        "ann_requested",
        "dataset",
        "index_names",
        "last_write",
        "look_unfolded",
        "name",
        "rows_added",
        "rows_base",
        "rows_since_optimize",
        "table",
        "sample",
        "session",
        "writes",
    )

    def __init__(self, name: str, table: Any, session: Any = None) -> None:
        self.name = name
        self.table = table
        self.session = session  # the process's pylance session (lance_import.sessions; None: lance's own)
        self.index_names: dict[str, str] | None = None  # cache of the table's indexes: name -> type
        self.writes = 0  # writes through this process
        self.rows_since_optimize = 0  # rows written through this process since the last optimize
        self.last_write = 0.0  # time.monotonic() of the last write through this process
        # None: not searched yet in this process; True: searched, the rows left unfolded (by any
        # process) not looked at yet (maintenance.py, _idle_folds); False: looked at
        self.look_unfolded: bool | None = None
        self.rows_base: int | None = None  # last count_rows() seen while the ANN index is missing
        self.rows_added = 0  # rows written since rows_base
        self.ann_requested = False  # an ANN build is queued / running in the background
        self.dataset: Any = None  # the table's pylance dataset, for the unfiltered search path
        self.ann_partitions: int | None = None  # IVF partitions of the ANN index (cache)
        self.sample: Any = None  # plan.Sample: the filter columns of a sample of the rows

    def latest_dataset(self) -> Any:
        """The pylance dataset at the table's newest version (this or another process's
        commits). Opening one costs ~50 ms; checking its version ~2 ms, so it is kept."""
        ds = self.dataset
        if ds is None:
            ds = self.dataset = self.open_dataset()
        elif ds.latest_version != ds.version:
            ds = self.dataset = ds.checkout_version(ds.latest_version)
        return ds


    def open_dataset(self) -> Any:
        """The table's pylance dataset at the table's version, in the process's pylance session
        (its caches bounded by the config: lance_import.sessions)."""
        if self.session is None:
            return self.table.to_lance()
        return self.table.to_lance(session=self.session)


class IndexTables:
    """The tables of an episode index, one per tenant, opened lazily and cached (see ``EpisodeIndex``)."""

    config: WorldGraphConfig
    path: str
    dimensions: int
    embedder_name: str
    ann_overfetch: int
    schema: pa.Schema
    read_only: bool
    _is_local: bool
    _absent: bool
    _db: Any
    _lock: threading.RLock
    _index_lock: threading.RLock
    _building_held: set[str]  # the tables whose _building this process holds (under _index_lock)
    _parts_lock: threading.Lock
    _parts: dict[str, TenantTable]
    _small: SmallTables  # small tables searched in process (index_small.py)
    _private: PrivateTree | None  # makes what LanceDB writes private (a local, writable index)
    _mirrors: Mirrors  # the in-process index of big tables (mirror.py)
    _texts: PassingTexts  # the terms of the rows an episode-id filter passes, per mirrored table (passing_text.py)
    _common: CommonTerms  # the words not searched in a big table's full-text index (common_terms.py)

    @property
    def meta_path(self) -> Path:
        return Path(self.path) / META_FILE

    def _read_meta(self) -> dict[str, Any] | None:
        try:
            if not self._is_local:  # an object store: one GET beside the tables
                deadline = self.config.object_store_timeout_seconds
                text = objectstore.read_meta(self.path, META_FILE, deadline) if self._db is not None else None
                meta: dict[str, Any] | None = None if text is None else json.loads(text)
                return meta
            stored: dict[str, Any] = json.loads(self.meta_path.read_text())
            return stored
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
            objectstore.write_meta(self.path, META_FILE, json.dumps(meta, indent=2, sort_keys=True) + "\n",
                                  self.config.object_store_timeout_seconds)
            return
        tmp = self.meta_path.with_name(f".{META_FILE}.{os.getpid()}.{threading.get_ident()}.tmp")
        create_private_file(tmp)
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

    def _part_by_name(self, name: str, create: bool) -> TenantTable | None:
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
            if not self.read_only and METADATA_TERMS not in table.schema.names:
                with self._commit_lock(None):  # a table made before the column: add it, all null
                    table.checkout_latest()
                    if METADATA_TERMS not in table.schema.names:
                        table.add_columns(pa.field(METADATA_TERMS, pa.list_(pa.string())))
            part = TenantTable(name, table, sessions(self.config)[1])
            self._parts[name] = part
            return part

    def _part(self, tenant_id: str, create: bool = False) -> TenantTable | None:
        return self._part_by_name(table_name(tenant_id), create)

    def _all_parts(self) -> list[TenantTable]:
        parts = [self._part_by_name(n, create=False) for n in self._table_names() if is_tenant_table(n)]
        return [p for p in parts if p is not None]

    def table_for(self, tenant_id: str) -> Any | None:
        """The ``lancedb`` table of ``tenant_id`` (None before its first write), for maintenance and inspection."""
        part = self._part(tenant_id)
        return part.table if part is not None else None

    def release(self, tenant_id: str) -> None:
        """Let go of ``tenant_id``'s table in this process: its handle, its pylance dataset (and
        what LanceDB caches with them) and its in-process copy (``small``): a purge, here or in
        another process, deleted files they read from. The next use opens it again."""
        name = table_name(tenant_id)
        with self._parts_lock:
            self._parts.pop(name, None)
        self._small.drop(name)
        self._texts.drop(name)
        self._common.drop(name)

    def tenant_tables(self) -> list[str]:
        """Names of the per-tenant tables that exist (see ``table_name``)."""
        return sorted(n for n in self._table_names() if is_tenant_table(n))



    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise ReadOnlyError(operation, f"the episode index at {self.path} was opened read-only")

    @contextmanager
    def _commit_lock(self, part: TenantTable | None) -> Iterator[None]:
        """Exclusive lock shared by every process writing one table of this (local) index.

        LanceDB resolves most commit races itself, but under concurrent compaction two
        processes inserting the same new episode_id could both commit (lance issue #4585 and
        follow-ups). Writes are short, so on one machine we simply serialise them, per table
        (``part=None``: the lock for creating tables). A compaction, which is long and adds no
        key, does not take it but for a last attempt (``_compact``). Object stores (s3://) have
        no such lock and rely on LanceDB's conflict detection alone (docs/architecture.md, "The
        episode index's write lock").
        """
        with self._file_lock(WRITE_LOCK_FILE if part is None else f".write.{part.name}.lock"):
            yield

    @contextmanager
    def _file_lock(self, filename: str, timeout: float | None = None) -> Iterator[None]:
        """An exclusive lock on ``filename`` beside the tables (a no-op off the local disk);
        ``timeout``: as ``locks.file_lock``'s."""
        if not self._is_local:
            yield
            return
        with file_lock(Path(self.path) / filename, timeout=timeout):
            yield

    def _retry(self, part: TenantTable, fn: Any, what: str, lock: bool = True) -> Any:
        delay = 0.05
        for attempt in range(1, COMMIT_RETRIES + 1):
            try:
                if not lock:
                    return fn()
                with self._commit_lock(part):
                    return fn()
            except Exception as exc:  # lancedb raises plain OSError/RuntimeError/ValueError
                if attempt == COMMIT_RETRIES or not is_commit_conflict(exc):
                    raise
                log.info("%s lost a commit race (attempt %d): %s; retrying", what, attempt, exc)
                time.sleep(delay)
                delay *= 2
                try:
                    part.table.checkout_latest()
                except Exception:  # pragma: no cover
                    pass
        return None  # pragma: no cover

    def _compact(self, part: TenantTable, target_rows: int, only: set[int] | None = None) -> dict[str, Any]:
        """Compact ``part``'s table to fragments of ``target_rows`` rows without holding its write
        lock (docs/architecture.md, "The episode index's write lock"), but for a last attempt.

        Writers would otherwise wait for the whole compaction: the rewrite (6-8 s for 1M rows)
        and the commit, inside which lance remaps every index to the new row addresses (10-38 s
        at 1M rows, the most of it: bench/README.md, "Item 2: compaction beside the writers").
        A compaction adds and removes no key, so the writers' reason for the
        lock (two inserts of one new key) is not its; what it must not do is undo a delete or an
        update committed since its plan. Each rewritten group (pylance's distributed compaction:
        ``Compaction.plan``, ``task.execute``) whose source fragments a commit since the plan
        changed (a delete or an update gave one another deletion file, or another compaction
        replaced it) is dropped, its new files deleted, and the rest committed; a change that
        lands between that check and the commit makes lance refuse the commit (a Rewrite
        preempted by a Delete or Update is a retryable conflict, as on an object store, where
        there never was a lock), and every group is dropped. Appends only add fragments, and a
        writer that committed after the rewrite is retried by lance against the new fragments.
        Dropped groups are planned again from the newest version; the last attempt plans,
        rewrites and commits under the lock, so a table that keeps being changed is compacted
        all the same. ``only``: the fragments it may rewrite (lance's ``excluded_fragment_ids``: every
        other, those written since included), None: any. Returns what was done (counts and seconds,
        for the log and the bench)."""
        with self._compaction_lock(part):  # one compaction at a time; a purge waits for it
            return self._compact_attempts(part, target_rows, only)

    @contextmanager
    def _compaction_lock(self, part: TenantTable) -> Iterator[None]:
        """Held by a compaction of ``part``'s table from its plan to its commit (or the deletion of
        what it dropped), and by a purge, taken before the write lock: writers never take it. A
        purge so never returns while a compaction started before it still holds files that
        copy a row it forgot."""
        with self._file_lock(f".compact.{part.name}.lock"):
            yield

    @contextmanager
    def _building(self, part: TenantTable, wait: bool = True) -> Iterator[None]:
        """Held by whatever writes index files of ``part``'s table (a build, a fold, a merge, a
        compaction, which remaps the indexes) from before its first file to its commit: this
        process's threads (``_index_lock``) and, on a local folder, other processes and their
        maintenance children. Taken before the compaction and write locks. Re-entrant in a thread.

        Files such an operation wrote stay behind, named by no version, when it is killed before
        its commit (kill -9, a crash) or fails half-way (a full disk). LanceDB cannot tell them
        from an operation still in progress, so its cleanup leaves them for 7 days; at 10M rows a
        killed index update left 1.6 GB (bench/README.md). Who holds this lock, the compaction
        lock and the write lock knows that nothing is in progress: each holder leaves a mark
        beside the lock (``.index.<table>.building``) that only an operation that ended cleanly
        takes away, and the next holder that finds it deletes every file no version names
        (``_sweep_unnamed``). The purge always does (writes.py). docs/architecture.md, "Files a
        killed operation leaves". ``wait=False``: raise ``BuildingBusy`` at once if another
        process holds it."""
        with self._index_lock, ExitStack() as stack:
            if part.name in self._building_held or not self._is_local:
                yield
                return
            try:
                stack.enter_context(self._file_lock(f".index.{part.name}.lock", timeout=None if wait else 0))
            except StorageError as exc:  # only a lock that timed out raises it
                raise BuildingBusy(part.name) from exc
            mark = Path(self.path) / f".index.{part.name}.building"
            if mark.exists():  # the holder before this one did not end cleanly
                try:
                    self._sweep_unnamed(part, timedelta(seconds=self.config.index_version_retention_seconds))
                except Exception as exc:  # pragma: no cover - the mark stays: the next holder tries again
                    log.warning("episode index %s: deleting what an interrupted operation left failed: %s",
                                part.name, exc)
            else:
                try:
                    create_private_file(mark)
                except OSError as exc:  # a full disk: the work goes on (a purge frees space), unmarked
                    log.warning("episode index %s: could not write %s (%s)", part.name, mark, exc)
            self._building_held.add(part.name)
            try:
                yield
                mark.unlink(missing_ok=True)  # not reached on an error: what failed may have left files
            finally:
                self._building_held.discard(part.name)

    def _sweep_unnamed(self, part: TenantTable, keep: timedelta) -> None:
        """Delete the versions of ``part``'s table older than ``keep`` and every file no version
        left names, however young (LanceDB's ``delete_unverified``), under the compaction and
        write locks; the caller holds ``_building``, so no operation of any process is half-way
        (a local folder: elsewhere nothing guarantees that, and this is never called)."""
        with self._compaction_lock(part), self._commit_lock(part):
            stats = part.latest_dataset().cleanup_old_versions(older_than=keep, delete_unverified=True)
            part.table.checkout_latest()
        log.warning("episode index %s: an operation on it did not end cleanly; deleted the files no version "
                    "names: %d data, %d index, %.1f MB", part.name, stats.data_files_removed,
                    stats.index_files_removed, stats.bytes_removed / 1e6)

    def _compact_attempts(self, part: TenantTable, target_rows: int, only: set[int] | None = None) -> dict[str, Any]:
        """``_compact``'s attempts, under the compaction lock."""
        from lance.optimize import Compaction, CompactionOptions

        def options(ds: Any) -> CompactionOptions:
            opts = CompactionOptions(target_rows_per_fragment=target_rows)
            if only is not None:
                opts["excluded_fragment_ids"] = [int(f.fragment_id) for f in ds.get_fragments()
                                                 if int(f.fragment_id) not in only]
            return opts

        out: dict[str, Any] = {"tasks": 0, "committed": 0, "dropped": 0, "attempts": 0, "locked": False,
                               "rewrite_s": 0.0, "commit_s": 0.0, "locked_s": 0.0}
        for attempt in range(1, COMPACT_ATTEMPTS + 1):
            out["attempts"] = attempt
            if attempt == COMPACT_ATTEMPTS:  # planned, rewritten and committed under the lock
                with self._commit_lock(part):
                    t0 = time.perf_counter()
                    ds = part.latest_dataset()
                    plan = Compaction.plan(ds, options(ds))
                    if plan.tasks:
                        Compaction.commit(ds, [task.execute(ds) for task in plan.tasks])
                    out.update(locked=True, tasks=out["tasks"] + len(plan.tasks),
                               committed=out["committed"] + len(plan.tasks))
                    out["locked_s"] += time.perf_counter() - t0
                break
            t0 = time.perf_counter()
            ds = part.latest_dataset()
            plan = Compaction.plan(ds, options(ds))
            if not plan.tasks:
                break
            rewrites = [task.execute(ds) for task in plan.tasks]
            t1 = time.perf_counter()
            out["rewrite_s"] += t1 - t0
            out["tasks"] += len(rewrites)
            latest = part.latest_dataset()
            now = {f.fragment_id: f.metadata for f in latest.get_fragments()}
            keep = [r for r in rewrites if not _sources_changed(r, now)]
            dropped = [r for r in rewrites if _sources_changed(r, now)]
            if keep:
                try:
                    Compaction.commit(latest, keep)
                except Exception as exc:
                    if not is_commit_conflict(exc):
                        raise
                    log.info("compaction of %s lost a commit race (attempt %d): %s", part.name, attempt, exc)
                    dropped = rewrites
            out["commit_s"] += time.perf_counter() - t1
            self._delete_unused(latest, dropped)
            out["dropped"] += len(dropped)
            out["committed"] += len(rewrites) - len(dropped)
            if not dropped:
                break
        part.table.checkout_latest()
        return out

    def _delete_unused(self, dataset: Any, rewrites: list[Any]) -> None:
        """Delete the data files of compaction rewrites that were never committed (local disk only:
        lance's cleanup would keep them for days as unverified). Nothing refers to them."""
        if not self._is_local or not rewrites:
            return
        data = Path(dataset.uri) / "data"
        for rewrite in rewrites:
            for frag in rewrite.new_fragments:
                for f in frag.files:
                    if getattr(f, "base_id", None) is None:
                        (data / f.path).unlink(missing_ok=True)

    def _searched(self, part: TenantTable) -> None:
        """A full-text search of ``part`` (a table searched through LanceDB): the maintenance looks
        once for rows left unfolded (maintenance.py); nothing here."""

    def _indexes(self, part: TenantTable, refresh: bool = False) -> dict[str, str]:
        """The table's indexes: name -> LanceDB's index type (``BTree``, ``Bitmap``, ``FTS``, ...)."""
        if part.index_names is None or refresh:
            part.index_names = {ix.name: str(getattr(ix, "index_type", "")) for ix in part.table.list_indices()}
        return part.index_names

    def _selected_parts(self, tenant_id: str | None) -> list[TenantTable]:
        if tenant_id is None:
            return self._all_parts()
        part = self._part(tenant_id)
        return [part] if part is not None else []


def _sources_changed(rewrite: Any, now: dict[int, Any]) -> bool:
    """Whether a commit since the compaction's plan changed any fragment ``rewrite`` replaces
    (``now``: the newest version's fragments by id): removed it (another compaction) or gave it
    another deletion file (a delete, or an update's delete of the old row). Committing the
    rewrite would then bring back what that commit removed."""
    for old in rewrite.original_fragments:
        cur = now.get(old.id)
        if cur is None:
            return True
        a, b = cur.deletion_file, old.deletion_file
        if (a is None) != (b is None):
            return True
        if a is not None and (a.id, a.read_version, a.num_deleted_rows) != (b.id, b.read_version, b.num_deleted_rows):
            return True
    return False
