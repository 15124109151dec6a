"""The world-search path of ``WorldModel``: ``search_world`` and ``context``, and the world index's
upkeep (written after each merge in the background, synced by a search that finds it behind,
rebuilt by ``reindex``, emptied by forgets and purged).

``WorldSearch`` owns the world index (``memory/index/world_index.py``, beside the episode index)
and its indexer (``world/search/indexing.py``); the facade hands it the calls once the tenant and
writability are checked.
"""

from __future__ import annotations

import logging
from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.kg.records import MergePlan
from worldgraph.kg.store import GraphStore
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.world_index import WorldIndex
from worldgraph.memory.recall.pipeline import recall
from worldgraph.world.search import context as ctx
from worldgraph.world.search.indexing import WorldIndexer
from worldgraph.world.search.models import WorldContext, WorldHit
from worldgraph.world.search.ranking import check_search, search_world
from worldgraph.world.updater import WorldUpdater

log = logging.getLogger("worldgraph")


class WorldSearch:
    """Search over world records and the world index they are searched in."""

    def __init__(self, store: GraphStore, episodes: EpisodeIndex, embedder: Embedder, config: WorldGraphConfig,
                 updater: WorldUpdater | None = None) -> None:
        """``updater``: the world updater whose merges are indexed (when the index is writable)."""
        self.store = store
        self.config = config
        self.embedder = embedder
        self.index = WorldIndex(episodes.path, episodes.dimensions, config, read_only=episodes.read_only)
        self.indexer = WorldIndexer(store, self.index, embedder)
        if updater is not None and not episodes.read_only:
            updater.on_merged = self.merged

    # ------------------------------------------------------------------ hooks
    def merged(self, plan: MergePlan, version: int | None) -> None:
        """A merge committed (the world updater's hook): index its records in the background."""
        try:
            self.indexer.merged(plan, version)
        except Exception as exc:  # noqa: BLE001 - the merge is committed; a search syncs what is missing
            log.warning("could not queue the world index update of %s/%s: %s", plan.tenant_id, plan.env_name, exc)

    def replaced(self, tenant_id: str, env_name: str) -> None:
        self.indexer.replaced(tenant_id, env_name)

    def resync(self, tenant_id: str, env_names: list[str] | None) -> int:
        """Sync these environments (None: every one the tenant's world rows have) in full now: a
        forgotten scene's words leave their rows; returns how many."""
        self.indexer.forget_scenes(tenant_id)
        snap = self.index.snapshot(tenant_id)
        if snap is None:
            return 0
        held = set(self.store.environments(tenant_id))
        names = sorted(set(snap.markers) | set(snap.envs)) if env_names is None else env_names
        with self.indexer.lock():
            for env in names:
                if env in held:
                    self.indexer.sync(tenant_id, env)
                else:
                    self.index.delete_env(tenant_id, env)
        return len(names)

    def forget_environment(self, tenant_id: str, env_name: str) -> None:
        """Delete the environment's rows (now; ``purge`` removes them from the files)."""
        self.indexer.forgotten(tenant_id, env_name)
        with self.indexer.lock():
            self.index.delete_env(tenant_id, env_name)

    def forget_tenant(self, tenant_id: str) -> None:
        self.indexer.forgotten(tenant_id)
        with self.indexer.lock():
            self.index.drop_tenant(tenant_id)

    def purge(self, tenants: list[str], drop: list[str]) -> dict[str, Any]:
        """Rows of records the store no longer holds deleted (a sync of each environment of
        ``tenants``), then the files rewritten; ``drop``: tenants whose table goes whole."""
        dropped = 0
        with self.indexer.lock():
            for tenant in drop:
                self.indexer.forgotten(tenant)
                dropped += int(self.index.drop_tenant(tenant))
            for tenant in tenants:
                self.resync(tenant, None)
            rewritten = self.index.purge(tenants)
        return {"world_index_tables_dropped": dropped, "world_index_tables_rewritten": rewritten}

    def release(self, tenant_id: str) -> None:
        """Let go of what this process holds of a purged tenant's world rows: the table's handle
        and copy, the indexer's caches (names, rows, scene actions)."""
        self.indexer.forgotten(tenant_id)
        self.indexer.forget_scenes(tenant_id)
        self.index.release(tenant_id)

    def rebuild(self, tenant_id: str | None) -> int:
        """Every world row written again from the store (all tenants, or one)."""
        tenants = [tenant_id] if tenant_id is not None else self.store.tenants()
        return sum(self.indexer.rebuild(t) for t in tenants)

    def wait(self, timeout: float | None) -> bool:
        return self.indexer.wait(timeout)

    def close(self, timeout: float | None) -> None:
        self.indexer.stop(timeout)

    # ------------------------------------------------------------------ reads
    def search(self, tenant_id: str, query: str, env_name: str | None, k: int, as_of: Any) -> list[WorldHit]:
        return [h for h, _ in self.rows(tenant_id, query, env_name, k, as_of)]

    def rows(self, tenant_id: str, query: str, env_name: str | None, k: int, as_of: Any,
             neighbours: bool = True) -> list[tuple[WorldHit, bool]]:
        """The hits, each with whether it says what came after an action (history)."""
        return search_world(self.store, self.index, self.embedder, self.config, self.indexer.ensure,
                            tenant_id, query, env_name, k, as_of, neighbours)

    def context(self, tenant_id: str, query: str, agent_role: str | None, env_name: str | None, max_tokens: Any,
                episodes: EpisodeIndex) -> WorldContext:
        """The block for ``query``: the world's rows, then the episodes ``episodes`` recalls."""
        check_search(self.config, query, env_name, 10, None)
        ctx.check_budget(max_tokens)
        once = ctx.OnceEmbedder(self.embedder)  # the query is embedded once for both searches
        return ctx.context(lambda k: search_world(self.store, self.index, once, self.config, self.indexer.ensure,
                                                  tenant_id, query, env_name, k, None, neighbours=False),
                           lambda limit: recall(self.store, episodes, once, self.config, tenant_id, agent_role,
                                                query, limit, None),
                           max_tokens, self.config.context_world_share)
