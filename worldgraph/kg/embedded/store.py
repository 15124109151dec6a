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
import time
from pathlib import Path
from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import NotFoundError, StorageError
from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.composed import ComposedStore
from worldgraph.kg.embedded import cypher as embedded_cypher
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.connection import SCHEMA_VERSION, SqliteConnection
from worldgraph.kg.embedded.cypher import ProjectionCache
from worldgraph.kg.embedded.cypher.build import CHILD_MIN_EPISODES, build_in_child
from worldgraph.kg.embedded.cypher.saved import SavedProjections, folder_for
from worldgraph.kg.embedded.episodes import SqliteEpisodes
from worldgraph.kg.embedded.leases import SqliteSceneLeases
from worldgraph.kg.embedded.lifecycle import SqliteLifecycle
from worldgraph.kg.embedded.world import SqliteWorld
from worldgraph.kg.store import Record

__all__ = ["EmbeddedGraphStore", "SCHEMA_VERSION"]

log = logging.getLogger("worldgraph")

# A tenant's projection is saved beside the SQLite file (embedded.cypher.saved) from this many
# episodes + world nodes + world edges: below, building it in memory takes ~0.1 s, less than
# creating, syncing and reopening a file.
SAVE_MIN_ROWS = 5_000
# From this many episodes, a query that reaches only the world part (embedded.cypher.world_only:
# rules, containment, transitions, scenes) is answered from a projection of the world part alone
# (100k episodes and a 10k-node world: ~1.4 s instead of ~3 s to build; saved, and reopened while
# the world part is unchanged), unless a current full one is saved; the first query that needs
# more builds the full projection and replaces it.
WORLD_ONLY_MIN_EPISODES = 5_000

# the counts of ``stats``: key -> table
_STATS = {"episodes": "episodes", "agents": "agents", "feedback": "feedback", "canvases": "canvases",
          "canvas_audits": "canvas_audits", "scenes": "scenes", "nodes": "world_nodes", "edges": "world_edges",
          "rules": "world_rules"}


