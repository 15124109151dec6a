"""Scene leases of the embedded store (``worldgraph.kg.lease``): each call is one ``BEGIN
IMMEDIATE`` transaction, which holds SQLite's write lock from its first statement, so claims,
renewals, releases and fenced merges of a scene never interleave, across threads and processes."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from worldgraph.errors import LeaseLostError
from worldgraph.kg import lease
from worldgraph.kg.codec import loads
from worldgraph.kg.records import SceneRecord

__all__ = ["SqliteSceneLeases"]


class SqliteSceneLeases(lease.HeldLeases):
    """Mixin of EmbeddedGraphStore: needs ``_tx`` and ``_upsert_scene``."""

    _tx: Callable[[], AbstractContextManager[sqlite3.Cursor]]
    _upsert_scene: Callable[[sqlite3.Cursor, SceneRecord], None]

    def claim_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str,
                          now: str) -> SceneRecord | None:
        with self._tx() as cur:
            scene = _scene(cur, tenant_id, scene_id)
            if scene is None or not lease.claimable(scene, now):
                return None
            taken = lease.leased(scene, owner, until, now)
            self._upsert_scene(cur, taken)
            return taken

    def _if_held(self, tenant_id: str, scene_id: str, owner: str,
                 change: Callable[[SceneRecord], SceneRecord]) -> bool:
        """Write ``change(scene)`` if ``owner`` holds the scene's lease, in one transaction."""
        with self._tx() as cur:
            scene = _scene(cur, tenant_id, scene_id)
            if scene is None or not lease.holds(scene, owner):
                return False
            self._upsert_scene(cur, change(scene))
            return True


def check_fence(cur: sqlite3.Cursor, tenant_id: str, fence: tuple[str, str] | None) -> None:
    """Inside a merge's transaction: raise LeaseLostError unless the fenced scene is still held."""
    if fence is None:
        return
    scene_id, owner = fence
    if not lease.holds(_scene(cur, tenant_id, scene_id), owner):
        raise LeaseLostError(f"scene {scene_id}: the lease of {owner} ran out and the packet was taken over "
                             "(or released); this merge was not written")


def _scene(cur: sqlite3.Cursor, tenant_id: str, scene_id: str) -> SceneRecord | None:
    row: Any = cur.execute("SELECT data FROM scenes WHERE tenant_id = ? AND id = ?", (tenant_id, scene_id)).fetchone()
    return loads(row[0]) if row else None
