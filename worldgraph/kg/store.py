"""The store interfaces: the system of record, implemented by the embedded store and Neo4j.

Two protocols, one per kind of knowledge, so each layer depends on the half it uses:

- ``EpisodeStore``: episodes, feedback, canvases and audits (what ``memory`` records and recalls);
- ``WorldStore``: the world graph, its scenes (the durable update queue) and their leases (what
  the world updater and the worker use).

``GraphStore`` is both plus what spans them (tenants, stats, Cypher, API keys, close): one class
per backend implements it (``EmbeddedGraphStore``, ``Neo4jGraphStore``).

Everything is scoped by ``tenant_id``; no method returns another tenant's data. Records are the
plain dicts of ``worldgraph.kg.records`` (world graph) and of ``worldgraph.memory.models``
(``Episode.to_record()``, feedback, canvases, audits), so both stores hold the same values and
export the same bytes.

Episode records (dict) carry every AgentExperience field plus: ``id``, ``tenant_id``,
``timestamp`` (ISO string), ``ts`` (float unix seconds), ``canvas_name``, ``canvas_snapshot``,
``index_status`` ("pending" | "indexed" | "failed") and ``index_error``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

from worldgraph.errors import NotSupportedError
from worldgraph.kg.lifecycle import DerivedRecords, EpisodeFilter, Forgotten
from worldgraph.kg.records import GraphView, MergePlan, MetaRecord, SceneRecord

Record = dict[str, Any]


class _Store(ABC):  # noqa: B024 - the base of the two store protocols; its methods have defaults
    """What every store says about itself. Writes of one call are atomic: all of it lands, or none."""

    name: str = "abstract"
    read_only: bool = False  # opened for reading only: every write raises ReadOnlyError


class EpisodeStore(_Store):
    """Episodes, their feedback, canvases and audits: the memory half of the system of record."""

    # ---------------------------------------------------------------- episodes
    @abstractmethod
    def add_episodes(
        self,
        tenant_id: str,
        episodes: list[Record],
        canvases: list[Record],
        audits: list[Record],
    ) -> None:
        """Insert episodes (with their Agent, Canvas and CanvasAudit records) in one transaction.
        Episodes with a ``session_id`` are linked into their session's time order (kg.sessions)."""

    def add_appending(self, tenant_id: str, episodes: list[Record], canvases: list[Record],
                      audits: list[Record]) -> Any:
        """``add_episodes`` of new episodes whose index rows the caller writes next, under the
        index's write lock (``EpisodeIndex.adding``). A store with an append journal stores them
        "indexed" with a journal entry of the batch in the same commit and returns the entry; the
        caller hands it to ``appended`` once the rows are written, and ``append_entries`` /
        ``close_append`` let ``retry_indexing`` mark "pending" what a killed writer left without
        rows. This default has no journal: the episodes are stored "pending" (the caller marks
        them) and it returns None."""
        self.add_episodes(tenant_id, episodes, canvases, audits)
        return None

    def appended(self, entry: Any) -> None:
        """The index rows of the batch of ``entry`` (from ``add_appending``) are written."""

    def append_entries(self) -> list[tuple[Any, str, list[str]]]:
        """(entry, tenant, episode ids) of every batch of the append journal whose rows may not
        be written yet; none without a journal."""
        return []

    def close_append(self, entry: Any, tenant_id: str, pending_ids: list[str]) -> None:
        """Mark ``pending_ids`` of ``entry``'s batch "pending" and drop the entry."""

    @abstractmethod
    def get_episodes(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        """The episodes of this tenant among ``episode_ids`` (missing ids are simply absent)."""

    @abstractmethod
    def session_neighbors(self, tenant_id: str, episode_ids: list[str]) -> dict[str, tuple[str | None, str | None]]:
        """Per episode that belongs to a session: (previous, next) episode id in the session's
        time order (``NEXT``), None at either end. Episodes without a session are absent."""

    @abstractmethod
    def session_episode_before(self, tenant_id: str, session_id: str, ts: float) -> Record | None:
        """The last episode of the session in time order whose timestamp is at most ``ts``
        (what a new episode at ``ts`` would follow), or None."""

    @abstractmethod
    def agent_episodes(self, tenant_id: str, agent_id: str, limit: int) -> list[Record]:
        """The agent's newest ``limit`` episodes, newest first."""

    def agent_ids(self, tenant_id: str, limit: int = 20) -> list[str]:
        """Ids of this tenant's agents (those with an episode), sorted, at most ``limit``: what an
        unknown agent's error names. A store that cannot list them names none."""
        return []

    def episode_ids_with_prefix(self, tenant_id: str, prefix: str, limit: int = 10) -> list[str]:
        """This tenant's episode ids that start with ``prefix``, sorted, at most ``limit`` (how the
        CLI accepts the short ids it prints). Stores override it with one index seek."""
        found: list[str] = []
        for page in self.iter_episodes(tenant_id):
            found.extend(e["id"] for e in page if e["id"].startswith(prefix))
        return sorted(found)[:limit]

    @abstractmethod
    def iter_episodes(self, tenant_id: str | None = None, batch_size: int = 1000) -> Iterator[list[Record]]:
        """Every episode (of one tenant, or all), in batches, for reindexing."""

    @abstractmethod
    def set_index_status(self, tenant_id: str, episode_ids: list[str], status: str, error: str | None = None) -> None:
        """Mark episodes "indexed" / "failed" / "pending" in the LanceDB sidecar."""

    def mark_pending(self, tenant_id: str | None = None) -> int:
        """Mark every episode (of one tenant, or all) "pending" before its index rows are
        rewritten, so that an interrupted reindex is finished by the next ``retry_indexing``.
        Returns how many changed. Pages may commit separately: marking is idempotent, and no index
        row is touched before it is done. Stores override it with one statement."""
        changed = 0
        for page in self.iter_episodes(tenant_id, batch_size=1000):
            by_tenant: dict[str, list[str]] = {}
            for e in page:
                if e.get("index_status") != "pending":
                    by_tenant.setdefault(e["tenant_id"], []).append(e["id"])
            for tenant, ids in by_tenant.items():
                self.set_index_status(tenant, ids, "pending")
                changed += len(ids)
        return changed

    @abstractmethod
    def unindexed_episodes(self, limit: int = 1000) -> list[Record]:
        """Episodes whose indexing is pending or failed (all tenants), oldest first."""

    # ---------------------------------------------------------------- feedback
    @abstractmethod
    def add_feedback(self, tenant_id: str, feedback: Record) -> None:
        """Store one EpisodeFeedback record; raises NotFoundError if its episode is not this tenant's."""

    @abstractmethod
    def feedback_for(self, tenant_id: str, episode_id: str) -> list[Record]:
        """Every feedback record of one episode, oldest first."""

    @abstractmethod
    def feedback_stats(
        self, tenant_id: str, episode_ids: list[str], category: str | None = None
    ) -> dict[str, tuple[float, int]]:
        """Per episode: (mean raw score in [-1, 1], count), over feedback of ``category`` if given.
        Episodes without (matching) feedback are absent."""

    def feedback_means(self, tenant_id: str, category: str | None = None) -> dict[str, float]:
        """Per rated episode of the tenant: its mean raw score in [-1, 1], over feedback of
        ``category`` if given (recall's feedback filter, turned into the episodes that pass it).
        Stores override it with one aggregate over their feedback."""
        ids = [e["id"] for page in self.iter_episodes(tenant_id) for e in page]
        return {e: mean for e, (mean, _) in self.feedback_stats(tenant_id, ids, category).items()}

    def session_episode_ids(self, tenant_id: str, session_id: str) -> list[str]:
        """Ids of the episodes of one session (recall's session filter). Stores override it with
        one index seek."""
        return [e["id"] for page in self.iter_episodes(tenant_id) for e in page if e.get("session_id") == session_id]

    def episodes_with_feedback(
        self, tenant_id: str, episode_ids: list[str], category: str | None = None
    ) -> tuple[dict[str, Record], dict[str, tuple[float, int]]]:
        """``get_episodes`` and ``feedback_stats`` of the episodes found, together: what recall
        needs per query (stores that can do it in one round trip override this)."""
        episodes = self.get_episodes(tenant_id, episode_ids)
        return episodes, self.feedback_stats(tenant_id, list(episodes), category)

    # ---------------------------------------------------------------- canvases
    @abstractmethod
    def get_canvas(self, tenant_id: str, canvas_id: str) -> Record | None: ...

    @abstractmethod
    def canvas_audits(self, tenant_id: str, episode_id: str) -> list[Record]:
        """Audits linked to one episode, ordered by timestamp then id."""

    # ---------------------------------------------------------------- exploration
    @abstractmethod
    def neighborhood(self, tenant_id: str, episode_ids: list[str]) -> dict[str, Record]:
        """Per episode: {"canvas": {...} | None, "canvas_actions": [...], "feedback": [...],
        "scenes": [...], "nodes": [...], "rules": [...]} (nodes and rules learned from its scenes)."""



class WorldStore(_Store):
    """The world graph of each environment, its scenes and their leases: the world half."""

    # ---------------------------------------------------------------- world graph
    @abstractmethod
    def load_view(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str] = ()) -> GraphView:  # type: ignore[assignment]
        """Nodes with these ids or whose ``norm_name`` is among ``names``, the states whose
        entity_id is among them, every edge touching them, the current containment edges above
        them (their ancestors), every rule of the env, and the meta."""

    @abstractmethod
    def world_records(self, tenant_id: str, env_name: str, ids: list[str]) -> GraphView:
        """The nodes, edges and rules of the environment with these ids (of any of the three
        kinds; an id it does not hold is left out), and nothing around them (no meta): what a
        search reads of its candidates, where ``load_view`` would bring every edge of a hub."""

    @abstractmethod
    def merge(self, tenant_id: str, env_name: str, node_ids: list[str], names: list[str],
              planner: Callable[[GraphView], MergePlan | None],
              fence: tuple[str, str] | None = None) -> MetaRecord | None:
        """Read the view (as ``load_view``), call ``planner(view)`` and apply the plan it returns
        (as ``apply_plan``), all in ONE write transaction that holds the environment's write lock
        from the start: two processes merging one environment never plan from the same view, so
        no update is lost. ``planner`` is pure and may be called again if the store retries the
        transaction. Returns the stored meta (the old one when the plan changed nothing).

        ``fence=(scene_id, owner)``: first check, in the same transaction, that the scene is still
        running under ``owner``'s lease (``worldgraph.kg.lease``); raise LeaseLostError, writing
        nothing, if it is not."""

    @abstractmethod
    def get_scene_report(self, tenant_id: str, scene_id: str) -> dict[str, Any] | None:
        """The MergeReport (``to_dict()``) kept with the scene when it was merged, if any."""

    @abstractmethod
    def apply_plan(self, plan: MergePlan) -> MetaRecord:
        """Upsert the plan's records by id, the scene (and its report) and the meta, recompute the
        meta's counts; one transaction. A plan without records and meta writes only its scene.
        Returns the stored meta."""

    @abstractmethod
    def upsert_scene(self, scene: SceneRecord) -> None: ...

    @abstractmethod
    def get_scene(self, tenant_id: str, scene_id: str) -> SceneRecord | None: ...

    @abstractmethod
    def claim_scene(self, tenant_id: str, scene_id: str) -> bool:
        """Atomically move a scene from pending/failed to running. False if it is already
        running or merged (so a packet is never merged twice)."""

    # Leases (worldgraph.kg.lease): each call is one transaction that locks the scene first, so
    # claims, renewals, releases and fenced merges of one scene never interleave. Not abstract: a
    # store without them still serves everything but update workers.
    def claim_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str,
                          now: str) -> SceneRecord | None:
        """Take the scene if ``lease.claimable(scene, now)``: it becomes running under ``owner``'s
        lease until ``until``; returns the stored record. None when it is absent or not claimable."""
        raise self._no_leases()

    def renew_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str, now: str) -> bool:
        """Extend ``owner``'s lease to ``until`` (and ``updated_at`` to ``now``); False if the scene is
        no longer running under that lease (it was taken over, merged or released)."""
        raise self._no_leases()

    def release_scene_lease(self, tenant_id: str, scene_id: str, owner: str, status: str, error: str | None,
                            now: str) -> bool:
        """Let go of ``owner``'s lease, leaving the scene ``status`` (pending: another worker takes
        it; failed) with ``error``; False (nothing written) if ``owner`` no longer holds it."""
        raise self._no_leases()

    def _no_leases(self) -> Exception:
        return NotSupportedError(f"the {self.name!r} store has no scene leases; use the embedded or Neo4j store")

    @abstractmethod
    def list_scenes(
        self, tenant_id: str | None = None, env_name: str | None = None, statuses: list[str] | None = None
    ) -> list[SceneRecord]:
        """Scenes, oldest first (by created_at, then id)."""

    @abstractmethod
    def environments(self, tenant_id: str) -> list[str]: ...

    @abstractmethod
    def world_graph(self, tenant_id: str, env_name: str) -> dict[str, Any]:
        """Everything of one env: {"nodes": [...], "edges": [...], "rules": [...], "scenes": [...],
        "meta": {...} | None}, each list sorted by id."""

    @abstractmethod
    def replace_world(self, tenant_id: str, env_name: str, graph: dict[str, Any]) -> None:
        """Replace one env's nodes, edges, rules, scenes and meta by ``graph`` (snapshot import)."""


