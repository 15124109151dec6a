"""WorldModel: the one object agents and the CLI talk to.

It owns the graph store (system of record: embedded SQLite or Neo4j), the LanceDB sidecar
(derived: rebuilt from the store with ``reindex``), the embedder and the world-graph updater.
The class is the typed facade: each method checks what the facade owns (the tenant, that the
model is writable) and hands the rest to a module of ``worldgraph/facade/`` (opening, recording,
reading, lifecycle, environments), the world updater, ``memory/``, ``export/`` or the store.
The world-graph methods (rounds, deltas, ``world_graph``, ``search_world``, ``context``,
``cypher``) are declared in ``facade/world_api.py``, which ``WorldModel`` inherits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from worldgraph.clock import seconds_left
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import ReadOnlyError
from worldgraph.facade import environments, idempotency, ids, reading
from worldgraph.facade.generations import PurgeWatch, releaser
from worldgraph.facade.lifecycle import Lifecycle
from worldgraph.facade.opening import close_store, open_parts
from worldgraph.facade.recording import Recorder
from worldgraph.facade.upgrade import derive_legacy_copies
from worldgraph.facade.world_api import WorldGraphAPI
from worldgraph.facade.world_search import WorldSearch
from worldgraph.kg.store import GraphStore
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.episode import Episode
from worldgraph.memory.feedback import FeedbackResult, submit_feedback
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.indexer import Progress
from worldgraph.memory.lifecycle import ForgetReport, Page
from worldgraph.memory.models import AgentExperience, CanvasContext, RecallOptions
from worldgraph.memory.recall.pipeline import RecallResult, recall
from worldgraph.names import check_tenant
from worldgraph.world.updater import WorldUpdater


class WorldModel(WorldGraphAPI):
    """Episodic memory and world graph for LLM agents. Use ``WorldModel.open(path)``."""

    def __init__(self, path: Path, store: GraphStore, index: EpisodeIndex, embedder: Embedder,
                 config: WorldGraphConfig, read_only_reason: str | None = None) -> None:
        self.path = path
        self.read_only = read_only_reason is not None
        self.read_only_reason = read_only_reason
        self.store = store
        self.index = index
        self.embedder = embedder
        self.config = config
        # the world updater gets the store, the settings and how to record a round, not the facade
        self.world = WorldUpdater(store, config, self.record_experience,
                                  alive=lambda t, ids: set(store.get_episodes(t, ids)))
        # the recording path (facade/recording.py): the indexer, the background re-indexing, the group commit
        self.recorder = Recorder(store, index, embedder, config, lambda: self.retry_indexing())
        self.indexer = self.recorder.indexer
        # search_world and context (facade/world_search.py): the world index, written after each merge
        self.world_search = WorldSearch(store, index, embedder, config, self.world)
        # every process lets go of what a purge removed, within a second (facade/generations.py)
        self.purges = PurgeWatch(store, releaser(store, index, self.world.history, self.world_search.release))
        self.purges.start()
        # forgetting and purging (facade/lifecycle.py), with the background purge
        self.lifecycle = Lifecycle(store, index, config, self.world.history, self.indexer.index_ids,
                                   self.purges.check, self.world_search)
        self.idempotent = idempotency.Idempotency(store, config)

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(cls, path: str | Path = "./data", *, embedder: Embedder | None = None, graph: str | GraphStore = "embedded",
             config: WorldGraphConfig | None = None, rebuild_index: bool = False, read_only: bool = False,
             progress: Progress | None = None, **overrides: Any) -> WorldModel:
        """Open (or create) a world model under ``path``.

        ``graph="embedded"`` needs no server; ``graph="neo4j"`` connects to NEO4J_URI.
        ``embedder`` is any object with ``.dimensions`` and ``.embed(list[str]) -> ndarray (n, d)``.
        Keyword overrides set config fields (e.g. ``min_similarity_threshold=0.3``).
        ``read_only=True`` writes nothing (no folder, schema, index upkeep or re-indexing): recall,
        episodes, readiness, world_graph and export work; every write raises ReadOnlyError. A folder
        that is not writable, or whose disk is full, is opened read-only by itself (logged).
        ``progress(done, total)`` is called as the indexing done while opening (the rebuild, or
        the re-indexing of pending episodes) goes on.
        """
        parts = open_parts(path, embedder, graph, config, rebuild_index, read_only, overrides)
        wm = cls(parts.path, parts.store, parts.index, parts.embedder, parts.config, parts.read_only_reason)
        if parts.read_only_reason is not None:
            return wm
        # copies of forgotten records an older store kept are derived again, once (facade/upgrade.py)
        derive_legacy_copies(wm.store)
        if rebuild_index:
            wm.reindex(progress=progress)
        else:
            wm.retry_indexing(progress)
        wm.lifecycle.purge_pending_later()
        return wm

    def _writable(self, operation: str) -> None:
        """Refuse a write of a read-only model before anything is done."""
        if self.read_only_reason is not None:
            raise ReadOnlyError(operation, self.read_only_reason)

    def close(self, timeout: float | None = None) -> None:
        """Waits for background world updates and the episode index's maintenance (its child
        process ends, its mirrors are saved: ``EpisodeIndex.close``), then closes the store;
        afterwards nothing of this model writes into the folder. ``timeout`` (s) bounds the
        whole close (``worldgraph serve`` on SIGTERM): updates still running then have their
        packets handed back as pending, a maintenance run still going has its child killed, and
        a store that does not close in time is left to the process's exit (every write is one
        transaction: nothing is half-written)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.recorder.retrier.stop()
        self.lifecycle.purger.stop()
        self.purges.stop()
        self.world.shutdown(timeout)
        # the index's background maintenance and mirror saves end (its child too), and what
        # LanceDB wrote last is made private before the process goes
        self.index.close(timeout=seconds_left(deadline))
        self.world_search.close(seconds_left(deadline))
        close_store(self.store, deadline)

    def __enter__(self) -> WorldModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ record
    def record_experience(self, tenant_id: str, experience: AgentExperience | dict[str, Any],
                          canvas: CanvasContext | dict[str, Any] | None = None, idempotency_key: str | None = None,
                          replace: bool = False) -> str:
        """Store one agent run and index it for recall.

        Example::

            eid = wm.record_experience("acme", {"agent_id": "fin-1", "agent_role": "Finance",
                                                "task_type": "reconcile", "task_description": "...",
                                                "outcome": "success", "confidence_score": 0.9})

        Args:
            tenant_id: the tenant the episode belongs to (nothing else ever sees it).
            experience: an ``AgentExperience`` or a dict of its fields.
            canvas: the ``CanvasContext`` the run happened on, if any.
            idempotency_key: the same key again (with the same arguments, within a day) returns
                the first call's id and stores nothing new (facade/idempotency.py).
            replace: an upsert: the episode already recorded under ``episode_id`` is forgotten as
                ``forget_episode`` forgets, then this one recorded under it (else: an error).

        Returns:
            The new episode's id.

        Raises:
            InvalidInputError: a field breaks a rule (the error names it and the fix).
            ReadOnlyError: the model was opened read-only.
            StorageError: the disk refused the write; nothing was stored.
        """
        self._writable("record_experience")
        return self.idempotent.run(tenant_id, idempotency_key, "record_experience",
                                   {"experience": experience, "canvas": canvas, **idempotency.flag("replace", replace)},
                                   lambda: self.record_experiences(tenant_id, [experience], canvases=[canvas],
                                                                   replace=replace)[0],
                                   *idempotency.ids_codec())

    def record_experiences(self, tenant_id: str, experiences: Iterable[AgentExperience | dict[str, Any]],
                           canvases: list[CanvasContext | dict[str, Any] | None] | None = None,
                           progress: Progress | None = None, idempotency_key: str | None = None,
                           replace: bool = False) -> list[str]:
        """Record a batch: all are validated first (one bad item rejects the batch, naming its
        index and field), then embedded, then stored in one transaction and indexed (with the
        batches of concurrent calls that wait for the same commit: memory/group_commit.py).
        ``idempotency_key``: a retry with the same key and batch returns the first ids.
        ``replace=True``: upserts, as in ``record_experience`` (once the batch is checked and embedded)."""
        check_tenant(tenant_id)
        self._writable("record_experiences")
        forget = self.lifecycle.forget_replaced if replace else None
        if idempotency_key is None:
            return self.recorder.record(tenant_id, experiences, canvases, progress, replace=forget)
        batch = experiences if isinstance(experiences, (str, bytes, dict)) else list(experiences)
        return self.idempotent.run(tenant_id, idempotency_key, "record_experiences",
                                   {"experiences": batch, "canvases": canvases, **idempotency.flag("replace", replace)},
                                   lambda: self.recorder.record(tenant_id, batch, canvases, progress, replace=forget),
                                   *idempotency.ids_codec())

    def record_conversation(self, tenant_id: str, session_id: str, turns: Iterable[dict[str, Any]],
                            progress: Progress | None = None, idempotency_key: str | None = None) -> list[str]:
        """Record a transcript turn by turn, in order: one episode per turn (speaker -> agent_id,
        text -> task_description, the turn before -> input_summary), linked in time order
        within the session. All turns are checked before anything is recorded. ``idempotency_key``:
        a retry with the same key and turns returns the first ids."""
        check_tenant(tenant_id)
        self._writable("record_conversation")
        listed = turns if isinstance(turns, (str, bytes, dict)) else list(turns)  # a wrong type stays wrong
        return self.idempotent.run(tenant_id, idempotency_key, "record_conversation",
                                   {"session_id": session_id, "turns": listed},
                                   lambda: self.recorder.conversation(tenant_id, session_id, listed, progress),
                                   *idempotency.ids_codec())

    def record_conversations(self, tenant_id: str,
                             sessions: Mapping[str, Iterable[dict[str, Any]]] | Iterable[tuple[str, Iterable[dict[str, Any]]]],
                             progress: Progress | None = None) -> dict[str, list[str]]:
        """Record many sessions of a transcript at once (``{session_id: turns}`` or pairs, in
        order): each session as ``record_conversation`` records it, but all turns embedded and
        stored in batches of up to ``max_batch_experiences`` (the embedder sorts and batches the
        whole transcript at once, not one short session at a time). All sessions are checked before anything
        is recorded; a session named twice is an error. Sessions that together exceed the batch
        limit go in several calls, whole sessions each, each stored as a whole. Returns the
        episode ids per session, in the order given."""
        check_tenant(tenant_id)
        self._writable("record_conversations")
        return self.recorder.conversations(tenant_id, sessions, progress)

    def retry_indexing(self, progress: Progress | None = None) -> int:
        """Index every episode whose indexing is pending or failed; returns how many were indexed."""
        self._writable("retry_indexing")
        return self.indexer.retry(progress)

    def reindex(self, tenant_id: str | None = None, progress: Progress | None = None, batch_size: int = 1000) -> int:
        """Rewrite the LanceDB rows of every episode (all tenants, or one) from the graph store;
        safe to kill at any moment (see ``EpisodeIndexer.reindex``); then the world index's rows
        of every environment. Returns the episodes indexed."""
        self._writable("reindex")
        done = self.recorder.reindex(tenant_id, progress, batch_size)
        self.world_search.rebuild(tenant_id)
        return done

    # ------------------------------------------------------------------ feedback
    def submit_feedback(self, tenant_id: str, episode_id: str, score: float, notes: str | None = None,
                        category: str | None = None, created_by: str | None = None,
                        idempotency_key: str | None = None) -> FeedbackResult:
        """Rate an episode in [-1, 1] (``episode_id``: the id, or a unique start of it of at least 4
        characters; several matches raise AmbiguousIdError listing them). Returns the feedback record plus the episode's new
        aggregates (``average``: normalised to [0, 1], ``count``): a FeedbackResult."""
        self._writable("submit_feedback")
        return self.idempotent.run(
            tenant_id, idempotency_key, "submit_feedback",
            {"episode_id": episode_id, "score": score, "notes": notes, "category": category, "created_by": created_by},
            lambda: ids.by_id_or_prefix(self.store, tenant_id, episode_id, lambda full: submit_feedback(
                self.store, self.config, tenant_id, full, score, notes, category, created_by)),
            *idempotency.feedback_codec())

    # ------------------------------------------------------------------ recall
    def recall_experiences(self, tenant_id: str, agent_role: str | None, query: str, limit: int = 5,
                           options: RecallOptions | dict[str, Any] | None = None) -> list[RecallResult]:
        """Past experiences relevant to ``query``, filtered and ranked in the five steps of
        docs/architecture.md "Recall" (relevance, recency, feedback, confidence, diversity).

        Example::

            for r in wm.recall_experiences("acme", "Finance", "reconcile inventory", limit=5,
                                           options={"success_only": True}):
                print(r.episode_id, r.relevance_score, r.score_breakdown)

        Args:
            tenant_id: whose memories to search.
            agent_role: only episodes of this role (None: every role).
            query: what to recall, in words; dates and ids in it become soft filters.
            limit: how many results, best first.
            options: a ``RecallOptions`` or a dict of its fields (filters, weights, thresholds).

        Returns:
            ``RecallResult`` items (an ``Episode`` with its scores), best first.

        Raises:
            InvalidInputError: a bad query, limit or option (named).
            StoreUnavailableError: the index's object store did not answer in time.
        """
        check_tenant(tenant_id)
        reading.check_recall(self.config, query, agent_role, options)
        self.purges.check()  # a purge by another process: its handles go first (facade/generations.py)
        return recall(self.store, self.index, self.embedder, self.config, tenant_id, agent_role, query, limit, options)

    def get_agent_episodes(self, tenant_id: str, agent_id: str, limit: int = 30) -> list[Episode]:
        """The agent's newest ``limit`` episodes, newest first."""
        check_tenant(tenant_id)
        return reading.agent_episodes(self.store, self.config, tenant_id, agent_id, limit)

    def get_episode(self, tenant_id: str, episode_id: str) -> Episode:
        """One stored episode by id (or a unique start of it, at least 4 characters), as recorded (no
        scores: nothing was recalled);
        NotFoundError when the tenant holds no such episode (another tenant's id included)."""
        check_tenant(tenant_id)
        return ids.by_id_or_prefix(self.store, tenant_id, episode_id,
                                   lambda full: reading.episode(self.store, self.config, tenant_id, full))

    def readiness(self, tenant_id: str, agent_id: str, window: int = 30) -> dict[str, Any]:
        """Graduation exam over the agent's last ``window`` episodes."""
        reading.check_window(window)
        episodes = self.get_agent_episodes(tenant_id, agent_id, window)  # NotFoundError for an unknown agent
        return reading.readiness(self.config, tenant_id, agent_id, window, episodes)

    def stats(self, tenant_id: str) -> dict[str, Any]:
        """The tenant's counts (episodes, feedback, scenes by status...), how many episodes the
        index holds, its environments, and which graph store and embedder this model runs on."""
        check_tenant(tenant_id)
        return reading.stats(self.store, self.index, self.embedder, tenant_id)

    # ------------------------------------------------------------------ browse and forget
    def list_episodes(self, tenant_id: str, agent_id: str | None = None, session_id: str | None = None,
                      since: Any = None, until: Any = None, limit: int = 100, cursor: str | None = None,
                      metadata: dict[str, Any] | None = None) -> Page:
        """A page of the tenant's episodes, newest first, filtered (``since`` inclusive, ``until``
        exclusive, ISO-8601; ``metadata`` as ``RecallOptions.metadata``, which reads the episodes it
        skips: narrow it by agent or session); ``cursor``: the previous page's ``next_cursor``."""
        check_tenant(tenant_id)
        return reading.episode_page(self.store, self.config, tenant_id, agent_id, session_id, since, until, limit, cursor,
                                    metadata)

    def list_agents(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's agents that have episodes: [{agent_id, agent_role, episodes, last_seen}]."""
        check_tenant(tenant_id)
        return self.store.list_agents(tenant_id)

    def list_environments(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's environments: [{env_name, graph_version, nodes, edges, rules, updated_at}]."""
        check_tenant(tenant_id)
        return environments.environments(self.store, tenant_id)

    def forget_episode(self, tenant_id: str, episode_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget one episode (its id, or a unique start of it of at least 8 characters): from this
        call on it is on no read path (recall, get, list, agent episodes, readiness, neighbourhoods,
        Cypher, export). Its feedback, canvas actions, session place, index rows and, for a round,
        its scene packet go with it; world facts learned from that scene stay, without the scene or
        the evidence only it gave. What other records showed of it (a turn quoting it, a canvas it
        carried) is derived again in the same store transaction (docs/forget.md); an audit row keeps
        who forgot which id and when. The bytes leave the files with ``purge()`` (in the background
        within ``purge_after_seconds``)."""
        check_tenant(tenant_id)
        self._writable("forget_episode")
        return ids.by_id_or_prefix(self.store, tenant_id, episode_id,
                                   lambda full: self.lifecycle.forget_episode(tenant_id, full, forgotten_by),
                                   ids.MIN_DELETE_PREFIX)

    def forget_agent(self, tenant_id: str, agent_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget every episode of one agent (often the person asking to be erased) as
        ``forget_episode`` does each, in one store transaction; NotFoundError if it has none."""
        check_tenant(tenant_id)
        self._writable("forget_agent")
        return self.lifecycle.forget_agent(tenant_id, agent_id, forgotten_by)

    def forget_session(self, tenant_id: str, session_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget every episode of one session (a chat, a thread, a run) as ``forget_episode`` does
        each, in one store transaction; NotFoundError if it has none."""
        check_tenant(tenant_id)
        self._writable("forget_session")
        return self.lifecycle.forget_session(tenant_id, session_id, forgotten_by)

    def forget_environment(self, tenant_id: str, env_name: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget one environment's world graph: its nodes, edges, rules, scenes (the packets) and
        meta, in one transaction. The episodes of its rounds stay (``forget_episode`` each)."""
        check_tenant(tenant_id)
        self._writable("forget_environment")
        return self.lifecycle.forget_environment(tenant_id, env_name, forgotten_by)

    def forget_tenant(self, tenant_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget every record of the tenant, its API keys included, in one store transaction; its
        index table is dropped (now, and again by ``purge()`` if this fails half way)."""
        check_tenant(tenant_id)
        self._writable("forget_tenant")
        return self.lifecycle.forget_tenant(tenant_id, forgotten_by)

    def purge(self, progress: Progress | None = None) -> dict[str, Any]:
        """Physical removal of what was forgotten: afterwards the forgotten text is in no file of the
        embedded store or of the index (local or S3): the index tables touched are compacted, their
        full-text and scalar indexes rebuilt and their old versions deleted; a forgotten tenant's
        table is dropped; the SQLite WAL is checkpointed and truncated (deleted rows are zeroed in
        place, ``secure_delete``). Neo4j keeps deleted records in its store files until the space
        is reused (docs/forget.md). Returns what it did; ``progress(done, total)`` counts
        the index tables purged."""
        self._writable("purge")
        return self.lifecycle.purge(progress)
