"""Every process lets go of what a purge removed (docs/forget.md, "Other processes").

A purge deletes files: a tenant's saved Cypher projections, its index table's old versions and
indexes. Another process that had opened them (a ``worldgraph serve`` that answered a Cypher query
before the CLI forgot and purged) would keep the unlinked files open, and their pages still hold
the forgotten words; its caches (an index table's in-process copy, sentence vectors, the rounds it
remembers) hold them too. So a purge bumps, in the store, a generation per purged tenant
(``GraphStore.bump_purge_generations``; the embedded store's ``purge_gens`` table, Neo4j's
``(:PurgeGeneration)`` nodes), and every process that opened the store watches them
(``PurgeWatch``): at least once a second in the background and before every query
(``check``), one read of the total (and, when it moved, of the tenants'). A tenant whose
generation moved is released: whatever this process holds of it is closed and dropped, and the
next use opens what is current. Within a second of a purge no handle of any process points at a
purged file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from worldgraph.kg.ids import clear_name_cache
from worldgraph.kg.store import GraphStore
from worldgraph.memory.embedders.hashing import clear_feature_cache
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.recall.sentences import CACHE as SENTENCES
from worldgraph.world.curiosity import RoundHistory
from worldgraph.world.merge.rules import clear_token_cache

__all__ = ["CHECK_EVERY_SECONDS", "PurgeWatch", "releaser"]

log = logging.getLogger("worldgraph")

CHECK_EVERY_SECONDS = 1.0


class PurgeWatch:
    """Watches ``store``'s purge generations; ``release(tenant)`` lets go of a purged tenant's
    handles and caches in this process. ``start()`` the background check (every ``interval``
    seconds); ``check()`` before a query; ``stop()`` on close."""

    def __init__(self, store: GraphStore, release: Callable[[str], None],
                 interval: float = CHECK_EVERY_SECONDS) -> None:
        self.store = store
        self.release = release
        self.interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._total = store.purge_total()
        self._gens = store.purge_generations() if self._total else {}
        self.released = 0  # tenants released so far (tests read it)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="worldgraph-purge-watch", daemon=True)
            self._thread.start()

    def check(self) -> list[str]:
        """Release the tenants purged since the last check (by any process); returns them."""
        total = self.store.purge_total()
        if total == self._total:
            return []
        with self._lock:
            if total == self._total:  # another thread released them meanwhile
                return []
            gens = self.store.purge_generations()
            moved = sorted(t for t, g in gens.items() if self._gens.get(t) != g)
            for tenant in moved:
                self.release(tenant)
            self._total, self._gens = total, gens
            self.released += len(moved)
            return moved

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check()
            except Exception as exc:  # noqa: BLE001 - a store away for a moment: the next tick retries
                log.debug("purge generations not read (%s); retrying in %.1f s", exc, self.interval)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


def releaser(store: GraphStore, index: EpisodeIndex, history: RoundHistory,
             world: Callable[[str], None] = lambda tenant_id: None) -> Callable[[str], None]:
    """What a process lets go of when a tenant is purged: the store's handles of it (the embedded
    store's Cypher projection), its index table (handle, dataset, in-process copy), its world
    index's (``world``), its sentence vectors, the rounds of its history whose episodes are gone,
    and the memo caches that hold words (names normalised, rule texts tokenised, words hashed:
    every tenant's, refilled on use)."""

    def release(tenant_id: str) -> None:
        store.release_tenant(tenant_id)
        index.release(tenant_id)
        world(tenant_id)
        SENTENCES.drop(tenant_id)
        kept = history.episode_ids(tenant_id)
        if kept:
            alive = store.get_episodes(tenant_id, kept)
            history.forget_episodes(tenant_id, [e for e in kept if e not in alive])
        clear_name_cache()
        clear_token_cache()
        clear_feature_cache()
    return release