class EmbeddedGraphStore(ComposedStore):
    """SQLite-backed GraphStore; safe across threads (one lock) and processes (SQLite locks)."""

    name = "embedded"

    def __init__(self, path: str | Path, read_only: bool = False, cache_mb: int | None = None,
                 wal_autocheckpoint_pages: int | None = None, cypher_timeout: float | None = None,
                 cypher_max_rows: int | None = None, cypher_max_result_bytes: int | None = None) -> None:
        """``cache_mb``, ``wal_autocheckpoint_pages``, ``cypher_timeout``, ``cypher_max_rows`` and
        ``cypher_max_result_bytes``: see
        the config fields ``sqlite_*`` and ``cypher_*``, whose defaults apply when they are None (one
        place for the numbers)."""
        fields = WorldGraphConfig.model_fields
        self.cypher_timeout = float(cypher_timeout if cypher_timeout is not None
                                    else fields["cypher_timeout_seconds"].default)
        self.cypher_max_rows = int(cypher_max_rows if cypher_max_rows is not None else fields["cypher_max_rows"].default)
        self.cypher_max_result_bytes = int(cypher_max_result_bytes if cypher_max_result_bytes is not None
                                           else fields["cypher_max_result_bytes"].default)
        self.projections = ProjectionCache()
        if cache_mb is None:
            cache_mb = int(fields["sqlite_cache_mb"].default)
        if wal_autocheckpoint_pages is None:
            wal_autocheckpoint_pages = int(fields["sqlite_wal_autocheckpoint_pages"].default)
        self.path = Path(path)
        self.read_only = read_only
        self.db = SqliteConnection(self.path, read_only, cache_mb, wal_autocheckpoint_pages)
        # projections saved beside the SQLite file, reopened in ~0.1 s (none for a read-only store)
        self.saved = SavedProjections(None if read_only else folder_for(self.path))
        self.episodes = SqliteEpisodes(self.db)
        self.world = SqliteWorld(self.db)
        self.leases = SqliteSceneLeases(self.db)
        self.lifecycle = SqliteLifecycle(self.db)

    def tenants(self) -> list[str]:
        return [r[0] for r in self.db.query(sql.TENANTS)]

    def stats(self, tenant_id: str) -> dict[str, int]:
        return {k: self.db.query(sql.count_of_tenant(t), (tenant_id,))[0][0] for k, t in _STATS.items()}

    # ---------------------------------------------------------------- Cypher
    def cypher(self, tenant_id: str, query: str, params: dict[str, Any] | None = None) -> list[Record]:
        """Read-only Cypher on a projection of the caller's tenant alone (``embedded.cypher``),
        rebuilt first when anything was committed since it was built (here or by another process)."""
        embedded_cypher.check_text(query)
        # what the engine cannot run, or must not (a runaway string or list), is refused before a
        # projection is built for it (run() translates again: a few regex passes)
        embedded_cypher.translate(query)
        embedded_cypher.check_abandoned(tenant_id, self.cypher_timeout)  # before a projection is built for it
        full = not embedded_cypher.world_only(query)

        def read(statement: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
            return self.db.conn.execute(statement, args).fetchall()

        def build() -> embedded_cypher.Projection:
            with self.db.lock, self.db.snapshot():
                gens = self.db.version()
                found, scope = self.saved.find(tenant_id, gens), "full"
                if found is None and not full:
                    found, scope = self.saved.find(tenant_id, gens, "world"), "world"
                # the world rows it holds (a world refresh compares them with the rows then): ~70 ms at 20k
                raw = embedded_cypher.read_world_rows(read, tenant_id) if found is not None else None
            if found is not None:  # saved by an earlier open (this process's or another's) and current
                try:
                    proj = embedded_cypher.Projection(tenant_id, found[0], found[1])
                except RuntimeError as exc:  # open elsewhere (LadybugDB's lock), or damaged: built anew
                    log.info("not using the saved Cypher projection %s (%s): building one", found[0], exc)
                else:
                    proj.gens, proj.opened_raw, proj.scope = gens, raw, scope
                    return proj
            episodes, size = self._projection_size(tenant_id)
            if not full and episodes >= WORLD_ONLY_MIN_EPISODES:
                return world_part()
            # a small tenant's projection is built in memory (~0.1 s) and not saved: a file costs more
            path = self.saved.new_path(tenant_id) if size >= SAVE_MIN_ROWS else None
            if path is not None and episodes >= CHILD_MIN_EPISODES:
                try:  # a large tenant: the build's memory goes with the child (cypher/build.py)
                    gens, kinds = build_in_child(self.path, tenant_id, path)
                    proj = embedded_cypher.Projection(tenant_id, path, kinds)
                except (RuntimeError, OSError, ValueError, KeyError) as exc:
                    log.warning("building the Cypher projection in a child process failed (%s); building it in "
                                "this one", exc)
                    self.saved.remove_file(path)
                    path = self.saved.new_path(tenant_id)
                else:
                    with self.db.lock, self.db.snapshot():  # its world rows, unless written since
                        if self.db.version() == gens:
                            proj.opened_raw = embedded_cypher.read_world_rows(read, tenant_id)
                    proj.gens = gens
                    self.saved.save(tenant_id, path, gens, proj.kinds)
                    return proj
            return fill(path)

        def fill(path: Path | None) -> embedded_cypher.Projection:
            with self.db.lock, self.db.snapshot():
                gens = self.db.version()
                nodes, rels, episodes, world = embedded_cypher.load_tenant(read, tenant_id)
            try:
                proj = embedded_cypher.Projection(tenant_id, path)
                try:
                    proj.fill(nodes, rels, episodes, world)
                except BaseException:
                    proj.close()
                    raise
            except RuntimeError as exc:
                if path is None:
                    raise
                # the data folder's disk is full, say: this query is answered from memory instead
                log.warning("could not build the Cypher projection in %s (%s); building it in memory", path, exc)
                self.saved.remove_file(path)
                return fill(None)
            proj.gens = gens
            self.saved.save(tenant_id, proj.path, gens, proj.kinds)
            return proj

        def world_part() -> embedded_cypher.Projection:
            # LadybugDB fills each table with ~15-40 MB of buffers whatever its rows (the world part
            # alone: ~220 MB): built in a child process and saved (scope "world"), when the store
            # has a folder for one
            path = self.saved.new_path(tenant_id, "world")
            if path is not None:
                try:
                    gens, kinds = build_in_child(self.path, tenant_id, path, world_only=True)
                    proj = embedded_cypher.Projection(tenant_id, path, kinds)
                except (RuntimeError, OSError, ValueError, KeyError) as exc:
                    log.warning("building the world part's Cypher projection in a child process failed (%s); "
                                "building it in this one", exc)
                    self.saved.remove_file(path)
                else:
                    proj.scope, proj.gens = "world", gens
                    with self.db.lock, self.db.snapshot():  # its world rows, unless written since
                        if self.db.version()[1] == gens[1]:
                            proj.opened_raw = embedded_cypher.read_world_rows(read, tenant_id)
                    keep(proj)
                    return proj
            with self.db.lock, self.db.snapshot():
                gens = self.db.version()
                raw = embedded_cypher.read_world_rows(read, tenant_id)
            proj = embedded_cypher.Projection(tenant_id)
            proj.scope = "world"
            try:
                proj.fill({}, {}, set(), embedded_cypher.load_world_part(raw, tenant_id, set()))
            except BaseException:
                proj.close()
                raise
            proj.gens = gens
            return proj

        def keep(proj: embedded_cypher.Projection) -> None:
            """Name the projection's file the tenant's saved one of its scope, at the generations it holds now."""
            self.saved.save(tenant_id, proj.path, proj.gens, proj.kinds, proj.scope)

        def held_episodes(proj: embedded_cypher.Projection) -> set[str]:
            """The episode ids the world part's (:Scene)-[:FROM_EPISODE]->(:Episode) may end at."""
            if proj.scope == "world":
                return set()
            return proj.episodes if proj.episodes is not None else episode_ids()

        def episode_ids() -> set[str]:
            return {eid for (eid,) in read(sql.PROJECTION_EPISODE_IDS, (tenant_id,))}

        def read_edges(env: str, ids: list[str]) -> list[tuple[str, str]]:
            return read(sql.edges_touching(len(ids)), (tenant_id, env, *ids, *ids))

        def refresh(proj: embedded_cypher.Projection) -> bool:
            # The episode part row by row (embedded.cypher.episodes; False: rebuilt instead); then
            # the world part: the rows a world write changed (and the links touching them) one by
            # one; anything else (scenes, a new environment, a large import) reloads the world part
            with self.db.lock, self.db.snapshot():
                gens = self.db.version()
                if gens[0] != proj.gens[0]:  # (the world part alone holds nothing of the episode part)
                    if proj.scope == "full" and not embedded_cypher.update_episodes(proj, read, tenant_id):
                        return False
                    proj.gens = (gens[0], proj.gens[1])
                if gens[1] == proj.gens[1]:
                    keep(proj)
                    return True
                if proj.world is None and proj.opened_raw is not None:  # opened from its file
                    ids = held_episodes(proj)
                    proj.know_world(embedded_cypher.load_world_part(proj.opened_raw, tenant_id, ids), ids)
                if proj.world is not None:
                    touched = self.db.world_touched(tenant_id, proj.gens[1][0], gens[1][0])
                    raw = (embedded_cypher.read_world_rows(read, tenant_id) if touched is None
                           else embedded_cypher.read_world_keys(read, tenant_id, proj.world.raw, touched))
                    if proj.update_world(raw, read_edges):
                        proj.gens = (proj.gens[0], gens[1])
                        keep(proj)
                        return True
                episodes = held_episodes(proj)
                world = embedded_cypher.load_world_part(embedded_cypher.read_world_rows(read, tenant_id), tenant_id,
                                                        episodes)
            proj.replace_world(world, episodes)
            proj.gens = (proj.gens[0], gens[1])
            keep(proj)
            return True
        # One deadline for the query, from when its first projection is ready (building one is not
        # bounded by it), retries on a fresh projection included: embedded_cypher.run ends at most
        # GRACE seconds past it.
        deadline: float | None = None
        for _ in range(3):
            # the generations move with every commit that wrote a part, by any process (a world
            # delta refreshes only the world part)
            version = self.db.version()
            proj = self.projections.get(tenant_id, version, build, refresh,
                                        serves=lambda p: not full or p.scope == "full")
            if deadline is None:
                deadline = time.monotonic() + self.cypher_timeout
            try:
                return embedded_cypher.run(proj, tenant_id, query, params, timeout=self.cypher_timeout,
                                           max_rows=self.cypher_max_rows, max_bytes=self.cypher_max_result_bytes,
                                           deadline=deadline)
            except embedded_cypher.ProjectionClosed:  # replaced, or abandoned by a query past its deadline
                continue
        raise StorageError("the Cypher projection kept being replaced by concurrent writes; try the query again")

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

    def _projection_size(self, tenant_id: str) -> tuple[int, int]:
        """(the tenant's episodes, its episodes + world nodes + world edges): what a projection holds."""
        episodes, nodes, edges = (self.db.query(sql.count_of_tenant(t), (tenant_id,))[0][0]
                                  for t in ("episodes", "world_nodes", "world_edges"))
        return episodes, episodes + nodes + edges

    # ---------------------------------------------------------------- forgetting
    def purge_files(self) -> Record:
        """The lifecycle's purge, after the saved Cypher projections of the tenants that forgot
        something are deleted (they hold the forgotten records; the next query rebuilds them)."""
        for tenant_id in {a["tenant_id"] for a in self.lifecycle.forget_log(unpurged=True)}:
            self.projections.drop(tenant_id)
            self.saved.remove(tenant_id)
        return self.lifecycle.purge_files()

    def close(self) -> None:
        self.projections.close()
        self.db.close()
