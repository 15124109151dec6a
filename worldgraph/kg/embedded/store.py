"""The embedded graph store: the system of record when no server is running.

One SQLite file in WAL mode (``<data>/worldgraph.db``), opened once by ``embedded.connection``
(transactions, reads, schema). Records are stored as the same JSON dicts the Neo4j store holds,
with the columns that queries filter on copied out beside them; every statement is in
``embedded.sql``.

The store is composed (``kg.composed``): it owns its parts, each built on the one connection:
``episodes`` (``embedded.episodes``, EpisodeStore), ``world`` (``embedded.world``, WorldStore),
``leases`` (``embedded.leases``) and ``lifecycle`` (``embedded.lifecycle``: list, forget, purge).
This module opens them and keeps what spans them: tenants, stats, read-only Cypher on a projection
(``embedded.cypher``), the API keys and close.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import NotFoundError
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.composed import ComposedStore
from worldgraph.kg.cypher_limits import ADMISSION, CypherSettings
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.connection import SCHEMA_VERSION, SqliteConnection
from worldgraph.kg.embedded.cypher.runner import CypherRunner
from worldgraph.kg.embedded.episodes import SqliteEpisodes
from worldgraph.kg.embedded.idempotency import SqliteIdempotency
from worldgraph.kg.embedded.leases import SqliteSceneLeases
from worldgraph.kg.embedded.lifecycle import SqliteLifecycle
from worldgraph.kg.embedded.world import SqliteWorld
from worldgraph.kg.store import Record

__all__ = ["EmbeddedGraphStore", "SCHEMA_VERSION"]

log = logging.getLogger("worldgraph")

# the counts of ``stats``: key -> table
_STATS = {"agents": "agents", "feedback": "feedback", "canvases": "canvases",
          "canvas_audits": "canvas_audits", "scenes": "scenes", "nodes": "world_nodes", "edges": "world_edges",
          "rules": "world_rules"}


class EmbeddedGraphStore(ComposedStore):
    """SQLite-backed GraphStore; safe across threads (one lock) and processes (SQLite locks)."""

    name = "embedded"

    def __init__(self, path: str | Path, read_only: bool = False, cache_mb: int | None = None,
                 wal_autocheckpoint_pages: int | None = None, cypher_timeout: float | None = None,
                 cypher_max_rows: int | None = None, cypher_max_result_bytes: int | None = None,
                 cypher: CypherSettings | None = None) -> None:
        """``cache_mb``, ``wal_autocheckpoint_pages``: see the config fields ``sqlite_*``, whose
        defaults apply when they are None (one place for the numbers); ``cypher``: the ``cypher_*``
        settings (``cypher_timeout``, ``cypher_max_rows``, ``cypher_max_result_bytes`` replace
        theirs)."""
        fields = WorldGraphConfig.model_fields
        base = cypher or CypherSettings()
        self.cypher_settings = CypherSettings(**{
            **base.__dict__, **{k: v for k, v in (("timeout", cypher_timeout), ("max_rows", cypher_max_rows),
                                                 ("max_bytes", cypher_max_result_bytes)) if v is not None}})
        if cache_mb is None:
            cache_mb = int(fields["sqlite_cache_mb"].default)
        if wal_autocheckpoint_pages is None:
            wal_autocheckpoint_pages = int(fields["sqlite_wal_autocheckpoint_pages"].default)
        self.path = Path(path)
        self.read_only = read_only
        self.db = SqliteConnection(self.path, read_only, cache_mb, wal_autocheckpoint_pages)
        # Cypher: projections (saved beside the SQLite file but for a read-only store) and the
        # query children that run the queries on them
        self.cypher_runner = CypherRunner(self.db, self.path, read_only, self.cypher_settings)
        self.projections, self.saved = self.cypher_runner.projections, self.cypher_runner.saved
        self.episodes = SqliteEpisodes(self.db)
        self.world = SqliteWorld(self.db)
        self.leases = SqliteSceneLeases(self.db)
        self.lifecycle = SqliteLifecycle(self.db)
        self.idempotency = SqliteIdempotency(self.db)

    def tenants(self) -> list[str]:
        return [r[0] for r in self.db.query(sql.TENANTS)]

    def stats(self, tenant_id: str) -> dict[str, int]:
        episodes, unindexed = self.db.query(sql.COUNT_EPISODES_INDEXED, (tenant_id,))[0]
        out = {"episodes": episodes}
        out.update({k: self.db.query(sql.count_of_tenant(t), (tenant_id,))[0][0] for k, t in _STATS.items()})
        out["indexed"] = episodes - unindexed
        return out

    # ---------------------------------------------------------------- Cypher
    def cypher(self, tenant_id: str, query: str, params: dict[str, Any] | None = None) -> list[Record]:
        """Read-only Cypher on a projection of the caller's tenant alone, run by a confined query
        child (``embedded.cypher``); at most ``cypher_max_in_flight_per_tenant`` at once."""
        with ADMISSION.admit(tenant_id, self.cypher_settings):
            return self.cypher_runner.run(tenant_id, query, params)

    def cypher_sandbox(self) -> str:
        """How Cypher queries are confined here: "landlock" (the operating system's sandbox) or
        "unsandboxed" (a read-only child without it; docs/cypher.md)."""
        return self.cypher_runner.mode

    # ---------------------------------------------------------------- API keys
    def add_api_key(self, key: Record) -> None:
        with self.db.transaction() as cur:
            cur.execute(sql.INSERT_API_KEY, (key["id"], key["tenant_id"], key["created_at"], dumps(key)))

    def get_api_key(self, key_id: str) -> Record | None:
        rows = self.db.query(sql.GET_API_KEY, (key_id,))
        return loads(rows[0][0]) if rows else None

    def list_api_keys(self, tenant_id: str | None = None) -> list[Record]:
        return [loads(d) for (d,) in self.db.query(sql.LIST_API_KEYS, (tenant_id, tenant_id))]

    def revoke_api_key(self, key_id: str, revoked_at: str) -> Record:
        with self.db.transaction() as cur:
            row = cur.execute(sql.GET_API_KEY, (key_id,)).fetchone()
            if row is None:
                raise NotFoundError("api key", key_id, "`worldgraph keys list` shows the key ids")
            key: Record = loads(row[0])
            if key.get("revoked_at") is None:
                key["revoked_at"] = revoked_at
                cur.execute(sql.UPDATE_API_KEY, (dumps(key), key_id))
        return key

    # ---------------------------------------------------------------- forgetting

    def purge_files(self) -> Record:
        """The lifecycle's purge, after the saved Cypher projections of the tenants that forgot
        something are deleted (they hold the forgotten records; the next query rebuilds them)."""
        for tenant_id in {a["tenant_id"] for a in self.lifecycle.forget_log(unpurged=True)}:
            self.cypher_runner.forget(tenant_id)
        return self.lifecycle.purge_files()

    def release_tenant(self, tenant_id: str) -> None:
        """Let go of the tenant's Cypher projections, in this process and in its query children (a
        purge deleted the saved files they may be open on); the next query opens or builds a
        current one."""
        self.cypher_runner.release(tenant_id)

    def close(self) -> None:
        self.cypher_runner.close()
        if not self.db.read_only and isinstance(self.episodes, SqliteEpisodes):
            try:  # entries of appended batches left in the journal: else the next open re-reads them
                self.episodes.flush_appended()
            except Exception as exc:  # noqa: BLE001 - harmless: the next retry_indexing finds their rows
                log.info("append journal not flushed at close (%s)", exc)
        self.db.close()
