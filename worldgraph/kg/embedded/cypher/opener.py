"""How the embedded store gets the projection one query runs on: a saved one reopened while
current, or one built (in a temporary file, a saved file, or in a child process, by size), and a kept one
brought up to date after writes. ``EmbeddedGraphStore.cypher`` hands an ``Opener``'s ``build``,
``refresh`` and ``serves`` to the projection cache (``cache``).

What decides what:

- A current saved projection (``saved``) is reopened (~0.13 s at 100k episodes); a query that
  reaches only the world part (``reach.world_only``) may reopen the tenant's saved world part
  alone, current while the world part's generation matches.
- Otherwise, from ``WORLD_ONLY_MIN_EPISODES`` episodes, such a query gets a projection of the
  world part alone, built in a child process and saved (``scope`` "world"); the cache replaces
  it with the full projection for the first query that needs more (``serves``).
- A full projection of fewer than ``SAVE_MIN_ROWS`` episodes + world nodes + world edges is
  built in the store's private temporary folder (``saved.Scratch``) and not saved (so is every
  projection of a read-only store); a larger one into a file that is saved; from
  ``CHILD_MIN_EPISODES`` episodes in a child process (``build``), whose memory goes with it.
  A failed child, or a file that cannot be written (a full disk), falls back to building in
  this process, in the temporary folder at last.
- ``refresh``: the episode part row by row (``episodes``; False: built anew), then the world
  rows a world write changed one by one, or else the world part reloaded. Every write happens
  in ``Projection.writing``: the file is written in place when no query child holds it, else a
  copy is written and named current, and the children on the old file are replaced (``ChildPool.pause``
  before a write, ``ChildPool.retire`` after a copy).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worldgraph.errors import CypherQueryError
from worldgraph.kg.embedded import sql
from worldgraph.kg.embedded.cypher.build import CHILD_MIN_EPISODES, build_in_child
from worldgraph.kg.embedded.cypher.episodes import update_episodes
from worldgraph.kg.embedded.cypher.load import load_tenant, load_world_part, read_world_keys, read_world_rows
from worldgraph.kg.embedded.cypher.projection import Projection
from worldgraph.kg.embedded.cypher.saved import SavedProjections, Scratch
from worldgraph.kg.embedded.cypher.worldpart import update_world

if TYPE_CHECKING:
    from worldgraph.kg.embedded.connection import SqliteConnection

log = logging.getLogger("worldgraph")

# A tenant's projection is saved beside the SQLite file (saved) from this many episodes + world
# nodes + world edges: below, building it anew takes ~0.1 s, less than syncing and reopening a file.
SAVE_MIN_ROWS = 5_000
# From this many episodes, a query that reaches only the world part (reach.world_only: rules,
# containment, transitions, scenes) is answered from a projection of the world part alone (100k
# episodes and a 10k-node world: ~1.4 s instead of ~3 s to build; saved, and reopened while the
# world part is unchanged), unless a current full one is saved.
WORLD_ONLY_MIN_EPISODES = 5_000


class Opener:
    """The projection of ``tenant_id`` for one query; ``full`` False: the query reaches only the
    world part (``reach.world_only``)."""

    def __init__(self, db: SqliteConnection, saved: SavedProjections, sqlite_path: Path, tenant_id: str,
                 full: bool, scratch: Scratch, pause: Callable[[Path], int], retire: Callable[[Path], int]) -> None:
        """``scratch``: where projections that are not saved are built; ``pause``: lets this
        process's query children on a file about to be written let go of it (``ChildPool.pause``);
        ``retire``: ends those on a file replaced by a copy (``ChildPool.retire``)."""
        self.db = db
        self.saved = saved
        self.sqlite_path = sqlite_path
        self.tenant_id = tenant_id
        self.full = full
        self.scratch = scratch
        self.pause = pause
        self.retire = retire

    def _copy_path(self, proj: Projection) -> Path:
        """Where a copy of ``proj``'s file is written when children still hold it."""
        saved = self.saved.new_path(self.tenant_id, proj.scope) if self.saved.holds(proj.path) else None
        return saved or self.scratch.new_path(self.tenant_id)

    def read(self, statement: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return self.db.conn.execute(statement, args).fetchall()

    def serves(self, proj: Projection) -> bool:
        """Whether ``proj`` holds every table the query may reach."""
        return not self.full or proj.scope == "full"

    # ------------------------------------------------------------------ building
    def build(self) -> Projection:
        t = self.tenant_id
        with self.db.lock, self.db.snapshot():
            gens = self.db.version()
            # current, or else behind (written since, by any process: brought up to date below);
            # the world part alone only for a query that reaches nothing else, and before a full
            # one that is behind (it has less to compare)
            found, scope = None, "full"
            for scope, behind in [("full", False), *([("world", False), ("world", True)] if not self.full else []),
                                  ("full", True)]:
                found = self.saved.find(t, gens, scope, behind=behind)
                if found is not None:
                    break
            # the world rows it holds, when its world part is current (a world refresh compares them
            # with the rows then): ~70 ms at 20k
            raw = read_world_rows(self.read, t) if found is not None and found[2][1] == gens[1] else None
        if found is not None:  # saved by an earlier open (this process's or another's)
            proj = Projection(t, found[0], found[1], writer=False)
            proj.opened_raw, proj.scope = raw, scope
            # (the world part alone holds nothing of the episode part: its generation is moot)
            proj.gens = (gens[0], found[2][1]) if scope == "world" else found[2]
            if proj.gens == gens:
                return proj
            proj.episodes_unverified = proj.gens[0] != gens[0]
            old = proj.path
            try:
                with proj.writing(self.pause, lambda: self._copy_path(proj)):
                    if proj.gens[1] != gens[1]:  # the rows it holds are read from it, not from the store
                        proj.world_unverified = True
                        held, ids = proj.held_world_rows()
                        proj.know_world(load_world_part(held, t, ids), ids)
                    fresh = self._refresh(proj, reload_world=False)  # row by row (``episodes``, ``update_world``)
            except (RuntimeError, CypherQueryError, KeyError, TypeError, ValueError, OSError) as exc:
                # open elsewhere for writing (LadybugDB's lock), or damaged: built anew
                log.info("not using the saved Cypher projection %s (%s): building one", found[0], exc)
                fresh = False
            self._moved(old, proj)
            if fresh:
                self._keep(proj)
                return proj
            proj.close()  # too many changes since, or another history's: built anew
        return self._build_new()

    def _build_new(self) -> Projection:
        t = self.tenant_id
        episodes, size = self._size()
        if not self.full and episodes >= WORLD_ONLY_MIN_EPISODES:
            return self._world_part()
        # a small tenant's projection is built in the temporary folder (~0.1 s) and not saved
        path = (self.saved.new_path(t) if size >= SAVE_MIN_ROWS else None) or self.scratch.new_path(t)
        if episodes >= CHILD_MIN_EPISODES:
            # a large tenant: the build's memory goes with the child (cypher/build.py)
            built = self._in_child(path, "full")
            if built is not None:
                return built
            path = (self.saved.new_path(t) if size >= SAVE_MIN_ROWS else None) or self.scratch.new_path(t)
        return self._fill(path)

    def _in_child(self, path: Path, scope: str) -> Projection | None:
        """The projection of ``scope`` a child process built at ``path``, opened and saved; None
        (the file removed) when the child failed: the caller builds it in this process."""
        t = self.tenant_id
        try:
            gens, kinds = build_in_child(self.sqlite_path, t, path, world_only=scope == "world")
            proj = Projection(t, path, kinds, writer=False)
        except (RuntimeError, OSError, ValueError, KeyError) as exc:
            log.warning("building the Cypher projection (%s) in a child process failed (%s); building it in "
                        "this one", scope, exc)
            self.saved.remove_file(path)
            return None
        proj.scope, proj.gens = scope, gens
        with self.db.lock, self.db.snapshot():  # its world rows, unless the world was written since
            if self.db.version()[1] == gens[1]:
                proj.opened_raw = read_world_rows(self.read, t)
        self._keep(proj)
        return proj

    def _fill(self, path: Path) -> Projection:
        t = self.tenant_id
        with self.db.lock, self.db.snapshot():
            gens = self.db.version()
            nodes, rels, episodes, world = load_tenant(self.read, t)
        try:
            proj = Projection(t, path)
            try:
                proj.fill(nodes, rels, episodes, world)
            except BaseException:
                proj.close()
                raise
        except RuntimeError as exc:
            self.saved.remove_file(path)
            self.scratch.remove(path)
            if self.scratch.holds(path, spill=True) or not (self.saved.holds(path) or self.scratch.holds(path)):
                raise
            # the data folder's disk is full, say: this query is answered from the system's temporary folder
            log.warning("could not build the Cypher projection in %s (%s); building it in a temporary folder",
                        path, exc)
            return self._fill(self.scratch.new_path(t, spill=True))
        proj.gens = gens
        self._keep(proj)
        return proj

    def _world_part(self) -> Projection:
        # LadybugDB fills each table with ~15-40 MB of buffers whatever its rows (the world part
        # alone: ~220 MB): built in a child process and saved (scope "world"), when the store has
        # a folder for one
        t = self.tenant_id
        path = self.saved.new_path(t, "world")
        built = self._in_child(path, "world") if path is not None else None
        if built is not None:
            return built
        with self.db.lock, self.db.snapshot():
            gens = self.db.version()
            raw = read_world_rows(self.read, t)
        proj = Projection(t, self.scratch.new_path(t))
        proj.scope = "world"
        try:
            proj.fill({}, {}, set(), load_world_part(raw, t, set()))
        except BaseException:
            proj.close()
            raise
        proj.gens = gens
        return proj

    def _size(self) -> tuple[int, int]:
        """(the tenant's episodes, its episodes + world nodes + world edges): what a projection holds."""
        episodes, nodes, edges = (self.db.query(sql.count_of_tenant(table), (self.tenant_id,))[0][0]
                                  for table in ("episodes", "world_nodes", "world_edges"))
        return episodes, episodes + nodes + edges

    def _keep(self, proj: Projection) -> None:
        """Name the projection's file the tenant's saved one of its scope, at the generations it holds now."""
        self.saved.save(self.tenant_id, proj.path, proj.gens, proj.kinds, proj.scope)

    # ------------------------------------------------------------------ refreshing
    def _episode_ids(self) -> set[str]:
        return {eid for (eid,) in self.read(sql.PROJECTION_EPISODE_IDS, (self.tenant_id,))}

    def _held_episodes(self, proj: Projection) -> set[str]:
        """The episode ids the world part's (:Scene)-[:FROM_EPISODE]->(:Episode) may end at."""
        if proj.scope == "world":
            return set()
        return proj.episodes if proj.episodes is not None else self._episode_ids()

    def _read_edges(self, env: str, ids: list[str]) -> list[tuple[str, str]]:
        return self.read(sql.edges_touching(len(ids)), (self.tenant_id, env, *ids, *ids))

    def refresh(self, proj: Projection) -> bool:
        """Bring ``proj`` to the store's generations (``_refresh``), writing it in
        ``Projection.writing``; False when it cannot be, row by row (the cache then builds a new
        one)."""
        gens = self.db.version()
        if proj.scope == "world" and gens[1] == proj.gens[1]:  # nothing of its own moved
            proj.gens = (gens[0], proj.gens[1])
            self._keep(proj)
            return True
        old = proj.path
        with proj.writing(self.pause, lambda: self._copy_path(proj)):
            fresh = self._refresh(proj)
        self._moved(old, proj)
        if fresh:
            self._keep(proj)
        return fresh

    def _moved(self, old: Path, proj: Projection) -> None:
        """After a write: a copy was written instead of ``old`` (children held it), so the children
        still on ``old`` end with their query, and a temporary ``old`` is deleted (a saved one
        goes when the copy is saved)."""
        if proj.path != old:
            self.retire(old)
            self.scratch.remove(old)

    def _refresh(self, proj: Projection, reload_world: bool = True) -> bool:
        """The episode part row by row (``episodes``); then the world part: the rows a world write
        changed (and the links touching them) one by one; anything else (scenes, a new
        environment, a large import) reloads the world part (``reload_world`` False: returns
        False instead). ``proj`` is open for writing."""
        t = self.tenant_id
        with self.db.lock, self.db.snapshot():
            gens = self.db.version()
            if gens[0] != proj.gens[0]:  # (the world part alone holds nothing of the episode part)
                if proj.scope == "full" and not update_episodes(proj, self.read, t):
                    return False
                proj.gens = (gens[0], proj.gens[1])
            if gens[1] == proj.gens[1]:
                return True
            if proj.world is None and proj.opened_raw is not None:  # opened from its file
                ids = self._held_episodes(proj)
                proj.know_world(load_world_part(proj.opened_raw, t, ids), ids)
            if proj.world is not None:
                # (a reopened file's world part is compared with all rows: this connection's log
                # of world writes says nothing of the history that file was written in)
                touched = None if proj.world_unverified else self.db.world_touched(t, proj.gens[1][0], gens[1][0])
                raw = (read_world_rows(self.read, t) if touched is None
                       else read_world_keys(self.read, t, proj.world.raw, touched))
                if update_world(proj, raw, self._read_edges):
                    proj.gens, proj.world_unverified = (proj.gens[0], gens[1]), False
                    return True
            if not reload_world:
                return False
            episodes = self._held_episodes(proj)
            world = load_world_part(read_world_rows(self.read, t), t, episodes)
        proj.replace_world(world, episodes)
        proj.gens = (proj.gens[0], gens[1])
        return True
