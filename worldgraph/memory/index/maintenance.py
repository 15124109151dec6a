"""Keeping the episode index's indexes fresh: scalar / BM25 / ANN builds, compaction, folding.

Expensive work runs in a background thread that starts a child process (see
``_run_maintenance_process``), so the process's reads and writes keep flowing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from worldgraph.clock import seconds_left
from worldgraph.config import PACKAGE_PARENT, child_environment, module_command
from worldgraph.memory.index.policy import (
    ann_due_rows,
    ann_mirrored,
    compaction_target,
    deleted_fragments,
    fold_new_rows,
    fragment_rows,
    index_partitions,
    index_segments,
    merge_for_compaction,
    vector_index_config,
)
from worldgraph.memory.index.schema import (
    FTS_INDEX_NAME,
    INDEX_TYPE_NAMES,
    SCALAR_INDEXES,
    VECTOR_INDEX_NAME,
)
from worldgraph.memory.index.tables import BuildingBusy, IndexTables, TenantTable
from worldgraph.memory.index.worker import MaintenanceWorker, child_env

log = logging.getLogger("worldgraph.memory.index.episode_index")

# how long the maintenance thread (and its kept child) waits for the next task before going
WORKER_GRACE_SECONDS = 5.0

# the timed steps kept: of this many runs in ``maintenance_runs`` (older runs keep their totals), and
# this many in ``maintenance_steps`` (a long-lived process runs maintenance every few seconds)
KEEP_STEPS = 1_000

# when this process last deleted old versions of a table (path, table name) -> time.monotonic();
# module-level: the kept maintenance child opens the index anew for each run
_last_cleanup: dict[tuple[str, str], float] = {}


class IndexMaintenance(IndexTables):
    """Index building and optimize for ``EpisodeIndex``, in the background after writes or on request."""

    _maint_lock: threading.Lock
    _maint_thread: threading.Thread | None
    _maint_pending: set[tuple[str, str]]
    _maint_cv: threading.Condition  # on _maint_lock: a task was added, or a run ended
    _maint_active: int  # runs in progress
    _maint_arms: int  # writes and first searches that asked for a look at idle tables (_start_maintenance, no task)
    _maint_worker: MaintenanceWorker | None  # the kept child (worker.py)
    _maint_closed: bool  # the index is closed: no run starts
    maintenance_runs: list[dict[str, Any]]
    maintenance_steps: list[dict[str, Any]]  # the steps this object ran (in the child: of its run), timed

    @contextmanager
    def _timed(self, part: TenantTable, step: str) -> Iterator[None]:
        """Time one step of maintenance (wall and this process's CPU, every thread's: LanceDB works
        in its own threads), logged at INFO and kept in ``maintenance_steps``; the maintenance
        child hands its run's steps to the parent (``maintenance_runs``), where the bench reads them."""
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            self.maintenance_steps.append({"table": part.name, "step": step,
                                           "s": round(wall, 3), "cpu_s": round(cpu, 3)})
            log.info("episode index %s: %s took %.2f s (%.2f CPU-s)", part.name, step, wall, cpu)

    def _after_write(self, part: TenantTable, n_rows: int) -> None:
        """Cheap bookkeeping after a write; expensive work runs in the background, rarely."""
        try:
            self._after_write_steps(part, n_rows)
        finally:
            self.keep_private()

    def keep_private(self, now: bool = False) -> None:
        """What LanceDB wrote, made private when the process's umask does not (worldgraph.filemodes):
        within a second, or ``now``."""
        if self._private is not None:
            self._private.sweep(force=now)

    def _after_write_steps(self, part: TenantTable, n_rows: int) -> None:
        part.writes += 1
        part.rows_since_optimize += n_rows
        part.rows_added += n_rows
        part.last_write = time.monotonic()
        try:
            names = self._indexes(part)
            if FTS_INDEX_NAME not in names or any(f"{c}_idx" not in names for c in SCALAR_INDEXES):
                # first write of this table: it is small, so these indexes are quick to build. A
                # table an earlier version wrote may lack one: the write does not wait for another
                # process's maintenance run (minutes at 10M rows), a later write builds it
                try:
                    self._ensure_part(part, vector=False, fold=False, wait=False)
                except BuildingBusy:
                    log.info("episode index %s: an index is missing; another process's maintenance holds "
                             "the table, a later write builds it", part.name)
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
            elif 0 < self.config.optimize_idle_rows <= part.rows_since_optimize:
                self._start_maintenance()  # folded once no write has come for a while (_idle_folds)
        except Exception as exc:  # maintenance never fails a write that already committed
            log.warning("episode index maintenance failed (will retry later): %s", exc)

    def _start_maintenance(self, what: str | None = None, name: str | None = None) -> None:
        """Run index building / optimize in one background thread (writes and reads go on); with
        no task, only make sure the thread runs: before it ends it folds the tables left idle
        with rows not folded (``_idle_folds``)."""
        with self._maint_lock:
            if self._maint_closed:
                return  # (a write racing close: its rows are folded after a later write)
            if what is not None and name is not None:
                self._maint_pending.add((what, name))
                self._maint_cv.notify_all()
            else:
                self._maint_arms += 1
            if self._maint_thread is not None and self._maint_thread.is_alive():
                return
            self._maint_thread = threading.Thread(
                target=self._maintenance_loop, name="worldgraph-index-maintenance", daemon=True
            )
            self._maint_thread.start()

    def _maintenance_loop(self) -> None:
        """Runs the pending tasks in the kept child (worker.py), then waits ``WORKER_GRACE_SECONDS``
        for more (a bulk ingest asks every few seconds) before letting the child go; meanwhile,
        and until then, it folds the tables whose writes have stopped (``_idle_folds``)."""
        grace_end = time.monotonic() + WORKER_GRACE_SECONDS
        while True:
            with self._maint_lock:
                arms, closed = self._maint_arms, self._maint_closed
            # (outside the lock: it reads the row counts of the tables it folds)
            idle, wake = self._idle_folds() if not closed else ([], None)
            with self._maint_lock:
                if idle and not self._maint_closed:
                    self._maint_pending.update(("optimize", name) for name in idle)
                if not self._maint_pending and not self._maint_closed:
                    if self._maint_arms != arms:  # a write came meanwhile: look at the tables again
                        continue
                    # a table still written to keeps the thread until it may be idle
                    left = (grace_end if wake is None else wake) - time.monotonic()
                    if wake is not None or left > 0:
                        if left > 0:
                            self._maint_cv.wait(left)  # a task, or the time to look again
                        continue
                if not self._maint_pending or self._maint_closed:
                    # under the lock: a task added from now on starts a new thread (and child)
                    self._maint_thread = None
                    self.stop_maintenance_worker()  # idle: it exits at once
                    return
                pending = sorted(self._maint_pending)  # "ann" before "optimize" for a table
                self._maint_pending.clear()
                self._maint_active += 1
            try:
                self._run_pending(pending)
            finally:
                with self._maint_lock:
                    self._maint_active -= 1
                    self._maint_cv.notify_all()
            grace_end = time.monotonic() + WORKER_GRACE_SECONDS

    def _searched(self, part: TenantTable) -> None:
        """The first full-text search of ``part`` in this process: it may hold rows that another
        process left unfolded (an import that closed right after its last write, its rows
        fewer than ``optimize_every_rows``); the maintenance thread counts them (``_idle_folds``)."""
        part.look_unfolded = not self.read_only and self.config.optimize_idle_rows > 0
        if part.look_unfolded:
            self._start_maintenance()

    def _unfolded_rows(self, part: TenantTable) -> int:
        """The rows of ``part`` its full-text index does not cover yet, whoever wrote them, at the
        version the search that asked saw (from the manifest: ~1 ms at 10M rows)."""
        ds = part.dataset if part.dataset is not None else part.latest_dataset()
        covered = set().union(*index_segments(ds).get(FTS_INDEX_NAME, [set()]))
        return sum(rows for frag, rows in fragment_rows(ds).items() if frag not in covered)

    def _idle_folds(self) -> tuple[list[str], float | None]:
        """The tables to fold now because their writes stopped: at least ``optimize_idle_rows`` rows
        not folded (written through this process since their last fold, or, at the first look
        after a search, counted from the manifest, whoever wrote them), no write through this
        process for ``optimize_idle_seconds``, and more rows than are searched in process
        (small.py; a bigger table's text search scans the rows not folded, ~9 ms per 1,000 at any
        size: bench/README.md, "Rows left unfolded after an ingest"). Their counts start again.
        Also when to look again (time.monotonic()) for a table written to within the last
        ``optimize_idle_seconds``; None: no table is waiting."""
        rows, wait = self.config.optimize_idle_rows, self.config.optimize_idle_seconds
        if rows <= 0:
            return [], None
        now, due, wake = time.monotonic(), [], None
        for part in list(self._parts.values()):
            waiting = part.rows_since_optimize
            if part.look_unfolded:
                try:
                    waiting = max(waiting, self._unfolded_rows(part))
                except Exception as exc:  # noqa: BLE001 - the next write or optimize takes them in
                    log.info("episode index %s: could not count the rows not folded: %s", part.name, exc)
            if waiting < rows:
                part.look_unfolded = False
                continue
            if now < part.last_write + wait:  # (a table to count again then keeps its look)
                wake = min(wake if wake is not None else math.inf, part.last_write + wait)
                continue
            part.look_unfolded = False
            try:
                small = int(part.table.count_rows()) <= self._small.max_rows  # the manifest's count
            except Exception as exc:  # noqa: BLE001 - a later write looks again
                log.info("episode index %s: not folded when idle: %s", part.name, exc)
                continue
            if not small:
                part.rows_since_optimize = 0
                due.append(part.name)
        return due, wake

    def _run_pending(self, pending: list[tuple[str, str]]) -> None:
        started = time.perf_counter()
        ok = False
        steps: list[dict[str, Any]] = []
        try:
            steps = self._run_maintenance_process(pending)
            ok = True
        except Exception as exc:
            (log.info if self._maint_closed else log.warning)(
                "episode index background maintenance failed (will retry later): %s", exc)
        finally:
            self.maintenance_runs.append({"tasks": [list(t) for t in pending], "ok": ok,
                                          "seconds": round(time.perf_counter() - started, 3), "steps": steps})
            if len(self.maintenance_runs) > KEEP_STEPS:
                self.maintenance_runs[-KEEP_STEPS - 1].pop("steps", None)
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

    def _run_maintenance_process(self, tasks: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """ANN build / optimize of some tables in a child process.

        lancedb's synchronous API runs every call on one background event loop per process, so
        a long create_index in a thread stalls every other read and write of the process
        (measured: a 2k-row upsert waited 115 s behind an HNSW build). A child process keeps
        this process's recalls and writes flowing. The child is kept between runs (worker.py).
        Returns the run's timed steps (``_timed``).
        """
        if self.path.startswith("memory://"):  # another process cannot see this one's memory
            return run_maintenance_tasks(self, tasks)
        if self._maint_worker is None:
            # An object store too: the child opens the same URI with the AWS_* variables it inherits.
            # the child imports the parent's code, wherever it runs (config/environment.py)
            env = child_env(child_environment(pythonpath_first=PACKAGE_PARENT), self.config.maintenance_malloc_arena_max)
            cmd = module_command("worldgraph.memory.index.episode_index", "serve", self.path,
                                 str(self.dimensions), self.embedder_name, self.config.child_config_json())
            self._maint_worker = MaintenanceWorker(cmd, env)
        return self._maint_worker.run(tasks)

    def wait_for_maintenance(self, timeout: float | None = None) -> bool:
        """Block until background index building / optimize (and mirror building, mirror.py) is
        done; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._wait_runs(deadline) and \
            self._mirrors.wait(seconds_left(deadline))

    def _wait_runs(self, deadline: float | None) -> bool:
        """Block until no maintenance run is pending or in progress; False at ``deadline``."""
        with self._maint_lock:
            while self._maint_pending or self._maint_active:
                thread = self._maint_thread
                if not self._maint_active and (thread is None or not thread.is_alive()):
                    break  # no thread left to run them (it died): nothing to wait for
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._maint_cv.wait(left)
        return True

    def stop_maintenance_worker(self) -> None:
        """Let the kept maintenance child go now (it finishes the run it is in); the next run
        starts another."""
        if self._maint_worker is not None:
            self._maint_worker.close()

    def _close_maintenance(self, deadline: float | None) -> None:
        """No run starts from now on (the tasks not started are dropped: they are asked again
        after later writes); the run in progress ends by ``deadline`` (time.monotonic()), its child
        killed then; the maintenance thread is joined."""
        with self._maint_lock:
            self._maint_closed = True
            dropped = sorted(self._maint_pending)
            self._maint_pending.clear()
            self._maint_cv.notify_all()
            thread = self._maint_thread
        if dropped:
            log.info("episode index %s: closed before maintenance %s ran", getattr(self, "path", "?"), dropped)
        if self._maint_worker is not None:
            self._maint_worker.close(seconds_left(deadline), final=True)
        if thread is not None and thread is not threading.current_thread():
            thread.join(seconds_left(deadline))

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

    def _ensure_part(self, part: TenantTable, vector: bool = True, fold: bool = True, wait: bool = True) -> list[str]:
        """``ensure_indexes`` of one table; ``wait=False``: raise ``BuildingBusy`` at once if
        another process's maintenance holds the table's index lock (tables.py, ``_building``)."""
        from lancedb.index import FTS

        created: list[str] = []
        with self._building(part, wait=wait):
            names = self._indexes(part, refresh=True)
            created += self._upgrade_kinds(part)
            for column, kind in SCALAR_INDEXES.items():
                name = f"{column}_idx"
                if name in names:
                    continue
                try:
                    with self._timed(part, f"create {name}"):
                        self._create_index(part, column, scalar_index_config(kind), name)
                except Exception as exc:
                    if kind != "BITMAP" or "already exists" in str(exc).lower():
                        raise
                    # BITMAP not supported for this column / version: a BTREE does the job
                    self._create_index(part, column, scalar_index_config("BTREE"), name)
                created.append(name)
            if FTS_INDEX_NAME not in names:
                with self._timed(part, f"create {FTS_INDEX_NAME}"):
                    self._create_index(part, "text", FTS(), FTS_INDEX_NAME)
                created.append(FTS_INDEX_NAME)
            if vector:
                rows = int(part.table.count_rows())
                if VECTOR_INDEX_NAME not in names and rows >= self.config.ann_index_min_rows:
                    with self._timed(part, f"create {VECTOR_INDEX_NAME}"):
                        self._create_vector_index(part)
                    created.append(VECTOR_INDEX_NAME)
                elif VECTOR_INDEX_NAME in names and self._ann_stale(part, rows):
                    log.info("episode index %s: retraining the ANN index for %d rows", part.name, rows)
                    with self._timed(part, f"retrain {VECTOR_INDEX_NAME}"):
                        self._create_vector_index(part)
                    created.append(VECTOR_INDEX_NAME)
            names = self._indexes(part, refresh=True)
            if fold and self._has_unindexed_rows(part, names):
                self._optimize_part(part, full=True)
        if created:
            log.info("episode index %s: created %s", part.name, ", ".join(created))
        self.keep_private()
        return created

    def _upgrade_kinds(self, part: TenantTable) -> list[str]:
        """Rebuild the scalar indexes whose kind is not ``SCALAR_INDEXES``' (written by an earlier
        version); returns their names."""
        names = self._indexes(part)
        return [f"{column}_idx" for column, kind in SCALAR_INDEXES.items()
                if names.get(f"{column}_idx", INDEX_TYPE_NAMES[kind]) not in ("", INDEX_TYPE_NAMES[kind])
                and self._rekind(part, column, kind)]

    def _rekind(self, part: TenantTable, column: str, kind: str) -> bool:
        """Rebuild ``column``'s scalar index as ``kind`` (a table written by an earlier version
        with another kind); False (the old index stays, and serves) if LanceDB refuses it."""
        name = f"{column}_idx"
        try:
            self._retry(part, lambda: part.table.create_index(column, config=scalar_index_config(kind), name=name,
                                                              replace=True), f"rebuild index {name}")
        except Exception as exc:
            log.info("episode index %s: %s stays a %s index (%s)", part.name, name, self._indexes(part)[name], exc)
            return False
        log.info("episode index %s: %s rebuilt as a %s index", part.name, name, kind)
        self._indexes(part, refresh=True)
        return True

    def _has_unindexed_rows(self, part: TenantTable, names: Iterable[str]) -> bool:
        for name in names:
            try:
                stats = part.table.index_stats(name)
            except Exception as exc:  # pragma: no cover - e.g. dropped by another process
                log.info("index_stats(%s) of %s failed: %s", name, part.name, exc)
                continue
            if stats is not None and (stats.num_unindexed_rows or 0) > 0:
                return True
        return False

    def _create_index(self, part: TenantTable, column: str, cfg: Any, name: str) -> None:
        """create_index that tolerates another process having just created the same index."""
        try:
            self._retry(part, lambda: part.table.create_index(column, config=cfg, name=name, replace=False),
                        f"create index {name}")
        except Exception as exc:
            if "already exists" in str(exc).lower() or name in self._indexes(part, refresh=True):
                return
            raise

    def _create_vector_index(self, part: TenantTable) -> None:
        """Train the ANN index on the table as it is now (replacing an older one)."""
        rows = int(part.table.count_rows())
        cfg = vector_index_config(self.config, rows, self.dimensions)
        part.table.create_index("vector", config=cfg, name=VECTOR_INDEX_NAME, replace=True)
        part.ann_partitions = None

    def _ann_partitions(self, part: TenantTable) -> int | None:
        """IVF partitions of the table's ANN index (None: no index)."""
        if part.ann_partitions is None:
            part.ann_partitions = index_partitions(part.latest_dataset(), VECTOR_INDEX_NAME)
        return part.ann_partitions

    def _ann_due_rows(self, part: TenantTable) -> int:
        """Rows at which the table's ANN index is built (none yet) or retrained (index_policy.ann_due_rows)."""
        if VECTOR_INDEX_NAME not in self._indexes(part):
            return ann_due_rows(self.config, None)
        partitions = self._ann_partitions(part) or 1
        return ann_due_rows(self.config, partitions, ann_mirrored(self.config, self._is_local, partitions))

    def _ann_stale(self, part: TenantTable, rows: int) -> bool:
        return rows >= self._ann_due_rows(part)

    def rebuild_vector_index(self, tenant_id: str) -> bool:
        """Train ``tenant_id``'s ANN index again on every row it has now, synchronously (after a
        bulk load, say; writes go on meanwhile). False if the table is below ann_index_min_rows."""
        self._writable("building the ANN index")
        part = self._part(tenant_id)
        if part is None or part.table.count_rows() < self.config.ann_index_min_rows:
            return False
        with self._building(part):
            self._create_vector_index(part)
            self._indexes(part, refresh=True)
        return True

    def optimize(self, tenant_id: str | None = None) -> None:
        """Compaction, then folding new rows into the existing indexes (no retraining), each index
        merged into one segment, of every tenant's table or of one.

        Neither the compaction (but for a last attempt, IndexTables._compact) nor the index update,
        which can take seconds on a large table, holds the cross-process write lock: both run
        beside other processes' writes.
        """
        self._writable("optimizing the episode index")
        for part in self._selected_parts(tenant_id):
            self._optimize_part(part, full=True)

    def _optimize_part(self, part: TenantTable, full: bool = False) -> None:
        """Fold new rows into the indexes (index_policy.fold_new_rows), compact, drop old versions
        (docs/architecture.md, "Compaction and index segments")."""
        with self._building(part):
            part.rows_since_optimize = 0
            with self._timed(part, "upgrade kinds"):
                self._upgrade_kinds(part)  # a table written by an earlier version, upgraded in place
            table = part.table
            try:
                part.open_dataset()
            except Exception:  # pragma: no cover - no pylance: lancedb's all-in-one optimize
                self._retry(part, lambda: table.optimize(), "optimize")
            else:
                # New rows first: every index then covers every small fragment (a compaction
                # merges only fragments the same segments of every index cover).
                timed = lambda step: self._timed(part, step)  # noqa: E731
                ds = self._retry(part, lambda: fold_new_rows(part.open_dataset(), self.config, full, timed),
                                 "optimize indexes", lock=False)
                # With lance's default target (1M rows) the growing fragment was rewritten by every
                # compaction: the background compacts only when index_policy.compaction_target says
                # a rewrite is due, and to the size it says.
                with self._timed(part, "compaction target"):
                    target = compaction_target(ds, self.config.compact_target_rows, full, index_segments(ds))
                if target is not None:
                    # lance merges only neighbouring fragments covered by the same index segments,
                    # and remaps every segment covering a fragment it rewrites: an explicit
                    # optimize merged each index into one segment above and compacts everything;
                    # the background merges the newest segments covering the fragments of the tier
                    # (policy.tier_merges) and rewrites only those fragments, and the ones past
                    # lance's deleted share
                    only: set[int] | None = None
                    if not full:
                        _, only = self._retry(part, lambda: merge_for_compaction(
                            part.open_dataset(), self.config.compact_target_rows, target, timed),
                            "merge indexes", lock=False)
                        only |= deleted_fragments(part.open_dataset())
                    # beside the writers: no write lock (IndexTables._compact)
                    with self._timed(part, f"compact to {target}"):
                        done = self._compact(part, target, only)
                    log.info("episode index %s: compaction to %d rows per fragment: %s", part.name, target, done)
                if full:  # what was written meanwhile, folded too
                    self._retry(part, lambda: fold_new_rows(part.open_dataset(), self.config, full, timed),
                                "optimize indexes", lock=False)
                try:
                    # Each compaction and index update leaves a copy of what it replaced; readers
                    # always move to the newest version, so old ones need not be kept for long.
                    # The cleanup lists every file of the table: at most every
                    # index_cleanup_every_seconds (during an ingest a run starts every few seconds).
                    key, now = (self.path, part.name), time.monotonic()
                    if full or now - _last_cleanup.get(key, -math.inf) >= self.config.index_cleanup_every_seconds:
                        _last_cleanup[key] = now
                        keep = timedelta(seconds=self.config.index_version_retention_seconds)
                        with self._timed(part, "cleanup old versions"):
                            part.open_dataset().cleanup_old_versions(older_than=keep)
                except Exception as exc:  # pragma: no cover
                    log.info("cleanup of old index versions failed: %s", exc)
            table.checkout_latest()
            self._indexes(part, refresh=True)
        self.keep_private()

    def has_vector_index(self, tenant_id: str | None = None) -> bool:
        """Whether ``tenant_id``'s table has its ANN index (no tenant: whether any table has one)."""
        return any(VECTOR_INDEX_NAME in self._indexes(p, refresh=True) for p in self._selected_parts(tenant_id))


def scalar_index_config(kind: str) -> Any:
    """The lancedb config of a scalar index of ``kind`` (``SCALAR_INDEXES``' values)."""
    from lancedb.index import Bitmap, BTree, LabelList

    return Bitmap() if kind == "BITMAP" else LabelList() if kind == "LABEL_LIST" else BTree()


def run_maintenance_tasks(idx: IndexMaintenance, tasks: Iterable[Sequence[str]]) -> list[dict[str, Any]]:
    """Carry out ``(what, table)`` tasks, ``what`` being "ann" (build the ANN index) or "optimize";
    a table dropped meanwhile is skipped; returns their timed steps (``IndexMaintenance._timed``).
    Run in the maintenance child process, or in this one for an in-memory index."""
    if len(idx.maintenance_steps) > KEEP_STEPS:
        del idx.maintenance_steps[:-KEEP_STEPS // 2]
    first = len(idx.maintenance_steps)
    for what, name in tasks:
        part = idx._part_by_name(name, create=False)
        if part is None:  # dropped meanwhile
            continue
        if what == "ann":
            idx._ensure_part(part, vector=True, fold=False)
        elif what == "optimize":
            idx._optimize_part(part)
    return idx.maintenance_steps[first:]
