"""The last step of recording, and its upkeep: embed episodes, write their index rows, mark them
indexed, and re-index what failed (``retry``) or everything (``reindex``).

The graph store is the system of record and the LanceDB index is derived: an episode whose
embedding or index write failed is stored anyway, marked "failed", and re-indexed later. Works on
the episode half of the store only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from worldgraph.config import WorldGraphConfig
from worldgraph.kg.store import EpisodeStore
from worldgraph.memory.embeddings import Embedder, check_embeddings
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.record import EpisodeRows, searchable_text

__all__ = ["EpisodeIndexer", "Progress"]

log = logging.getLogger("worldgraph")

Progress = Callable[[int, int], None]


class EpisodeIndexer:
    """Keeps the index in step with the store. ``on_failure`` is called after an index write
    failed (the service kicks its background re-indexer)."""

    def __init__(self, store: EpisodeStore, index: EpisodeIndex, embedder: Embedder, config: WorldGraphConfig,
                 on_failure: Callable[[], None]) -> None:
        self.store = store
        self.index = index
        self.embedder = embedder
        self.config = config
        self.on_failure = on_failure

    def text(self, episode: dict[str, Any]) -> str:
        return searchable_text(episode, self.config.max_search_text_bytes)

    def mark(self, tenant_id: str, ids: list[str], status: str, error: str | None = None) -> bool:
        """Record the indexing state of stored episodes; never raises. If the write fails (a full
        disk) they stay "pending", which retry_indexing re-runs like "failed"; True if recorded."""
        try:
            self.store.set_index_status(tenant_id, ids, status, error)
        except Exception as exc:  # noqa: BLE001 - the episodes are stored; only their state is stale
            log.warning("could not mark %d stored episodes %r (%s); they stay pending and are re-indexed "
                        "by retry_indexing", len(ids), status, exc)
            return False
        return True

    def embed(self, texts: list[str], progress: Progress | None = None, batch: int = 256) -> Any:
        out = []
        for start in range(0, len(texts), batch):
            chunk = texts[start:start + batch]
            out.append(check_embeddings(self.embedder.embed(chunk), len(chunk), int(self.embedder.dimensions)))
            if progress:
                progress(min(start + batch, len(texts)), len(texts))
        return np.concatenate(out) if out else np.zeros((0, int(self.embedder.dimensions)), dtype=np.float32)

    def index_rows(self, tenant_id: str, episodes: list[dict[str, Any]], vectors: Any,
                   write: Callable[[Sequence[dict[str, Any]]], None] | None = None, entry: Any = None) -> bool:
        """Write the episodes' index rows (``write``, default ``index.upsert``), then mark them
        "indexed" (in that order: an episode marked indexed always has its row, or its batch is
        in the store's append journal); True if both happened. Never raises. ``entry``: the
        journal entry of episodes the store holds "indexed" already (``GraphStore.add_appending``):
        instead of a mark, the store is told the rows are written (``appended``)."""
        ids = [e["id"] for e in episodes]
        max_text = self.config.max_search_text_bytes
        try:
            (write or self.index.upsert)(EpisodeRows(episodes, vectors, max_text))
        except Exception as exc:  # noqa: BLE001 - the store holds them; retry_indexing re-runs them
            log.warning("indexing %d episodes failed (%s); marked for retry", len(ids), exc)
            if self.mark(tenant_id, ids, "failed", f"indexing failed: {exc}") and entry is not None:
                self.store.appended(entry)  # else the entry stays: retry_indexing reopens it
            self.on_failure()
            return False
        if entry is not None:
            self.store.appended(entry)
            return True
        return self.mark(tenant_id, ids, "indexed")

    def reopen_appends(self) -> int:
        """The batches left in the store's append journal (a writer killed between its commit and
        its index append, or one appending now): those of their episodes without an index row
        are marked "pending", for ``retry`` to index, and the entries dropped. Returns how many."""
        reopened = 0
        for entry, tenant, ids in self.store.append_entries():
            try:
                held = {r["episode_id"] for r in self.index.get(tenant, ids)} if ids else set()
            except Exception as exc:  # noqa: BLE001 - the index cannot say: index them all again
                log.warning("episode index unreadable (%s); re-indexing a batch of %d", exc, len(ids))
                held = set()
            missing = [i for i in ids if i not in held]
            self.store.close_append(entry, tenant, missing)
            reopened += len(missing)
        return reopened

    def index_ids(self, tenant_id: str, episode_ids: list[str]) -> bool:
        """Write the index rows of these stored episodes again (a forget derived their text anew);
        True if every one was written and marked "indexed". Never raises: one that fails stays
        pending or failed, and retry_indexing writes it later."""
        episodes = list(self.store.get_episodes(tenant_id, episode_ids).values())
        if not episodes:
            return True
        try:
            vectors = self.embed([self.text(e) for e in episodes])
        except Exception as exc:  # noqa: BLE001 - an embedder outage: left for retry_indexing
            log.warning("re-indexing %d episodes failed: %s", len(episodes), exc)
            self.mark(tenant_id, [e["id"] for e in episodes], "failed", f"embedding failed: {exc}")
            self.on_failure()
            return False
        return self.index_rows(tenant_id, episodes, vectors)

    def retry(self, progress: Progress | None = None) -> int:
        """Index every episode whose indexing is pending or failed (those of the append journal's
        batches without rows first made pending: ``reopen_appends``); returns how many were indexed."""
        self.reopen_appends()
        done = 0
        while True:
            pending = self.store.unindexed_episodes(limit=1000)
            if not pending:
                return done
            by_tenant: dict[str, list[dict[str, Any]]] = {}
            for e in pending:
                by_tenant.setdefault(e["tenant_id"], []).append(e)
            for tenant, eps in by_tenant.items():
                try:
                    vectors = self.embed([self.text(e) for e in eps])
                except Exception as exc:  # noqa: BLE001
                    log.warning("re-indexing %d episodes failed: %s", len(eps), exc)
                    self.mark(tenant, [e["id"] for e in eps], "failed", f"embedding failed: {exc}")
                    return done
                if not self.index_rows(tenant, eps, vectors):
                    return done  # the index or the store is failing: stop, the episodes stay marked for later
                done += len(eps)
                if progress:
                    progress(done, done + len(pending) - len(eps))

    def reindex(self, tenant_id: str | None = None, progress: Progress | None = None, batch_size: int = 1000,
                expected: int = 0) -> int:
        """Rewrite the LanceDB rows of every episode (all tenants, or one) from the graph store.

        Safe to kill at any moment (``kill -9`` included): every episode is first marked "pending"
        (before any row changes), then its row is overwritten in place, never deleted first, and
        it is marked "indexed"; rows of episodes the store does not hold are dropped last. So at
        every moment each stored episode has a row (old or new) and is recallable, and each one
        not rewritten yet is pending, which the next open (or ``retry_indexing``, ``worldgraph
        reindex --pending``) finishes. ``progress(done, total)`` follows each embedded chunk, ``total``
        being ``expected`` (how many episodes the caller counted) or more once passed."""
        self.store.mark_pending(tenant_id)
        total = 0
        stored: dict[str, set[str]] = {}
        for batch in self.store.iter_episodes(tenant_id, batch_size=batch_size):
            by_tenant: dict[str, list[dict[str, Any]]] = {}
            for e in batch:
                by_tenant.setdefault(e["tenant_id"], []).append(e)
            for tenant, eps in by_tenant.items():
                stored.setdefault(tenant, set()).update(e["id"] for e in eps)
                chunk = None if progress is None else (
                    lambda done, _n, base=total: progress(base + done, max(expected, base + done)))
                self.index_rows(tenant, eps, self.embed([self.text(e) for e in eps], chunk))
                total += len(eps)
        if progress:
            progress(total, total)
        self.index.prune(stored, tenant_id)
        self.index.ensure_indexes(tenant_id=tenant_id)
        return total
