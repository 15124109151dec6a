"""Leases on scene packets: who is extracting a packet, and until when (pure; both stores use it).

The scenes table is the durable queue of world updates. A worker that takes a packet moves it to
"running" with a lease (``lease_owner``, ``lease_until`` in the scene record) and renews the lease
while the LLM works (``worker_lease_seconds``; renewed every third of it). Another worker may take a
packet only when it is pending or failed, or running under a lease that ran out (its holder died:
``kill -9``, a lost machine), so recovery takes seconds and a slow but live holder is never run
twice. The merge that ends a packet checks, in its own transaction, that the lease is still the
merger's (``GraphStore.merge(..., fence=(scene_id, owner))``): a holder that lost its lease (paused
longer than the lease) cannot merge a packet someone else took over.

Times are ISO-8601 UTC strings with microseconds (``now_iso``): they compare as text. The holders'
clocks should agree to well within the lease (NTP does).
"""

from __future__ import annotations

import copy
import os
import socket
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from worldgraph.clock import utcnow
from worldgraph.kg.records import SceneRecord

__all__ = ["HeldLeases", "CLAIMABLE", "claimable", "holds", "leased", "released", "new_owner", "iso_after", "LEASE_KEYS"]

CLAIMABLE = ("pending", "failed")
LEASE_KEYS = ("lease_owner", "lease_until")


def iso_after(seconds: float, now: datetime | None = None) -> str:
    """The ISO time ``seconds`` after ``now`` (default: the current time, UTC)."""
    base = now or utcnow()
    return (base + timedelta(seconds=seconds)).isoformat(timespec="microseconds")


def new_owner() -> str:
    """A lease owner id: host and pid for the operator reading a stuck packet, and a unique part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def claimable(scene: SceneRecord, now: str) -> bool:
    """Whether a worker may take ``scene`` at ``now``: pending or failed, or running under a lease
    that ran out. A running packet without a lease (taken by a version without leases) is left to
    ``world retry --stale-minutes``."""
    status = scene.get("status")
    if status in CLAIMABLE:
        return True
    until = scene.get("lease_until")
    return status == "running" and isinstance(until, str) and until < now


def holds(scene: SceneRecord | None, owner: str) -> bool:
    """Whether ``owner`` holds ``scene``'s lease (it is running under that owner's lease)."""
    return scene is not None and scene.get("status") == "running" and scene.get("lease_owner") == owner


def leased(scene: SceneRecord, owner: str, until: str, now: str) -> SceneRecord:
    """``scene`` running under ``owner``'s lease until ``until`` (a copy)."""
    out: SceneRecord = copy.deepcopy(scene)
    out["status"] = "running"
    out["lease_owner"] = owner  # type: ignore[typeddict-unknown-key]
    out["lease_until"] = until  # type: ignore[typeddict-unknown-key]
    out["updated_at"] = now
    return out


class HeldLeases:
    """Renewal and release, for a store that writes ``change(scene)`` while ``owner`` holds it."""

    def _if_held(self, tenant_id: str, scene_id: str, owner: str,
                 change: Callable[[SceneRecord], SceneRecord]) -> bool:
        raise NotImplementedError

    def renew_scene_lease(self, tenant_id: str, scene_id: str, owner: str, until: str, now: str) -> bool:
        return self._if_held(tenant_id, scene_id, owner, lambda s: leased(s, owner, until, now))

    def release_scene_lease(self, tenant_id: str, scene_id: str, owner: str, status: str, error: str | None,
                            now: str) -> bool:
        return self._if_held(tenant_id, scene_id, owner, lambda s: released(s, status, error, now))


def released(scene: SceneRecord, status: str, error: str | None, now: str) -> SceneRecord:
    """``scene`` let go with ``status`` (pending: to be taken again; failed) and no lease (a copy)."""
    out: SceneRecord = copy.deepcopy(scene)
    for key in LEASE_KEYS:
        out.pop(key, None)  # type: ignore[misc]
    out["status"] = status
    out["error"] = error
    out["updated_at"] = now
    return out
