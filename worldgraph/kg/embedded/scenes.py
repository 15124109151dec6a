"""Reading and writing one scene record inside a transaction: what the world part (merges, scene
status) and the lease part (claims, renewals, fences) of the embedded store both do."""

from __future__ import annotations

import sqlite3
from typing import Any

from worldgraph.kg.codec import dumps, loads
from worldgraph.kg.embedded import sql
from worldgraph.kg.records import SceneRecord

__all__ = ["read_scene", "write_scene"]


def read_scene(cur: sqlite3.Cursor, tenant_id: str, scene_id: str) -> SceneRecord | None:
    row: Any = cur.execute(sql.GET_SCENE, (tenant_id, scene_id)).fetchone()
    return loads(row[0]) if row else None


def write_scene(cur: sqlite3.Cursor, scene: SceneRecord) -> None:
    """Insert the scene, or update its status, episode and record."""
    cur.execute(sql.UPSERT_SCENE, (scene["tenant_id"], scene["env_name"], scene["id"], scene["status"],
                                   scene["created_at"], scene.get("episode_id"), dumps(scene)))
