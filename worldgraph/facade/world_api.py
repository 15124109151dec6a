"""The world-graph half of ``WorldModel``'s public API: rounds, deltas and updates, the graph
read back (``world_graph``, ``export``, ``import_snapshot``, ``search_world``, ``context``,
``cypher``).

``WorldModel`` (``service.py``) inherits these methods; their signatures and docstrings are the API
reference as the memory half's are in ``service.py`` (docs/architecture.md, "How the facade is
made"). Like every method of the facade, each one checks what the facade owns (the tenant, that the
model is writable) and hands the rest to the part that does the work.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from worldgraph.clock import seconds_left
from worldgraph.config import WorldGraphConfig
from worldgraph.export.environment import export_environment, import_environment
from worldgraph.facade import environments, idempotency, reading
from worldgraph.facade.generations import PurgeWatch
from worldgraph.facade.world_search import WorldSearch
from worldgraph.kg.cypher_limits import check_params, check_query_text
from worldgraph.kg.records import MergeReport, SceneRecord
from worldgraph.kg.store import GraphStore
from worldgraph.limits import check_delta_size, check_value
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.indexer import Progress
from worldgraph.names import check_tenant
from worldgraph.world.search.models import WorldContext, WorldHit
from worldgraph.world.updater import WorldUpdater


class WorldGraphAPI:
    """The world-graph methods of ``WorldModel`` (which sets the parts below in its ``__init__``)."""

    config: WorldGraphConfig
    store: GraphStore
    index: EpisodeIndex
    world: WorldUpdater
    world_search: WorldSearch
    purges: PurgeWatch
    idempotent: idempotency.Idempotency

    def _writable(self, operation: str) -> None:
        """Refuse a write of a read-only model before anything is done (``WorldModel`` defines it)."""
        raise NotImplementedError

    def observe_round(self, tenant_id: str, env_name: str, round: Any,  # noqa: A002 - the contract's name
                      idempotency_key: str | None = None) -> SceneRecord | None:
        """Record an agent round as an episode; when it ends with ``FLAG_CURIOSITY: yes`` persist a
        scene packet (pending), queue it for the background worker and return it.
        ``idempotency_key``: a retry with the same key and round returns the first answer."""
        self._writable("observe_round")
        check_value(round, "round", self.config, self.config.max_experience_bytes, "max_experience_bytes")
        return self.idempotent.run(tenant_id, idempotency_key, "observe_round", {"env_name": env_name, "round": round},
                                   lambda: self.world.observe_round(tenant_id, env_name, round),
                                   *idempotency.packet_codec(env_name))

    def update_world(self, packet: Any) -> MergeReport:
        """Extract a delta from a scene packet with the LLM, validate and merge it now; returns the
        MergeReport. A packet another worker holds is waited for (``update_wait_seconds``) and its
        merge's report returned; a packet merged before returns that merge's report."""
        self._writable("update_world")
        environments.check_packet(self.config, packet)
        return self.world.update(packet)

    def apply_delta(self, tenant_id: str, env_name: str, delta: Any, scene: Any = None,
                    idempotency_key: str | None = None) -> MergeReport:
        """Merge a delta you already have (no LLM): validated, then merged with its evidence.

        Example::

            report = wm.apply_delta("acme", "kitchen", {"entities": [...], "states": [],
                                                        "edges": [], "rules": []})

        Args:
            tenant_id: whose world graph.
            env_name: the environment the delta describes.
            delta: the four arrays of docs/architecture.md "Delta format".
            scene: the scene packet the delta came from, if any (becomes the facts' source).
            idempotency_key: a retry with the same key and delta returns the first report.

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
        return self.idempotent.run(tenant_id, idempotency_key, "apply_delta",
                                   {"env_name": env_name, "delta": delta, "scene": scene},
                                   lambda: self.world.apply_delta(tenant_id, env_name, delta, scene),
                                   *idempotency.report_codec(env_name))

    def wait_for_updates(self, timeout: float | None = None) -> bool:
        """Block until the background world updates are merged and their records searchable
        (``search_world``); False if ``timeout`` ran out first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.world.wait(timeout):
            return False
        return self.world_search.wait(seconds_left(deadline))

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
        return environments.world_graph(self.store, tenant_id, env_name)

    def export(self, tenant_id: str, env_name: str, out_dir: str | Path, progress: Progress | None = None) -> Path:
        """Write the five canonical files under ``out_dir/<tenant>/<app>/world_model_graph/<env>/``."""
        return export_environment(self.store, tenant_id, env_name, Path(out_dir), self.config.app_name, progress)

    def import_snapshot(self, tenant_id: str, path: str | Path, env_name: str | None = None,
                        progress: Progress | None = None) -> dict[str, Any]:
        """Load a snapshot (replaces that environment's graph): the folder ``export`` returned, or
        the ``out_dir`` given to it (``env_name`` picks one when it holds several)."""
        self._writable("import_snapshot")
        loaded = import_environment(self.store, tenant_id, Path(path), env_name, progress)
        self.world_search.replaced(tenant_id, str(loaded["env_name"]))
        return loaded

    def search_world(self, tenant_id: str, query: str, env_name: str | None = None, k: int = 10,
                     as_of: Any = None) -> list[WorldHit]:
        """Hybrid search (vector + BM25, fused as recall is) over the world's entities, states, facts
        (every edge as a sentence) and rules, current facts first (docs/architecture.md, "World
        search"): ``wm.search_world("acme", "where is the brass key?", env_name="kitchen", k=5)``.
        ``env_name``: one environment (None: every one of the tenant's); ``k``: 1 to 100; ``as_of``:
        a past moment (datetime or ISO-8601) whose valid records rank first. Each ``WorldHit`` says
        whether it is current or closed (read from the store now), its confidence, evidence, source
        scenes and at most 10 current facts around it. InvalidInputError names a bad argument,
        NotFoundError an environment the tenant does not have."""
        check_tenant(tenant_id)
        return self.world_search.search(tenant_id, query, env_name, k, as_of)

    def context(self, tenant_id: str, query: str, agent_role: str | None = None, env_name: str | None = None,
                max_tokens: int = 1500) -> WorldContext:
        """One prompt-ready block: the relevant current facts and rules first, then the most relevant
        past episodes (of ``agent_role``) in compact form, within ``max_tokens`` (the embedder's
        tokenizer), every line citing its record's id: ``prompt = f"{wm.context('acme', q)}\\n{q}"``.
        ``str(ctx)`` is ``ctx.text``; ``ctx.citations`` the records cited, whole ids."""
        check_tenant(tenant_id)
        reading.check_recall(self.config, query, agent_role, None)
        return self.world_search.context(tenant_id, query, agent_role, env_name, max_tokens, self.index)

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
        self.purges.check()  # a purge by another process: its projections go first (facade/generations.py)
        return self.store.cypher(tenant_id, query, params)
