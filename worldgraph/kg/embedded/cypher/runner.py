"""``EmbeddedGraphStore.cypher``'s work: the checks, the tenant's projection, a query child to run
it, and what a crash or a closed child means for the caller.

- **Mode.** "landlock" where the kernel has Landlock (``confine.abi``): children confine
  themselves (``child``). Elsewhere "unsandboxed": the children still run the query in a separate
  process on a read-only projection, behind the text guard, but the operating system does not
  confine them; ``serve`` then refuses Cypher from API keys unless the operator sets
  ``cypher_allow_unsandboxed`` (``docs/cypher.md``).
- **The text guard** (``cypher_guard.check_text``, ``text.check_text``) refuses first (Neo4j's
  planner hints taken out before: ``text.without_hints``), then the query is translated
  (``text.translate``). The test switch ``guard_off`` (honoured only in
  "landlock" mode) skips both: the query reaches the engine as written, so tests prove the
  sandbox alone holds.
- **Deadline.** Counted from the call; the time a projection takes to be built or refreshed, and
  a child to start, is added to it (``pool``).
- **Crashes.** The first crash of a query is ``CypherCrashError`` (503, retry); a query that
  crashed a child before and crashes a fresh one again is refused with ``CypherQueryError``
  (400) naming it, and refused at once after that (up to ``CRASHES_KEPT`` queries remembered).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worldgraph.errors import CypherCrashError, CypherQueryError, StorageError
from worldgraph.filemodes import private_dir
from worldgraph.kg.cypher_limits import COUNTERS, CRASHED, CypherSettings
from worldgraph.kg.embedded.cypher import confine, guard, text
from worldgraph.kg.embedded.cypher.cache import ProjectionCache
from worldgraph.kg.embedded.cypher.execution import run
from worldgraph.kg.embedded.cypher.model import ENGINE
from worldgraph.kg.embedded.cypher.opener import Opener
from worldgraph.kg.embedded.cypher.pool import ChildClosed, ChildCrashed, ChildPool, PoolSettings
from worldgraph.kg.embedded.cypher.projection import Projection
from worldgraph.kg.embedded.cypher.reach import world_only
from worldgraph.kg.embedded.cypher.saved import SavedProjections, Scratch, folder_for
from worldgraph.kg.store import Record

if TYPE_CHECKING:
    from worldgraph.kg.embedded.connection import SqliteConnection

__all__ = ["CRASHES_KEPT", "CypherRunner", "sandbox_mode"]

log = logging.getLogger("worldgraph")

CRASHES_KEPT = 1_000


def sandbox_mode(settings: CypherSettings) -> str:
    """"landlock" where this kernel has Landlock (and the tests do not pretend otherwise), else
    "unsandboxed"."""
    return "landlock" if confine.abi() >= 1 and not settings.no_landlock else "unsandboxed"


class CypherRunner:
    """The embedded store's Cypher: projections, query children, crashes (module docstring)."""

    def __init__(self, db: SqliteConnection, sqlite_path: Path, read_only: bool, settings: CypherSettings) -> None:
        self.db = db
        # absolute: the children run in / and open the paths they are given (a data folder given as
        # ./data names the caller's working directory)
        sqlite_path = Path(os.path.abspath(sqlite_path))
        self.sqlite_path = sqlite_path
        self.settings = settings
        self.mode = sandbox_mode(settings)
        # projections saved beside the SQLite file, reopened in ~0.1 s (none for a read-only store)
        self.saved = SavedProjections(None if read_only else folder_for(sqlite_path))
        self.scratch = Scratch(self.saved.folder)
        self.projections = ProjectionCache(dispose=self._dispose)
        self._children: ChildPool | None = None
        self._lock = threading.Lock()
        self._crashes: OrderedDict[str, int] = OrderedDict()

    @property
    def children(self) -> ChildPool:
        """The query children (started on first use, with the folders their projections live in)."""
        with self._lock:
            if self._children is None:
                roots = [str(f) for f in self.scratch.folders()]
                if self.saved.folder is not None:
                    try:
                        private_dir(self.saved.folder)
                        roots.append(str(self.saved.folder))
                    except OSError as exc:  # a full disk: projections go to the temporary folder
                        log.warning("could not make %s (%s)", self.saved.folder, exc)
                        self.saved.folder = None
                self._children = ChildPool(PoolSettings(sandbox=self.mode == "landlock", roots=roots))
            return self._children

    def run(self, tenant_id: str, query: str, params: dict[str, Any] | None) -> list[Record]:
        started = time.monotonic()
        unguarded = self.settings.guard_off and self.mode == "landlock"
        if unguarded:
            translated = query
        else:
            query = text.without_hints(query)  # Neo4j's planner hints: the same text runs on both stores
            guard.check_text(query)
            query = query.rstrip().removesuffix(";")  # (the guard allows one, last)
            translated = text.translate(query)
        crash_key = hashlib.sha256(translated.encode("utf-8", "surrogatepass")).hexdigest()
        if self._crashes.get(crash_key, 0) >= 2:
            raise self._refused(query)
        opener = Opener(self.db, self.saved, self.sqlite_path, tenant_id, full=not world_only(query),
                        scratch=self.scratch, pause=lambda p: self.children.pause(p),
                        retire=lambda p: self.children.retire(p))
        children = self.children
        for _ in range(3):
            ready = time.monotonic()
            # the generations move with every commit that wrote a part, by any process (a world
            # delta refreshes only the world part)
            proj = self.projections.get(tenant_id, self.db.version(), opener.build, opener.refresh, opener.serves)
            deadline = started + self.settings.timeout + (time.monotonic() - ready)
            try:
                return run(children, proj.path, tenant_id, query, translated, params, timeout=self.settings.timeout,
                           deadline=deadline, max_rows=self.settings.max_rows, max_bytes=self.settings.max_bytes,
                           memory_cap=self.settings.child_memory)
            except ChildClosed as exc:  # its file was replaced or purged, or could not be opened
                if exc.open_failed:
                    log.info("a Cypher query child could not open %s (%s): the projection is built anew",
                             proj.path, exc)
                    proj.closed = True
                    if self.saved.holds(proj.path):
                        self.saved.remove_file(proj.path)
                started = min(started + (time.monotonic() - ready), time.monotonic())
                continue
            except ChildCrashed as exc:
                COUNTERS.add(CRASHED)
                raise self._crashed(crash_key, query, exc.how) from None
        raise StorageError("the Cypher projection kept being replaced by concurrent writes; try the query again")

    def _crashed(self, key: str, query: str, how: str) -> Exception:
        with self._lock:
            seen = self._crashes.get(key, 0) + 1
            self._crashes[key] = seen
            self._crashes.move_to_end(key)
            while len(self._crashes) > CRASHES_KEPT:
                self._crashes.popitem(last=False)
        log.warning("the embedded Cypher engine crashed on a query (%s); its child was replaced, nothing else "
                    "was affected", how)
        if seen >= 2:
            return self._refused(query)
        return CypherCrashError(f"the embedded Cypher engine ({ENGINE}) crashed on this query ({how}); only its "
                                "own process ended. Try again in a moment: a query that crashes the engine again "
                                "is refused", retry_after=1)

    @staticmethod
    def _refused(query: str) -> CypherQueryError:
        shown = query if len(query) <= 200 else query[:197] + "..."
        return CypherQueryError(f"this query crashes the embedded Cypher engine ({ENGINE}) and is refused: {shown!r}. "
                                "Rewrite it (another function or clause), or run it on the Neo4j store")

    def _dispose(self, proj: Projection) -> None:
        """A projection the cache lets go: closed here, its children ended when idle, its file
        deleted if it is a temporary one."""
        proj.close()
        if self._children is not None:
            self._children.retire(proj.path)
        self.scratch.remove(proj.path)

    def forget(self, tenant_id: str) -> None:
        """Everything of the tenant's projections goes (a purge): the kept one, the saved files, and
        every query child holding one, busy or not (``ChildPool.close``)."""
        self.saved.remove(tenant_id)
        self.release(tenant_id)

    def release(self, tenant_id: str) -> None:
        """Let go of the tenant's projections in this process (another process purged it and deleted
        the files they may be open on: facade/generations.py): the kept one closed, every query
        child holding one killed, busy or not (its caller runs the query again on a current one)."""
        self.projections.drop(tenant_id)
        if self._children is not None:
            self._children.close(tenant_id=tenant_id)

    def close(self) -> None:
        self.projections.close()
        if self._children is not None:
            self._children.shutdown()
        self.scratch.close()

