"""Scene leases of the Neo4j store (``worldgraph.kg.lease``). Each call is one write transaction
that first takes the scene node's write lock (``LOCK_SCENE``, the documented way to avoid lost
updates), then reads and writes it: claims, renewals, releases and fenced merges of one scene never
interleave, whichever server process runs them."""

from __future__ import annotations

import json
from collections.abc import Callable

from neo4j import ManagedTransaction

from worldgraph.errors import LeaseLostError
from worldgraph.kg import lease
from worldgraph.kg.codec import dumps
from worldgraph.kg.neo4j import queries as q
from worldgraph.kg.neo4j.connection import Neo4jConnection
from worldgraph.kg.records import SceneRecord

__all__ = ["Neo4jSceneLeases", "check_fence"]


class Neo4jSceneLeases(lease.HeldLeases):
    """The scene-lease methods of Neo4jGraphStore, on ``db`` (renewal and release come from
    ``lease.HeldLeases`` through ``_if_held``)."""

    def __init__(self, db: Neo4jConnection) -> None:
        self.db = db

    def claim_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str,
                          now: str) -> SceneRecord | None:
        def work(tx: ManagedTransaction) -> SceneRecord | None:
            scene = _locked(tx, tenant_id, scene_id)
            if scene is None or not lease.claimable(scene, now):
                _unlock(tx, tenant_id, scene_id, scene)
                return None
            return _store(tx, tenant_id, lease.leased(scene, owner, until, now))
        return self.db.write(work)

    def _if_held(self, tenant_id: str, scene_id: str, owner: str,
                 change: Callable[[SceneRecord], SceneRecord]) -> bool:
        """Write ``change(scene)`` if ``owner`` holds the scene's lease, in one transaction."""
        def work(tx: ManagedTransaction) -> bool:
            scene = _locked(tx, tenant_id, scene_id)
            if scene is None or not lease.holds(scene, owner):
                _unlock(tx, tenant_id, scene_id, scene)
                return False
            _store(tx, tenant_id, change(scene))
            return True
        return bool(self.db.write(work))


def check_fence(tx: ManagedTransaction, tenant_id: str, fence: tuple[str, str] | None) -> None:
    """Inside a merge's transaction: lock the fenced scene (held to the commit) and raise
    LeaseLostError, which rolls the transaction back, unless ``owner`` still holds it."""
    if fence is None:
        return
    scene_id, owner = fence
    scene = _locked(tx, tenant_id, scene_id)
    _unlock(tx, tenant_id, scene_id, scene)  # the lock itself lasts until the transaction ends
    if not lease.holds(scene, owner):
        raise LeaseLostError(f"scene {scene_id}: the lease of {owner} ran out and the packet was taken over "
                             "(or released); this merge was not written")


def _locked(tx: ManagedTransaction, tenant_id: str, scene_id: str) -> SceneRecord | None:
    row = tx.run(q.LOCK_SCENE, tenant_id=tenant_id, id=scene_id).single()
    if row is None or row["record"] is None:
        return None
    scene: SceneRecord = json.loads(row["record"])
    scene["status"] = row["status"]
    return scene


def _unlock(tx: ManagedTransaction, tenant_id: str, scene_id: str, scene: SceneRecord | None) -> None:
    if scene is not None:
        tx.run(q.UNLOCK_SCENE, tenant_id=tenant_id, id=scene_id).consume()


def _store(tx: ManagedTransaction, tenant_id: str, scene: SceneRecord) -> SceneRecord:
    tx.run(q.WRITE_SCENE_STATE, tenant_id=tenant_id, id=scene["id"], status=scene["status"],
           record=dumps(scene)).consume()
    return scene
