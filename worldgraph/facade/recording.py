"""The recording path of ``WorldModel``: experiences and conversations validated, embedded, stored
in one transaction and indexed; the index kept whole (re-indexing what failed, rebuilding it).

The facade checks the tenant and that it is writable, then hands the call to its ``Recorder``,
which owns what recording needs besides the store: the indexer, the background re-indexing and
the group commit (memory/group_commit.py).
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from worldgraph.clock import utcnow
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import EmbeddingDimensionError, InvalidInputError
from worldgraph.gcpause import gc_paused
from worldgraph.kg.store import GraphStore
from worldgraph.limits import check_batch, check_value
from worldgraph.memory.conversation import check_session, parse_turns, stamped, turn_experiences
from worldgraph.memory.embedders.coalesce import CoalescingEmbedder
from worldgraph.memory.embeddings import Embedder
from worldgraph.memory.group_commit import GroupCommit
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.indexer import EpisodeIndexer, Progress
from worldgraph.memory.index.retrier import IndexRetrier
from worldgraph.memory.models import AgentExperience, CanvasContext
from worldgraph.memory.record import build_episode, parse_canvas, parse_experience
from worldgraph.names import check_tenant

log = logging.getLogger("worldgraph")
LAST_TIME = 253402300799.0  # 9999-12-31T23:59:59Z: after every stored turn


class Recorder:
    """Records episodes into ``store`` and ``index``; ``retry`` is how the background re-indexing
    re-indexes (the facade's ``retry_indexing``)."""

    def __init__(self, store: GraphStore, index: EpisodeIndex, embedder: Embedder, config: WorldGraphConfig,
                 retry: Callable[[], int]) -> None:
        self.store = store
        self.index = index
        self.config = config
        # records embed through a coalescing wrapper: concurrent calls share batches (queries do not wait)
        record_embedder = (CoalescingEmbedder(embedder, config.embedding_coalesce_max, config.embedding_coalesce_ms / 1000)
                           if config.embedding_coalesce else embedder)
        self.indexer = EpisodeIndexer(store, index, record_embedder, config, on_failure=lambda: self.retrier.kick())
        # after an index failure (an unreachable object store), re-index in the background
        self.retrier = IndexRetrier(retry, lambda: bool(self.store.unindexed_episodes(limit=1)), config.index_retry_seconds)
        # concurrent records of a tenant are stored and indexed in groups (memory/group_commit.py)
        self.replacing = threading.Lock()  # record(replace=...) calls, one at a time
        self.group_commit = (GroupCommit(self.commit, lambda t, ids: set(self.store.get_episodes(t, ids)),
                                         lambda: self.retrier.kick(), config.max_batch_experiences)
                             if config.record_group_commit else None)

    def record(self, tenant_id: str, experiences: Iterable[AgentExperience | dict[str, Any]],
               canvases: list[CanvasContext | dict[str, Any] | None] | None = None,
               progress: Progress | None = None, contexts: list[str | None] | None = None,
               replace: Callable[[str, list[str]], object] | None = None) -> list[str]:
        """``WorldModel.record_experiences`` once the tenant and writability are checked.
        ``contexts`` (conversation turns): per experience, the episode its input summary quotes
        (``context_from``, kg.derived), None for none. ``replace(tenant_id, ids)``: forgets the
        episodes of the batch's ids that are already recorded (None: such an id is an error)."""
        # The batch's records are acyclic dicts and lists freed by their reference counts; with the
        # cyclic collector on, tens of young collections a batch promoted them and every few batches
        # a full collection walked the whole process (~10 % of recording's CPU: bench/README.md).
        with gc_paused():
            return self._record(tenant_id, experiences, canvases, progress, contexts, replace)

    def _record(self, tenant_id: str, experiences: Iterable[AgentExperience | dict[str, Any]],
                canvases: list[CanvasContext | dict[str, Any] | None] | None, progress: Progress | None,
                contexts: list[str | None] | None,
                replace: Callable[[str, list[str]], object] | None) -> list[str]:
        """``record``'s work, with the cyclic garbage collector paused."""
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
            if contexts is not None:
                ep["context_from"] = contexts[i]
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
        if existing and replace is None:
            i = next(i for i, e in enumerate(episodes) if e["id"] in existing)
            field = "experience" if len(episodes) == 1 else f"experiences[{i}]"
            raise InvalidInputError(f"{field}.episode_id", f"{episodes[i]['id']!r} is already recorded; "
                                    "leave episode_id out to get a new id")
        # Embed before storing: a wrong-shaped embedding is a caller error and must leave the store
        # unchanged. An unreachable embedding server is not: the episodes are stored and indexed later.
        vectors = None
        embed_error = ""
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
        if replace is not None:
            # Checked and embedded: now the old episodes are forgotten (as forget_episode does) and
            # the new ones stored, one replacing call at a time, so two replaces of one id never race.
            with self.replacing:
                old = self.store.get_episodes(tenant_id, ids)
                if old:
                    replace(tenant_id, [i for i in ids if i in old])
                self._store(tenant_id, episodes, canvas_recs, audits, vectors, embed_error, group=False)
            return ids
        self._store(tenant_id, episodes, canvas_recs, audits, vectors, embed_error, group=True)
        return ids

    def _store(self, tenant_id: str, episodes: list[dict[str, Any]], canvas_recs: dict[str, dict[str, Any]],
               audits: list[dict[str, Any]], vectors: Any, embed_error: str, group: bool) -> None:
        """The one write that decides a record call (see ``record``)."""
        if vectors is None:
            self.store.add_episodes(tenant_id, episodes, list(canvas_recs.values()), audits)
            self.indexer.mark(tenant_id, [e["id"] for e in episodes], "failed", embed_error)
            self.retrier.kick()
        elif group and self.group_commit is not None:  # with the concurrent calls of this tenant, if any
            self.group_commit.commit(tenant_id, episodes, list(canvas_recs.values()), audits, vectors)
        else:
            self.commit(tenant_id, episodes, list(canvas_recs.values()), audits, vectors)

    def commit(self, tenant_id: str, episodes: list[dict[str, Any]], canvases: list[dict[str, Any]],
               audits: list[dict[str, Any]], vectors: Any) -> None:
        """Store embedded episodes in one transaction, then append their index rows; raises only
        if the store commit fails (then nothing is stored)."""
        # New episodes are appended to the index, not merged: the window holds the table's write
        # lock around the store commit (see EpisodeIndex.adding); it neither fails to open nor raises.
        # One store commit: the episodes go in "indexed" with an entry of the store's append
        # journal (GraphStore.add_appending), which the next open re-indexes if the append never
        # happened; a store without a journal stores them pending and they are marked after.
        with self.index.adding(tenant_id) as add:
            entry = self.store.add_appending(tenant_id, episodes, canvases, audits)
            self.indexer.index_rows(tenant_id, episodes, vectors, add, entry)

    def conversation(self, tenant_id: str, session_id: str, turns: Iterable[dict[str, Any]],
                     progress: Progress | None = None) -> list[str]:
        """``WorldModel.record_conversation`` once the tenant and writability are checked."""
        sid = check_session(session_id)
        cfg = self.config
        parsed = parse_turns(turns, cfg.max_batch_experiences + 1, lambda i, raw: check_value(
            raw, f"turns[{i}]", cfg, cfg.max_experience_bytes, "max_experience_bytes"))
        check_batch(len(parsed), cfg, "turns")
        if not parsed:
            return []
        exps, sources = self._session_experiences(tenant_id, sid, parsed)
        return self.record(tenant_id, exps, progress=progress, contexts=sources)

    def conversations(self, tenant_id: str,
                      sessions: Mapping[str, Iterable[dict[str, Any]]] | Iterable[tuple[str, Iterable[dict[str, Any]]]],
                      progress: Progress | None = None) -> dict[str, list[str]]:
        """``WorldModel.record_conversations`` once the tenant and writability are checked."""
        cfg = self.config
        if isinstance(sessions, (str, bytes)) or not hasattr(sessions, "__iter__"):
            raise InvalidInputError("sessions", "must be a dict {session_id: turns} or a list of (session_id, turns)")
        pairs = list(sessions.items()) if isinstance(sessions, Mapping) else list(sessions)
        batches: list[tuple[str, list[AgentExperience], list[str | None]]] = []
        total = 0
        for n, pair in enumerate(pairs):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise InvalidInputError(f"sessions[{n}]", "must be a (session_id, turns) pair")
            sid = check_session(pair[0])
            if any(sid == done for done, _, _ in batches):
                raise InvalidInputError(f"sessions[{n}]", f"session {sid!r} appears twice: give each session once")
            try:
                parsed = parse_turns(pair[1], cfg.max_batch_experiences + 1, lambda i, raw: check_value(
                    raw, f"turns[{i}]", cfg, cfg.max_experience_bytes, "max_experience_bytes"))
                check_batch(len(parsed), cfg, "turns")
                exps, sources = self._session_experiences(tenant_id, sid, parsed) if parsed else ([], [])
            except InvalidInputError as exc:  # name the session: "sessions['s2'].turns[0].text"
                raise InvalidInputError(f"sessions[{sid!r}].{exc.field}", exc.rule, exc.value) from None
            total += len(parsed)
            batches.append((sid, exps, sources))
        out: dict[str, list[str]] = {sid: [] for sid, _, _ in batches}
        # Whole sessions go into one record_experiences call while they fit its batch limit
        # (a session never exceeds it: checked above); each call is stored and indexed as one.
        chunk: list[tuple[str, list[AgentExperience], list[str | None]]] = []
        done = 0

        def flush() -> None:
            nonlocal done
            if not chunk:
                return
            exps = [e for _, es, _ in chunk for e in es]
            sources = [s for _, _, ss in chunk for s in ss]
            ids = iter(self.record(tenant_id, exps, progress=None, contexts=sources))
            for sid, es, _ in chunk:
                out[sid].extend(itertools.islice(ids, len(es)))
            done += len(exps)
            if progress:
                progress(done, total)
            chunk.clear()

        for sid, exps, sources in batches:
            if chunk and sum(len(es) for _, es, _ in chunk) + len(exps) > cfg.max_batch_experiences:
                flush()
            chunk.append((sid, exps, sources))
        flush()
        return out

    def _session_experiences(self, tenant_id: str, sid: str,
                             parsed: list[Any]) -> tuple[list[AgentExperience], list[str | None]]:
        """The experiences of one session's turns and the episodes their contexts quote; the
        first one's context is the stored episode of the same session before it, if any."""
        newest = self.store.session_episode_before(tenant_id, sid, LAST_TIME)
        parsed = stamped(parsed, utcnow(), float(newest["ts"]) if newest else None)
        first = parsed[0].timestamp or utcnow()
        before = self.store.session_episode_before(tenant_id, sid, first.timestamp())
        return turn_experiences(sid, parsed, before)

    def reindex(self, tenant_id: str | None, progress: Progress | None, batch_size: int) -> int:
        """``WorldModel.reindex`` once writability is checked."""
        if tenant_id is not None:
            check_tenant(tenant_id)
        expected = 0
        if progress is not None:  # how many, for the progress bar's total
            tenants = [tenant_id] if tenant_id is not None else self.store.tenants()
            expected = sum(int(self.store.stats(t).get("episodes", 0)) for t in tenants)
        return self.indexer.reindex(tenant_id, progress, batch_size, expected)
