"""Scene leases of the embedded store (``worldgraph.kg.lease``): each call is one ``BEGIN
IMMEDIATE`` transaction, which holds SQLite's write lock from its first statement, so claims,
renewals, releases and fenced merges of a scene never interleave, across threads and processes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from worldgraph.errors import LeaseLostError
from worldgraph.kg import lease
from worldgraph.kg.embedded.connection import SqliteConnection
from worldgraph.kg.embedded.scenes import read_scene, write_scene
from worldgraph.kg.records import SceneRecord

__all__ = ["SqliteSceneLeases", "check_fence"]


class SqliteSceneLeases(lease.HeldLeases):
    """The scene-lease methods of EmbeddedGraphStore, on ``db`` (renewal and release come from
    ``lease.HeldLeases`` through ``_if_held``)."""

    def __init__(self, db: SqliteConnection) -> None:
        self.db = db

    def claim_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str,
                          now: str) -> SceneRecord | None:
        with self.db.transaction() as cur:
            scene = read_scene(cur, tenant_id, scene_id)
            if scene is None or not lease.claimable(scene, now):
                return None
            taken = lease.leased(scene, owner, until, now)
            write_scene(cur, taken)
            return taken

    def _if_held(self, tenant_id: str, scene_id: str, owner: str,
                 change: Callable[[SceneRecord], SceneRecord]) -> bool:
        """Write ``change(scene)`` if ``owner`` holds the scene's lease, in one transaction."""
        with self.db.transaction() as cur:
            scene = read_scene(cur, tenant_id, scene_id)
            if scene is None or not lease.holds(scene, owner):
                return False
            write_scene(cur, change(scene))
            return True


def check_fence(cur: sqlite3.Cursor, tenant_id: str, fence: tuple[str, str] | None) -> None:
    """Inside a merge's transaction: raise LeaseLostError unless the fenced scene is still held."""
    if fence is None:
        return
    scene_id, owner = fence
    if not lease.holds(read_scene(cur, tenant_id, scene_id), owner):
        raise LeaseLostError(f"scene {scene_id}: the lease of {owner} ran out and the packet was taken over "
                             "(or released); this merge was not written")
