"""WorldModel: the one object agents and the CLI talk to.

It owns the graph store (system of record: embedded SQLite or Neo4j), the LanceDB sidecar
(derived: rebuilt from the store with ``reindex``), the embedder and the world-graph updater.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from worldgraph.access import open_storage
from worldgraph.clock import now_iso, utcnow
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import (
    EmbeddingDimensionError,
    InvalidInputError,
    NotFoundError,
    NotSupportedError,
    ReadOnlyError,
)
from worldgraph.export.environment import export_environment, import_environment
from worldgraph.kg.cypher_limits import check_params, check_query_text
from worldgraph.kg.lifecycle import EpisodeFilter, audit_record
from worldgraph.kg.records import MergeReport, SceneRecord
from worldgraph.kg.store import GraphStore
from worldgraph.limits import MAX_PAGE, check_batch, check_delta_size, check_query, check_text, check_value
from worldgraph.memory.conversation import check_session, parse_turns, quoted, turn_experiences
from worldgraph.memory.embedders.coalesce import CoalescingEmbedder
from worldgraph.memory.embeddings import Embedder, embedder_name, index_name, make_embedder
from worldgraph.memory.episode import Episode
from worldgraph.memory.feedback import FeedbackResult, submit_feedback
from worldgraph.memory.group_commit import GroupCommit
from worldgraph.memory.index.episode_index import EpisodeIndex, stored_embedder_name
from worldgraph.memory.index.indexer import EpisodeIndexer, Progress
from worldgraph.memory.index.objectstore import index_location
from worldgraph.memory.index.retrier import IndexRetrier
from worldgraph.memory.lifecycle import ForgetReport, Page, Purger, decode_cursor, encode_cursor, parse_time
from worldgraph.memory.models import AgentExperience, CanvasContext, RecallOptions
from worldgraph.memory.recall.pipeline import RecallResult, recall
from worldgraph.memory.record import build_episode, parse_canvas, parse_experience
from worldgraph.names import KNOWN_SHOWN, check_env, check_tenant, known_names, require_environment
from worldgraph.world.updater import WorldUpdater

log = logging.getLogger("worldgraph")



class WorldModel:
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
        self.world = WorldUpdater(store, config, self.record_experience)
        # records embed through a coalescing wrapper: concurrent calls share batches (queries do not wait)
        record_embedder = (CoalescingEmbedder(embedder, config.embedding_coalesce_max, config.embedding_coalesce_ms / 1000)
                           if config.embedding_coalesce else embedder)
        self.indexer = EpisodeIndexer(store, index, record_embedder, config,
                                      on_failure=lambda: self._index_retrier.kick())
        # after an index failure (an unreachable object store), re-index in the background
        self._index_retrier = IndexRetrier(self.retry_indexing, lambda: bool(self.store.unindexed_episodes(limit=1)),
                                           config.index_retry_seconds)
        # concurrent records of a tenant are stored and indexed in groups (memory/group_commit.py)
        self._group_commit = (GroupCommit(self._commit_episodes, lambda t, ids: set(self.store.get_episodes(t, ids)),
                                          lambda: self._index_retrier.kick(), config.max_batch_experiences)
                              if config.record_group_commit else None)
        self._purge_lock = threading.Lock()
        self._purger = Purger(self.purge, config.purge_after_seconds)

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
        cfg = config or WorldGraphConfig.from_env(**overrides)
        root = Path(path)
        # A folder keeps the local model that built its index (see memory/embedders/factory.py).
        built_by = None if rebuild_index else stored_embedder_name(index_location(root, cfg.lancedb_path),
                                                                 cfg.object_store_timeout_seconds)
        emb = embedder or make_embedder(cfg, built_by)
        for attr in ("dimensions", "embed"):
            if not hasattr(emb, attr):
                raise InvalidInputError("embedder", f"has no {attr!r}: give an object with .dimensions and .embed(texts)")
        store, reason = open_storage(root, graph, cfg, read_only)
        try:
            if reason is not None and rebuild_index:
                raise ReadOnlyError("rebuild_index", reason)
            if rebuild_index:
                store.mark_pending()  # before the tables are dropped (see reindex)
            index = EpisodeIndex(index_location(root, cfg.lancedb_path), int(emb.dimensions),
                                 index_name(embedder_name(emb), built_by), cfg,
                                 rebuild=rebuild_index, read_only=reason is not None)
        except Exception:
            store.close()
            raise
        wm = cls(root, store, index, emb, cfg, read_only_reason=reason)
        if reason is not None:
            return wm
        if rebuild_index:
            wm.reindex(progress=progress)
        else:
            wm.retry_indexing(progress)
        wm._purge_pending_later()
        return wm

    def _purge_pending_later(self) -> None:
        """Forgets whose bytes an earlier process did not purge are purged in the background."""
        try:
            if self.store.forget_log(unpurged=True):
                self._purger.kick()
        except NotSupportedError:
            pass

    def _writable(self, operation: str) -> None:
        """Refuse a write of a read-only model before anything is done."""
        if self.read_only_reason is not None:
            raise ReadOnlyError(operation, self.read_only_reason)

    def close(self, timeout: float | None = None) -> None:
        """Waits for background world updates, then closes the store. ``timeout`` (s) bounds
        the whole close (``worldgraph serve`` on SIGTERM): updates still running then have their
        packets handed back as pending, and a store that does not close in time is left to the
        process's exit (every write is one transaction: nothing is half-written)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._index_retrier.stop()
        self._purger.stop()
        self.world.shutdown(timeout)
        if deadline is None:
            self.store.close()
            return
        closer = threading.Thread(target=self.store.close, name="worldgraph-store-close", daemon=True)
        closer.start()
        closer.join(max(0.0, deadline - time.monotonic()))
        if closer.is_alive():
            log.warning("the %s store did not close within the shutdown deadline; leaving it to the process "
                        "exit", self.store.name)

    def __enter__(self) -> WorldModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ record
    def record_experience(self, tenant_id: str, experience: AgentExperience | dict[str, Any],
                          canvas: CanvasContext | dict[str, Any] | None = None) -> str:
        """Store one agent run and index it for recall.

        Example::

            eid = wm.record_experience("acme", {"agent_id": "fin-1", "agent_role": "Finance",
                                                "task_type": "reconcile", "task_description": "...",
                                                "outcome": "success", "confidence_score": 0.9})

        Args:
            tenant_id: the tenant the episode belongs to (nothing else ever sees it).
            experience: an ``AgentExperience`` or a dict of its fields.
            canvas: the ``CanvasContext`` the run happened on, if any.

        Returns:
            The new episode's id.

        Raises:
            InvalidInputError: a field breaks a rule (the error names it and the fix).
            ReadOnlyError: the model was opened read-only.
            StorageError: the disk refused the write; nothing was stored.
        """
        self._writable("record_experience")
        return self.record_experiences(tenant_id, [experience], canvases=[canvas])[0]

    def record_experiences(self, tenant_id: str, experiences: Iterable[AgentExperience | dict[str, Any]],
                           canvases: list[CanvasContext | dict[str, Any] | None] | None = None,
                           progress: Progress | None = None) -> list[str]:
        """Record a batch: all are validated first (one bad item rejects the batch, naming its
        index and field), then embedded, then stored in one transaction and indexed (with the
        batches of concurrent calls that wait for the same commit: memory/group_commit.py)."""
        check_tenant(tenant_id)
        self._writable("record_experiences")
        cfg = self.config
        if isinstance(experiences, (str, bytes, dict)) or not hasattr(experiences, "__iter__"):
            raise InvalidInputError("experiences", f"must be a list of experiences, got {type(experiences).__name__}")
        items = list(itertools.islice(experiences, cfg.max_batch_experiences + 1))
        check_batch(len(items), cfg)
        if canvases is not None and not isinstance(canvases, (list, tuple)):
            raise InvalidInputError("canvases", f"must be a list (a canvas or None per experience), got "
                                    f"{type(canvases).__name__}")
        if canvases is not None and len(canvases) != len(items):
            raise InvalidInputError("canvases", f"has {len(canvases)} items for {len(items)} experiences")
        now = utcnow()
        episodes, canvas_recs, audits = [], {}, []
        seen: set[str] = set()
        for i, raw in enumerate(items):
            field = "experience" if len(items) == 1 else f"experiences[{i}]"
            cfield = "canvas" if len(items) == 1 else f"canvases[{i}]"
            # limits first: a value nested a million deep must not reach the model parser
            check_value(raw, field, cfg, cfg.max_experience_bytes, "max_experience_bytes")
            exp = parse_experience(raw, field)
            raw_canvas = canvases[i] if canvases else None
            if raw_canvas is not None:
                check_value(raw_canvas, cfield, cfg, cfg.max_canvas_bytes, "max_canvas_bytes")
            canvas = parse_canvas(raw_canvas, cfield)
            ep, crec, aud = build_episode(tenant_id, exp, canvas, now=now, field=field)
            if ep["id"] in seen:
                raise InvalidInputError(f"{field}.episode_id", f"{ep['id']!r} appears twice in this batch")
            seen.add(ep["id"])
            episodes.append(ep)
            audits.extend(aud)
            if crec is not None:
                canvas_recs[crec["id"]] = crec
        if not episodes:
            return []
        existing = self.store.get_episodes(tenant_id, [e["id"] for e in episodes])
        if existing:
            i = next(i for i, e in enumerate(episodes) if e["id"] in existing)
            field = "experience" if len(episodes) == 1 else f"experiences[{i}]"
            raise InvalidInputError(f"{field}.episode_id", f"{episodes[i]['id']!r} is already recorded; "
                                    "leave episode_id out to get a new id")
        # Embed before storing: a wrong-shaped embedding is a caller error and must leave the store
        # unchanged. An unreachable embedding server is not: the episodes are stored and indexed later.
        vectors = None
        try:
            vectors = self.indexer.embed([self.indexer.text(e) for e in episodes], progress)
        except EmbeddingDimensionError:
            raise
        except Exception as exc:  # noqa: BLE001 - any embedder failure: keep the data, index later
            log.warning("embedding failed (%s); %d episodes stored and marked for re-indexing", exc, len(episodes))
            embed_error = f"embedding failed: {exc}"
        # The one write that decides the call: it commits (the episodes are stored "pending") or
        # raises with nothing stored. Nothing after it raises: indexing and recording how it went
        # are retried by retry_indexing when they fail (a full disk), so a caller never retries a
        # batch that was in fact stored.
        ids = [e["id"] for e in episodes]
        if vectors is None:
            self.store.add_episodes(tenant_id, episodes, list(canvas_recs.values()), audits)
            self.indexer.mark(tenant_id, ids, "failed", embed_error)
            self._index_retrier.kick()
            return ids
        if self._group_commit is not None:  # with the concurrent calls of this tenant, if any
            self._group_commit.commit(tenant_id, episodes, list(canvas_recs.values()), audits, vectors)
        else:
            self._commit_episodes(tenant_id, episodes, list(canvas_recs.values()), audits, vectors)
        return ids

    def _commit_episodes(self, tenant_id: str, episodes: list[dict[str, Any]], canvases: list[dict[str, Any]],
                         audits: list[dict[str, Any]], vectors: Any) -> None:
        """Store embedded episodes in one transaction, then append their index rows; raises only
        if the store commit fails (then nothing is stored)."""
        # New episodes are appended to the index, not merged: the window holds the table's write
        # lock around the store commit (see EpisodeIndex.adding); it neither fails to open nor raises.
        with self.index.adding(tenant_id) as add:
            self.store.add_episodes(tenant_id, episodes, canvases, audits)
            self.indexer.index_rows(tenant_id, episodes, vectors, add)

    def record_conversation(self, tenant_id: str, session_id: str, turns: Iterable[dict[str, Any]],
                            progress: Progress | None = None) -> list[str]:
        """Record a transcript turn by turn, in order: one episode per turn (speaker -> agent_id,
        text -> task_description, the turn before -> input_summary), linked in time order
        within the session. All turns are checked before anything is recorded."""
        check_tenant(tenant_id)
        self._writable("record_conversation")
        sid = check_session(session_id)
        cfg = self.config
        parsed = parse_turns(turns, cfg.max_batch_experiences + 1, lambda i, raw: check_value(
            raw, f"turns[{i}]", cfg, cfg.max_experience_bytes, "max_experience_bytes"))
        check_batch(len(parsed), cfg, "turns")
        if not parsed:
            return []
        return self.record_experiences(tenant_id, self._session_experiences(tenant_id, sid, parsed), progress=progress)

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
        cfg = self.config
        if isinstance(sessions, (str, bytes)) or not hasattr(sessions, "__iter__"):
            raise InvalidInputError("sessions", "must be a dict {session_id: turns} or a list of (session_id, turns)")
        pairs = list(sessions.items()) if isinstance(sessions, Mapping) else list(sessions)
        batches: list[tuple[str, list[AgentExperience]]] = []
        total = 0
        for n, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidInputError(f"sessions[{n}]", "must be a (session_id, turns) pair")
            sid = check_session(pair[0])
            if any(sid == done for done, _ in batches):
                raise InvalidInputError(f"sessions[{n}]", f"session {sid!r} appears twice: give each session once")
            try:
                parsed = parse_turns(pair[1], cfg.max_batch_experiences + 1, lambda i, raw: check_value(
                    raw, f"turns[{i}]", cfg, cfg.max_experience_bytes, "max_experience_bytes"))
                check_batch(len(parsed), cfg, "turns")
                exps = self._session_experiences(tenant_id, sid, parsed) if parsed else []
            except InvalidInputError as exc:  # name the session: "sessions['s2'].turns[0].text"
                raise InvalidInputError(f"sessions[{sid!r}].{exc.field}", exc.rule, exc.value) from None
            total += len(parsed)
            batches.append((sid, exps))
        out: dict[str, list[str]] = {sid: [] for sid, _ in batches}
        # Whole sessions go into one record_experiences call while they fit its batch limit
        # (a session never exceeds it: checked above); each call is stored and indexed as one.
        chunk: list[tuple[str, list[AgentExperience]]] = []
        done = 0

        def flush() -> None:
            nonlocal done
            if not chunk:
                return
            exps = [e for _, es in chunk for e in es]
            ids = iter(self.record_experiences(tenant_id, exps, progress=None))
            for sid, es in chunk:
                out[sid].extend(itertools.islice(ids, len(es)))
            done += len(exps)
            if progress:
                progress(done, total)
            chunk.clear()

        for sid, exps in batches:
            if chunk and sum(len(es) for _, es in chunk) + len(exps) > cfg.max_batch_experiences:
                flush()
            chunk.append((sid, exps))
        flush()
        return out

    def _session_experiences(self, tenant_id: str, sid: str, parsed: list[Any]) -> list[AgentExperience]:
        """The experiences of one session's turns; the first one's context is the stored turn
        of the same session before it, if any."""
        first = parsed[0].timestamp or utcnow()
        before = self.store.session_episode_before(tenant_id, sid, first.timestamp())
        previous = quoted(before["agent_id"], before["task_description"]) if before else None
        return turn_experiences(sid, parsed, previous)

    def retry_indexing(self, progress: Progress | None = None) -> int:
        """Index every episode whose indexing is pending or failed; returns how many were indexed."""
        self._writable("retry_indexing")
        return self.indexer.retry(progress)

    def reindex(self, tenant_id: str | None = None, progress: Progress | None = None, batch_size: int = 1000) -> int:
        """Rewrite the LanceDB rows of every episode (all tenants, or one) from the graph store;
        safe to kill at any moment (see ``EpisodeIndexer.reindex``)."""
        self._writable("reindex")
        if tenant_id is not None:
            check_tenant(tenant_id)
        expected = 0
        if progress is not None:  # how many, for the progress bar's total
            tenants = [tenant_id] if tenant_id is not None else self.store.tenants()
            expected = sum(int(self.store.stats(t).get("episodes", 0)) for t in tenants)
        return self.indexer.reindex(tenant_id, progress, batch_size, expected)

    # ------------------------------------------------------------------ feedback
    def submit_feedback(self, tenant_id: str, episode_id: str, score: float, notes: str | None = None,
                        category: str | None = None, created_by: str | None = None) -> FeedbackResult:
        """Rate an episode in [-1, 1]. Returns the feedback record plus the episode's new
        aggregates (``average``: normalised to [0, 1], ``count``): a FeedbackResult."""
        self._writable("submit_feedback")
        return submit_feedback(self.store, self.config, tenant_id, episode_id, score, notes, category, created_by)

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
        check_query(query, self.config)
        check_text(agent_role, "agent_role", self.config.max_text_bytes, "max_text_bytes")
        if isinstance(options, dict):
            check_value(options, "options", self.config, self.config.max_experience_bytes, "max_experience_bytes")
        return recall(self.store, self.index, self.embedder, self.config, tenant_id, agent_role, query, limit, options)

    def get_agent_episodes(self, tenant_id: str, agent_id: str, limit: int = 30) -> list[Episode]:
        """The agent's newest ``limit`` episodes, newest first."""
        check_tenant(tenant_id)
        if not isinstance(agent_id, str) or not agent_id:
            raise InvalidInputError("agent_id", "must be a non-empty string", agent_id)
        check_text(agent_id, "agent_id", self.config.max_text_bytes, "max_text_bytes")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
            raise InvalidInputError("limit", f"must be a positive integer (at most {MAX_PAGE})", limit)
        episodes = self.store.agent_episodes(tenant_id, agent_id, limit)
        if not episodes:  # one rule for unknown names: not_found, naming the known ones
            raise NotFoundError("agent", agent_id, f"tenant {tenant_id!r} has no episodes of this agent; "
                                + known_names(self.store.agent_ids(tenant_id, KNOWN_SHOWN + 1), "agents",
                                              "record a run of it first"))
        return [Episode(e) for e in episodes]

    def get_episode(self, tenant_id: str, episode_id: str) -> Episode:
        """One stored episode by id, as recorded (no scores: nothing was recalled);
        NotFoundError when the tenant holds no such episode (another tenant's id included)."""
        check_tenant(tenant_id)
        if not isinstance(episode_id, str) or not episode_id:
            raise InvalidInputError("episode_id", "must be a non-empty string", episode_id)
        check_text(episode_id, "episode_id", self.config.max_text_bytes, "max_text_bytes")
        found = self.store.get_episodes(tenant_id, [episode_id])
        if episode_id not in found:
            raise NotFoundError("episode", episode_id, f"tenant {tenant_id!r} holds no such episode")
        return Episode(found[episode_id])

    def readiness(self, tenant_id: str, agent_id: str, window: int = 30) -> dict[str, Any]:
        """Graduation exam over the agent's last ``window`` episodes."""
        if isinstance(window, bool) or not isinstance(window, int) or not 0 < window <= MAX_PAGE:
            raise InvalidInputError("window", f"must be a positive integer (at most {MAX_PAGE})", window)
        episodes = self.get_agent_episodes(tenant_id, agent_id, window)  # NotFoundError for an unknown agent
        cfg = self.config
        n = len(episodes)
        zero_int = sum(1 for e in episodes if not e["human_intervention_required"]) / n
        compliance = sum(1 for e in episodes if not e["constitutional_violations"]) / n
        confidence = sum(float(e["confidence_score"]) for e in episodes) / n
        success = sum(1 for e in episodes if e["success"]) / n
        checks = {
            "episodes": (n, cfg.readiness_min_episodes),
            "zero_intervention_ratio": (zero_int, cfg.readiness_min_zero_intervention),
            "constitutional_compliance": (compliance, cfg.readiness_min_compliance),
            "mean_confidence": (confidence, cfg.readiness_min_confidence),
            "success_rate": (success, cfg.readiness_min_success_rate),
        }
        failing = [k for k, (v, m) in checks.items() if v < m]
        return {
            "tenant_id": tenant_id, "agent_id": agent_id, "window": window, "episodes": n,
            "zero_intervention_ratio": round(zero_int, 6), "constitutional_compliance": round(compliance, 6),
            "mean_confidence": round(confidence, 6), "success_rate": round(success, 6),
            "score": round((zero_int + compliance + confidence + success) / 4, 6),
            "ready": not failing, "failing": failing,
            "thresholds": {k: m for k, (_, m) in checks.items()},
        }

    def stats(self, tenant_id: str) -> dict[str, Any]:
        """The tenant's counts (episodes, feedback, scenes by status...), how many episodes the
        index holds, its environments, and which graph store and embedder this model runs on."""
        check_tenant(tenant_id)
        out: dict[str, Any] = dict(self.store.stats(tenant_id))
        out["indexed"] = self.index.count(tenant_id)
        out["environments"] = self.store.environments(tenant_id)
        out["graph_store"] = self.store.name
        out["embedder"] = embedder_name(self.embedder)
        return out

    # ------------------------------------------------------------------ browse and forget
    def list_episodes(self, tenant_id: str, agent_id: str | None = None, session_id: str | None = None,
                      since: Any = None, until: Any = None, limit: int = 100, cursor: str | None = None) -> Page:
        """A page of the tenant's episodes, newest first, filtered (``since`` inclusive, ``until``
        exclusive, ISO-8601); ``cursor``: the previous page's ``next_cursor`` (a keyset, never an
        offset: a deep page costs what the first does)."""
        check_tenant(tenant_id)
        for name, value in (("agent_id", agent_id), ("session_id", session_id)):
            if value is not None and (not isinstance(value, str) or not value):
                raise InvalidInputError(name, "must be a non-empty string or null", value)
            check_text(value, name, self.config.max_text_bytes, "max_text_bytes")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_PAGE:
            raise InvalidInputError("limit", f"must be a positive integer (at most {MAX_PAGE})", limit)
        flt = EpisodeFilter(agent_id, session_id, parse_time(since, "since"), parse_time(until, "until"))
        after = decode_cursor(cursor, flt)
        rows = self.store.list_episodes(tenant_id, flt, limit + 1, after)
        more = len(rows) > limit
        rows = rows[:limit]
        nxt = encode_cursor(rows[-1]["ts"], rows[-1]["id"], flt) if more else None
        return Page([Episode(r) for r in rows], nxt)

    def list_agents(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's agents that have episodes: [{agent_id, agent_role, episodes, last_seen}]."""
        check_tenant(tenant_id)
        return self.store.list_agents(tenant_id)

    def list_environments(self, tenant_id: str) -> list[dict[str, Any]]:
        """The tenant's environments: [{env_name, graph_version, nodes, edges, rules, updated_at}]."""
        check_tenant(tenant_id)
        out = []
        for env, meta in self.store.environment_metas(tenant_id).items():
            counts = (meta or {}).get("counts") or {}
            out.append({"env_name": env, "graph_version": (meta or {}).get("graph_version", 0),
                        "nodes": counts.get("nodes", 0), "edges": counts.get("edges", 0),
                        "rules": counts.get("rules", 0), "scenes": counts.get("scenes", 0),
                        "updated_at": (meta or {}).get("updated_at")})
        return out

    def _forget_report(self, kind: str, audit: dict[str, Any], removed: dict[str, Any]) -> ForgetReport:
        due = datetime.fromisoformat(audit["forgotten_at"]) + timedelta(seconds=self.config.purge_after_seconds)
        self._purger.kick()
        return ForgetReport(kind, audit["tenant_id"], audit["target_id"], audit["id"], audit["forgotten_at"],
                            audit.get("forgotten_by"), {k: int(v) for k, v in removed.items()}, due.isoformat())

    def forget_episode(self, tenant_id: str, episode_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget one episode: from this call on it is on no read path (recall, get, list, agent
        episodes, readiness, neighbourhoods, Cypher, export). Its feedback, canvas actions, session
        place (its neighbours are linked to each other), index rows and, for a round, its scene
        packet go with it; world facts learned from that scene stay, without the scene among their
        sources. One store transaction; an audit row keeps who forgot which id and when. The bytes
        leave the files with ``purge()`` (in the background within ``purge_after_seconds``)."""
        check_tenant(tenant_id)
        self._writable("forget_episode")
        if not isinstance(episode_id, str) or not episode_id:
            raise InvalidInputError("episode_id", "must be a non-empty string", episode_id)
        check_text(episode_id, "episode_id", self.config.max_text_bytes, "max_text_bytes")
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, "episode", episode_id, forgotten_by, now_iso())
        removed = self.store.forget_episode(tenant_id, episode_id, audit)
        if removed is None:
            raise NotFoundError("episode", episode_id, f"tenant {tenant_id!r} holds no such episode")
        try:  # recall already drops hits the store no longer holds; purge() deletes rows left here
            self.index.delete([episode_id])
            removed["index_rows"] = 1
        except Exception as exc:  # noqa: BLE001 - the store forgot it: that decides the call
            log.warning("forgot episode %s, but its index row stays until the next purge (%s)", episode_id, exc)
            removed["index_rows"] = 0
        return self._forget_report("episode", audit, removed)

    def forget_environment(self, tenant_id: str, env_name: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget one environment's world graph: its nodes, edges, rules, scenes (the packets) and
        meta, in one transaction. The episodes of its rounds stay (``forget_episode`` each)."""
        check_tenant(tenant_id)
        self._writable("forget_environment")
        env = check_env(env_name)
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, "environment", env, forgotten_by, now_iso())
        removed = self.store.forget_environment(tenant_id, env, audit)
        if removed is None:
            known = self.store.environments(tenant_id)
            raise NotFoundError("environment", env, f"tenant {tenant_id!r} has no such environment; " + known_names(
                known, "environments", "nothing to forget"), field="env_name")
        self.world.history.drop(tenant_id, env)
        return self._forget_report("environment", audit, removed)

    def forget_tenant(self, tenant_id: str, forgotten_by: str | None = None) -> ForgetReport:
        """Forget every record of the tenant, its API keys included, in one store transaction; its
        index table is dropped (now, and again by ``purge()`` if this fails half way)."""
        check_tenant(tenant_id)
        self._writable("forget_tenant")
        check_text(forgotten_by, "forgotten_by", self.config.max_text_bytes, "max_text_bytes")
        audit = audit_record(tenant_id, "tenant", tenant_id, forgotten_by, now_iso())
        removed = self.store.forget_tenant(tenant_id, audit)
        self.world.history.drop(tenant_id)
        try:
            self.index.delete_tenant(tenant_id)
        except Exception as exc:  # noqa: BLE001 - the store forgot it; purge() drops the table
            log.warning("forgot tenant %s, but its index rows stay until the next purge (%s)", tenant_id, exc)
        return self._forget_report("tenant", audit, removed)

    def purge(self, progress: Progress | None = None) -> dict[str, Any]:
        """Physical removal of what was forgotten: afterwards the forgotten text is in no file of the
        embedded store or of the index (local or S3): the index tables touched are compacted, their
        full-text and scalar indexes rebuilt and their old versions deleted; a forgotten tenant's
        table is dropped; the SQLite WAL is checkpointed and truncated (deleted rows are zeroed in
        place, ``secure_delete``). Neo4j keeps deleted records in its store files until the space
        is reused (README, "Forgetting"). Returns what it did; ``progress(done, total)`` counts
        the index tables purged."""
        self._writable("purge")
        with self._purge_lock:
            pending = self.store.forget_log(unpurged=True)
            by_tenant: dict[str, list[str]] = {}
            for a in pending:
                if a["kind"] == "episode":
                    by_tenant.setdefault(a["tenant_id"], []).append(a["target_id"])
            stale: list[str] = []
            for tenant, ids in by_tenant.items():  # an id recorded again after its forget keeps its row
                alive = self.store.get_episodes(tenant, ids)
                stale.extend(i for i in ids if i not in alive)
            drop, rewrite = [], set(by_tenant)
            for tenant in {a["tenant_id"] for a in pending if a["kind"] == "tenant"}:
                if self.store.stats(tenant)["episodes"] == 0:
                    drop.append(tenant)
                else:  # recorded again since: keep those rows, remove the rest
                    keep = {tenant: {e["id"] for page in self.store.iter_episodes(tenant) for e in page}}
                    self.index.prune(keep, tenant)
                    rewrite.add(tenant)
            stats: dict[str, Any] = {"forgets_purged": len(pending)}
            stats.update(self.index.purge(stale, sorted(rewrite), drop, progress))
            stats.update(self.store.purge_files())
            if pending:
                self.store.mark_purged([a["id"] for a in pending], now_iso())
            return stats

    # ------------------------------------------------------------------ world graph
    def observe_round(self, tenant_id: str, env_name: str, round: Any) -> SceneRecord | None:  # noqa: A002 - the contract's name
        """Record an agent round as an episode; when it ends with ``FLAG_CURIOSITY: yes`` persist a
        scene packet (pending), queue it for the background worker and return it."""
        self._writable("observe_round")
        check_value(round, "round", self.config, self.config.max_experience_bytes, "max_experience_bytes")
        return self.world.observe_round(tenant_id, env_name, round)

    def update_world(self, packet: Any) -> MergeReport:
        """Extract a delta from a scene packet with the LLM, validate and merge it now; returns the
        MergeReport. A packet another worker holds is waited for (``update_wait_seconds``) and its
        merge's report returned; a packet merged before returns that merge's report."""
        self._writable("update_world")
        check_value(packet, "packet", self.config, self.config.max_experience_bytes, "max_experience_bytes")
        if isinstance(packet, dict):  # a packet not stored yet is stored from these fields first
            for key in ("tenant_id", "id", "env_name", "created_at"):
                if not isinstance(packet.get(key), str) or not packet[key]:
                    raise InvalidInputError(f"packet.{key}", "is required (give the packet returned by observe_round)")
            check_tenant(packet["tenant_id"], "packet.tenant_id")
            check_env(packet["env_name"])
        return self.world.update(packet)

    def apply_delta(self, tenant_id: str, env_name: str, delta: Any, scene: Any = None) -> MergeReport:
        """Merge a delta you already have (no LLM): validated, then merged with its evidence.

        Example::

            report = wm.apply_delta("acme", "kitchen", {"entities": [...], "states": [],
                                                        "edges": [], "rules": []})

        Args:
            tenant_id: whose world graph.
            env_name: the environment the delta describes.
            delta: the four arrays of docs/architecture.md "Delta format".
            scene: the scene packet the delta came from, if any (becomes the facts' source).

        Returns:
            A ``MergeReport``: what was created, updated, closed and dropped (with reasons).

        Raises:
            DeltaValidationError: the delta is not an object with four arrays of objects, or
                passes ``max_delta_bytes``.
            InvalidInputError: ``scene`` passes ``max_experience_bytes``, or a bad name.
            ReadOnlyError: the model was opened read-only.
        """
        self._writable("apply_delta")
        check_delta_size(delta, self.config)
        check_value(scene, "scene", self.config, self.config.max_experience_bytes, "max_experience_bytes")
        return self.world.apply_delta(tenant_id, env_name, delta, scene)

    def wait_for_updates(self, timeout: float | None = None) -> bool:
        """Block until the background queue is empty; False if ``timeout`` ran out first."""
        return self.world.wait(timeout)

    def retry_updates(self, tenant_id: str | None = None, env_name: str | None = None,
                      stale_after: float | None = 600.0) -> list[MergeReport]:
        """Re-run pending and failed scene packets now, and those left "running" for more than
        ``stale_after`` seconds by a process that died mid-update; returns their MergeReports."""
        self._writable("retry_updates")
        return self.world.retry(tenant_id, env_name, stale_after)

    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        """The environment's graph; NotFoundError (naming the known ones) for an environment the
        tenant has neither a graph nor a scene of."""
        check_tenant(tenant_id)
        graph = self.store.world_graph(tenant_id, check_env(env_name))
        if graph.get("meta") is None and not graph.get("scenes") and not graph.get("nodes"):
            require_environment(self.store, tenant_id, env_name)
        return graph

    def export(self, tenant_id: str, env_name: str, out_dir: str | Path, progress: Progress | None = None) -> Path:
        """Write the five canonical files under ``out_dir/<tenant>/<app>/world_model_graph/<env>/``."""
        return export_environment(self.store, tenant_id, env_name, Path(out_dir), self.config.app_name, progress)

    def import_snapshot(self, tenant_id: str, path: str | Path, env_name: str | None = None,
                        progress: Progress | None = None) -> dict[str, Any]:
        """Load a snapshot (replaces that environment's graph): the folder ``export`` returned, or
        the ``out_dir`` given to it (``env_name`` picks one when it holds several)."""
        self._writable("import_snapshot")
        return import_environment(self.store, tenant_id, Path(path), env_name, progress)

    def cypher(self, tenant_id: str, query: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Read-only, tenant-scoped Cypher on either store: ``$tenant_id`` is bound for you. The
        query text and the params are checked first, whatever the store (``kg.cypher_limits``).

        Example::

            rows = wm.cypher("acme", "MATCH (r:Rule {tenant_id: $tenant_id}) "
                                     "RETURN r.condition, r.outcome ORDER BY r.confidence DESC LIMIT 5")

        Args:
            tenant_id: the tenant the query is scoped to (it sees nothing else).
            query: one read-only Cypher statement.
            params: query parameters (JSON values; ``tenant_id`` is set for you).

        Returns:
            One dict per row, keyed by the RETURN names.

        Raises:
            CypherInputError: the text, params or result pass a size limit.
            ReadOnlyQueryError: the query would write or call a refused procedure.
            TenantScopeError: the query is not provably inside the tenant.
            CypherQueryError: the store could not run it (syntax, type, ``cypher_timeout_seconds``).
        """
        check_tenant(tenant_id)
        check_query_text(query, self.config)
        check_params(params, self.config)
        return self.store.cypher(tenant_id, query, params)