class GraphStore(EpisodeStore, WorldStore):
    """Both halves in one backend, plus what spans them."""

    @abstractmethod
    def tenants(self) -> list[str]:
        """Tenants that have at least one episode, scene or environment."""

    @abstractmethod
    def stats(self, tenant_id: str) -> dict[str, int]:
        """Counts: episodes, agents, feedback, canvases, canvas_audits, scenes, nodes, edges, rules, and
        indexed (the episodes the store marks as held by the index)."""

    def cypher(self, tenant_id: str, query: str, params: dict[str, Any] | None = None) -> list[Record]:
        raise NotSupportedError(
            f"Cypher needs the embedded (default) or the Neo4j store; this one is {self.name!r}. Open with "
            "WorldModel.open(path) or WorldModel.open(path, graph='neo4j')."
        )

    def cypher_sandbox(self) -> str:
        """How this store confines Cypher queries: "landlock", "unsandboxed", "neo4j-plan" or "none"."""
        return "none"

    # ---------------------------------------------------------------- lifecycle (browse, forget, purge)
    # Not abstract: a store without them still serves recording and recall. Each forget is ONE
    # transaction: the record is fully present or fully gone from every read path.
    def list_episodes(self, tenant_id: str, flt: EpisodeFilter, limit: int,
                      after: tuple[float, str] | None) -> list[Record]:
        """At most ``limit`` episodes matching ``flt``, newest first in (ts, id) order, strictly
        after ``after`` (the (ts, id) of the previous page's last one) in that order."""
        raise self._no_lifecycle()

    def list_agents(self, tenant_id: str) -> list[Record]:
        """[{agent_id, agent_role, episodes, last_seen}] of the agents that have episodes, by id."""
        raise self._no_lifecycle()

    def environment_metas(self, tenant_id: str) -> dict[str, Record | None]:
        """Environment name -> its meta record (None before its first merge), sorted by name."""
        raise self._no_lifecycle()

    def forget_episodes(self, tenant_id: str, kind: str, target: str, audit: Record) -> Forgotten | None:
        """Delete the episodes ``kind`` names by ``target`` (``kg.lifecycle.EPISODE_SCOPES``: one
        episode by id, an agent's, a session's), each with its feedback, canvas actions, session
        place (neighbours relinked) and scene packets; take those scenes out of the sources of the
        world records learned from them, with the evidence that came only from them; derive again
        what live records showed of them (``kg.derived``); store ``audit``. One transaction.
        None (nothing written) when ``kind`` names no episode."""
        raise self._no_lifecycle()

    def forget_environment(self, tenant_id: str, env_name: str, audit: Record) -> Record | None:
        """Delete an environment's world graph, scenes, reports and meta; store ``audit``. Counts, or None."""
        raise self._no_lifecycle()

    def forget_tenant(self, tenant_id: str, audit: Record) -> Record:
        """Delete every record of the tenant, API keys included; store ``audit``. Counts."""
        raise self._no_lifecycle()

    def forget_log(self, tenant_id: str | None = None, unpurged: bool = False) -> list[Record]:
        """The audit rows of forgets (with ``purged_at``), oldest first."""
        raise self._no_lifecycle()

    def mark_purged(self, audit_ids: list[str], at: str) -> None:
        raise self._no_lifecycle()

    def purge_files(self) -> Record:
        """Remove what the store can of deleted records' bytes from its files; says what it did."""
        raise self._no_lifecycle()

    # The derived-text upgrade (facade/upgrade.py): a store written before derived text was
    # derived again is read once, and the copies it kept of forgotten records are derived again.
    def derived_text_upgraded(self) -> bool:
        """Whether the store went through the derived-text upgrade (or was made after it)."""
        return True

    def mark_derived_text_upgraded(self) -> None:
        """Remember that it did."""

    def canvas_ids(self, tenant_id: str) -> list[str]:
        """The ids of the tenant's canvas records."""
        raise self._no_lifecycle()

    def write_derived(self, tenant_id: str, derived_records: DerivedRecords, audit: Record) -> None:
        """Write the records whose derived text was derived again (episodes marked pending for
        re-indexing, canvases rewritten or deleted, metas, scenes) and ``audit``, in one transaction."""
        raise self._no_lifecycle()

    # Purge generations: a purge bumps the purged tenants' counts in the store, which every process
    # sharing it reads (facade/generations.py) to let go of the handles and caches it holds of them.
    def purge_total(self) -> int:
        """How many tenant purges the store has counted in all (0: none, or no lifecycle)."""
        return 0

    def purge_generations(self) -> dict[str, int]:
        """Tenant -> how many purges removed its forgotten bytes."""
        return {}

    def bump_purge_generations(self, tenants: list[str]) -> None:
        """Count one more purge of each of ``tenants`` (and of the total), in one transaction."""

    def release_tenant(self, tenant_id: str) -> None:
        """Let go of what this process holds of the tenant's data besides the store itself (the
        embedded store's Cypher projections): a purge deleted files it may read from."""

    def _no_lifecycle(self) -> Exception:
        return NotSupportedError(f"the {self.name!r} store cannot list or forget; use the embedded or Neo4j store")

    # ---------------------------------------------------------------- API keys (worldgraph serve)
    # Records: {"id", "tenant_id", "name", "key_hash", "created_at", "revoked_at"}. Only the hash
    # of a key is stored (see worldgraph.server.keys). Keys live in the store, so every server
    # process sharing one Neo4j (or one data folder) sees a key created or revoked by any of them.
    # Not abstract: a store without them still serves the Python API and the CLI.
    def add_api_key(self, key: Record) -> None:
        """Insert one API key record (its id is new)."""
        raise self._no_keys()

    def get_api_key(self, key_id: str) -> Record | None:
        """The key record with this id, revoked or not; None when there is none."""
        raise self._no_keys()

    def list_api_keys(self, tenant_id: str | None = None) -> list[Record]:
        """Key records (of one tenant, or all), oldest first."""
        raise self._no_keys()

    def revoke_api_key(self, key_id: str, revoked_at: str) -> Record:
        """Mark a key revoked (a key revoked earlier keeps its first time); returns the record.
        Raises NotFoundError for an unknown id."""
        raise self._no_keys()

    def _no_keys(self) -> Exception:
        return NotSupportedError(f"the {self.name!r} store does not keep API keys; use the embedded or Neo4j store")

    # ---------------------------------------------------------------- idempotency keys
    # The first answer to a write sent with an idempotency key, kept so that a retry gets it back and
    # stores nothing new (worldgraph.facade.idempotency says the rules). A record: {"tenant_id",
    # "key", "request_hash", "status": running | done, "answer" (JSON text), "refs" (the episode ids
    # and "env:<name>" the answer names: a forget of any of them deletes the record, since an answer
    # may quote the user's words), "started_at", "expires_at"}. Not abstract, like the API keys.
    def begin_idempotent(self, tenant_id: str, key: str, request_hash: str, now: str, expires_at: str,
                         stale_before: str) -> Record | None:
        """Atomically: drop the tenant's expired records; then, when (tenant, key) has no record, or
        one still ``running`` that started before ``stale_before`` (its process died) with this
        ``request_hash``, write it ``running`` from ``now`` and return None (the caller runs the
        request); else return the record (done: its answer; running; or another request's hash)."""
        raise self._no_idempotency()

    def finish_idempotent(self, tenant_id: str, key: str, answer: str, refs: list[str]) -> None:
        """Store the answer of a request begun with ``begin_idempotent`` (status done)."""
        raise self._no_idempotency()

    def abandon_idempotent(self, tenant_id: str, key: str) -> None:
        """Delete a running record (its request failed: a retry runs it again)."""
        raise self._no_idempotency()

    def _no_idempotency(self) -> Exception:
        return NotSupportedError(f"the {self.name!r} store does not keep idempotency keys; use the embedded or "
                                 "Neo4j store")

    @abstractmethod
    def close(self) -> None: ...
