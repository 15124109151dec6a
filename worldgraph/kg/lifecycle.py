"""What both stores share for the memory lifecycle (browse and forget): the episode filter, the
audit record of a forget, and how a forgotten scene leaves a world record's sources."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class EpisodeFilter:
    """list_episodes' filters: since (inclusive) and until (exclusive) as unix seconds."""

    agent_id: str | None = None
    session_id: str | None = None
    since: float | None = None
    until: float | None = None


def iso_of(ts: float | None) -> str | None:
    """Unix seconds as the ISO-8601 UTC text episodes carry."""
    return None if ts is None else datetime.fromtimestamp(float(ts), tz=timezone.utc).isoformat()


def strip_scene(record: Record, scene_id: str) -> Record:
    """The record without ``scene_id`` among its source_scenes (what was learned stays)."""
    out = dict(record)
    out["source_scenes"] = [s for s in record.get("source_scenes") or [] if s != scene_id]
    return out


def audit_record(tenant_id: str, kind: str, target_id: str, by: str | None, at: str) -> Record:
    """The audit row of one forget: who forgot which id and when, never the content."""
    return {"id": str(uuid.uuid4()), "tenant_id": tenant_id, "kind": kind, "target_id": target_id,
            "forgotten_by": by, "forgotten_at": at}
