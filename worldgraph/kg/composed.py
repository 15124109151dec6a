"""A GraphStore made of parts: ``ComposedStore`` answers every ``GraphStore`` method by handing it
to the part that owns it.

Each backend's store owns these five parts (the Neo4j store a fifth, ``snapshot_import``, which
its world part is handed), built on one shared connection object (the embedded store's
``SqliteConnection``, the Neo4j store's ``Neo4jConnection``), the way graphiti's driver owns its
operation objects:

    store.episodes   EpisodeStore   episodes, sessions, feedback, canvases, neighbourhoods
    store.world      WorldStore     world graph, merges, scenes, whole environments (its lease
                                    methods are not used: store.leases has them)
    store.leases     SceneLeases    claim / renew / release a scene's lease
    store.lifecycle  Lifecycle      list, forget, purge
    store.idempotency  Idempotency  the first answers of writes sent with an idempotency key

The store itself keeps what spans the parts (tenants, stats, Cypher, API keys, close). Parts never
call each other's private methods: what one needs of another is a public function or method of
that part, or the other part is handed to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol

from worldgraph.kg.lifecycle import DerivedRecords, EpisodeFilter, Forgotten
from worldgraph.kg.records import GraphView, MergePlan, MetaRecord, SceneRecord
from worldgraph.kg.store import EpisodeStore, GraphStore, Record, WorldStore

__all__ = ["ComposedStore", "Idempotency", "Lifecycle", "SceneLeases"]


class SceneLeases(Protocol):
    """The lease methods of ``WorldStore`` (see there and ``worldgraph.kg.lease``)."""

    def claim_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str,
                          now: str) -> SceneRecord | None: ...

    def renew_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str, now: str) -> bool: ...

    def release_scene_lease(self, tenant_id: str, scene_id: str, owner: str, status: str, error: str | None,
                            now: str) -> bool: ...


class Lifecycle(Protocol):
    """The browse / forget / purge methods of ``GraphStore`` (see there)."""

    def list_episodes(self, tenant_id: str, flt: EpisodeFilter, limit: int,
                      after: tuple[float, str] | None) -> list[Record]: ...

    def list_agents(self, tenant_id: str) -> list[Record]: ...

    def environment_metas(self, tenant_id: str) -> dict[str, Record | None]: ...

    def forget_episodes(self, tenant_id: str, kind: str, target: str, audit: Record) -> Forgotten | None: ...

    def forget_environment(self, tenant_id: str, env_name: str, audit: Record) -> Record | None: ...

    def forget_tenant(self, tenant_id: str, audit: Record) -> Record: ...

    def forget_log(self, tenant_id: str | None = None, unpurged: bool = False) -> list[Record]: ...

    def mark_purged(self, audit_ids: list[str], at: str) -> None: ...

    def purge_files(self) -> Record: ...

    def purge_total(self) -> int: ...

    def derived_text_upgraded(self) -> bool: ...

    def mark_derived_text_upgraded(self) -> None: ...

    def canvas_ids(self, tenant_id: str) -> list[str]: ...

    def write_derived(self, tenant_id: str, derived_records: DerivedRecords, audit: Record) -> None: ...

    def purge_generations(self) -> dict[str, int]: ...

    def bump_purge_generations(self, tenants: list[str]) -> None: ...


class Idempotency(Protocol):
    """The idempotency-key methods of ``GraphStore`` (see there), without their ``_idempotent``."""

    def begin(self, tenant_id: str, key: str, request_hash: str, now: str, expires_at: str,
              stale_before: str) -> Record | None: ...

    def finish(self, tenant_id: str, key: str, answer: str, refs: list[str]) -> None: ...

    def abandon(self, tenant_id: str, key: str) -> None: ...


class ComposedStore(GraphStore):
    """Every GraphStore method that a part owns, handed to that part (a backend sets the five
    parts in its ``__init__`` and implements the rest: tenants, stats, cypher, API keys, close)."""

    episodes: EpisodeStore
    world: WorldStore
    leases: SceneLeases
    lifecycle: Lifecycle
    idempotency: Idempotency

    # ---------------------------------------------------------------- idempotency keys
    def begin_idempotent(self, tenant_id: str, key: str, request_hash: str, now: str, expires_at: str,
                         stale_before: str) -> Record | None:
        return self.idempotency.begin(tenant_id, key, request_hash, now, expires_at, stale_before)

    def finish_idempotent(self, tenant_id: str, key: str, answer: str, refs: list[str]) -> None:
        self.idempotency.finish(tenant_id, key, answer, refs)

    def abandon_idempotent(self, tenant_id: str, key: str) -> None:
        self.idempotency.abandon(tenant_id, key)

    # ---------------------------------------------------------------- episodes
    def add_episodes(self, tenant_id: str, episodes: list[Record], canvases: list[Record], audits: list[Record]) -> None:
        self.episodes.add_episodes(tenant_id, episodes, canvases, audits)

    def add_appending(self, tenant_id: str, episodes: list[Record], canvases: list[Record],
                      audits: list[Record]) -> Any:
        return self.episodes.add_appending(tenant_id, episodes, canvases, audits)

    def appended(self, entry: Any) -> None:
        self.episodes.appended(entry)

    def append_entries(self) -> list[tuple[Any, str, list[str]]]:
        return self.episodes.append_entries()

    def close_append(self, entry: Any, tenant_id: str, pending_ids: list[str]) -> None:
        self.episodes.close_append(entry, tenant_id, pending_ids)

    def get_episodes(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        return self.episodes.get_episodes(tenant_id, episode_ids)

    def session_neighbors(self, tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        return self.episodes.session_neighbors(tenant_id, episode_ids)

    def session_episode_before(self, tenant_id: str, session_id: str, ts: float) -> Record | None:
        return self.episodes.session_episode_before(tenant_id, session_id, ts)

    def agent_episodes(self, tenant_id: str, agent_id: str, limit: int) -> list[Record]:
        return self.episodes.agent_episodes(tenant_id, agent_id, limit)

    def agent_ids(self, tenant_id: str, limit: int = 20) -> list[str]:
        return self.episodes.agent_ids(tenant_id, limit)

    def episode_ids_with_prefix(self, tenant_id: str, prefix: str, limit: int = 10) -> list[str]:
        return self.episodes.episode_ids_with_prefix(tenant_id, prefix, limit)

    def iter_episodes(self, tenant_id: str | None = None, batch_size: int = 1000) -> Iterator[list[Record]]:
        return self.episodes.iter_episodes(tenant_id, batch_size)

    def set_index_status(self, tenant_id: str, episode_ids: list[str], status: str, error: str | None = None) -> None:
        self.episodes.set_index_status(tenant_id, episode_ids, status, error)

    def mark_pending(self, tenant_id: str | None = None) -> int:
        return self.episodes.mark_pending(tenant_id)

    def unindexed_episodes(self, limit: int = 1000) -> list[Record]:
        return self.episodes.unindexed_episodes(limit)

    def add_feedback(self, tenant_id: str, feedback: Record) -> None:
        self.episodes.add_feedback(tenant_id, feedback)

    def feedback_for(self, tenant_id: str, episode_id: str) -> list[Record]:
        return self.episodes.feedback_for(tenant_id, episode_id)

    def feedback_stats(self, tenant_id: str, episode_ids: list[str],
                       category: str | None = None) -> dict[str, tuple[float, int]]:
        return self.episodes.feedback_stats(tenant_id, episode_ids, category)

    def feedback_means(self, tenant_id: str, category: str | None = None) -> dict[str, float]:
        return self.episodes.feedback_means(tenant_id, category)

    def session_episode_ids(self, tenant_id: str, session_id: str) -> list[str]:
        return self.episodes.session_episode_ids(tenant_id, session_id)

    def episodes_with_feedback(self, tenant_id: str, episode_ids: list[str], category: str | None = None
                               ) -> tuple[dict[str, Record], dict[str, tuple[float, int]]]:
        return self.episodes.episodes_with_feedback(tenant_id, episode_ids, category)

    def get_canvas(self, tenant_id: str, canvas_id: str) -> Record | None:
        return self.episodes.get_canvas(tenant_id, canvas_id)

    def canvas_audits(self, tenant_id: str, episode_id: str) -> list[Record]:
        return self.episodes.canvas_audits(tenant_id, episode_id)

    def neighborhood(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        return self.episodes.neighborhood(tenant_id, episode_ids)

    # ---------------------------------------------------------------- world
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        return self.world.load_view(tenant_id, env_name, node_ids, names)

    def world_records(self, tenant_id: str, env_name: str, ids: list[str]) -> GraphView:
        return self.world.world_records(tenant_id, env_name, ids)

    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        return self.world.merge(tenant_id, env_name, node_ids, names, planner, fence)

    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        return self.world.get_scene_report(tenant_id, scene_id)

    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        return self.world.apply_plan(plan)

    def upsert_scene(self, scene: SceneRecord) -> None:
        self.world.upsert_scene(scene)

    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None:
        return self.world.get_scene(tenant_id, scene_id)

    def claim_scene(self, tenant_id: str, scene_id: str) -> bool:
        return self.world.claim_scene(tenant_id, scene_id)

    def list_scenes(self, tenant_id: str | None = None, env_name: str | None = None,
                    statuses: list[str] | None = None) -> list[SceneRecord]:
        return self.world.list_scenes(tenant_id, env_name, statuses)

    def environments(self, tenant_id: str) -> list[str]:
        return self.world.environments(tenant_id)

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        return self.world.world_graph(tenant_id, env_name)

    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        self.world.replace_world(tenant_id, env_name, graph)

    # ---------------------------------------------------------------- leases
    def claim_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str,
                          now: str) -> SceneRecord | None:
        return self.leases.claim_scene_lease(tenant_id, scene_id, owner, until, now)

    def renew_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str, now: str) -> bool:
        return self.leases.renew_scene_lease(tenant_id, scene_id, owner, until, now)

    def release_scene_lease(self, tenant_id: str, scene_id: str, owner: str, status: str, error: str | None,
                            now: str) -> bool:
        return self.leases.release_scene_lease(tenant_id, scene_id, owner, status, error, now)

    # ---------------------------------------------------------------- lifecycle
    def list_episodes(self, tenant_id: str, flt: EpisodeFilter, limit: int,
                      after: tuple[float, str] | None) -> list[Record]:
        return self.lifecycle.list_episodes(tenant_id, flt, limit, after)

    def list_agents(self, tenant_id: str) -> list[Record]:
        return self.lifecycle.list_agents(tenant_id)

    def environment_metas(self, tenant_id: str) -> dict[str, Record | None]:
        return self.lifecycle.environment_metas(tenant_id)

    def forget_episodes(self, tenant_id: str, kind: str, target: str, audit: Record) -> Forgotten | None:
        return self.lifecycle.forget_episodes(tenant_id, kind, target, audit)

    def forget_environment(self, tenant_id: str, env_name: str, audit: Record) -> Record | None:
        return self.lifecycle.forget_environment(tenant_id, env_name, audit)

    def forget_tenant(self, tenant_id: str, audit: Record) -> Record:
        return self.lifecycle.forget_tenant(tenant_id, audit)

    def forget_log(self, tenant_id: str | None = None, unpurged: bool = False) -> list[Record]:
        return self.lifecycle.forget_log(tenant_id, unpurged)

    def mark_purged(self, audit_ids: list[str], at: str) -> None:
        self.lifecycle.mark_purged(audit_ids, at)

    def purge_files(self) -> Record:
        return self.lifecycle.purge_files()

    def purge_total(self) -> int:
        return self.lifecycle.purge_total()

    def derived_text_upgraded(self) -> bool:
        return self.lifecycle.derived_text_upgraded()

    def mark_derived_text_upgraded(self) -> None:
        self.lifecycle.mark_derived_text_upgraded()

    def canvas_ids(self, tenant_id: str) -> list[str]:
        return self.lifecycle.canvas_ids(tenant_id)

    def write_derived(self, tenant_id: str, derived_records: DerivedRecords, audit: Record) -> None:
        self.lifecycle.write_derived(tenant_id, derived_records, audit)

    def purge_generations(self) -> dict[str, int]:
        return self.lifecycle.purge_generations()

    def bump_purge_generations(self, tenants: list[str]) -> None:
        self.lifecycle.bump_purge_generations(tenants)
