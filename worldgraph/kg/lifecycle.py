"""What both stores share for the memory lifecycle (browse and forget): the episode filter, what
a forget of episodes names and returns, and the audit record of a forget. How a forget derives
again what other records showed of the forgotten ones is ``kg.derived``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
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


@dataclass
class DerivedRecords:
    """Records whose derived text an upgrade derived again (``kg.derived``; facade/upgrade.py):
    episodes (re-indexed after), canvases by id (None: delete it), metas by environment, scenes."""

    episodes: list[Record] = field(default_factory=list)
    canvases: dict[str, Record | None] = field(default_factory=dict)
    metas: dict[str, Record] = field(default_factory=dict)
    scenes: list[Record] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.episodes or self.canvases or self.metas or self.scenes)


def iso_of(ts: float | None) -> str | None:
    """Unix seconds as the ISO-8601 UTC text episodes carry."""
    return None if ts is None else datetime.fromtimestamp(float(ts), tz=timezone.utc).isoformat()


# What a forget of episodes names: one episode by id, every episode of an agent, or of a session.
EPISODE_SCOPES: tuple[str, ...] = ("episode", "agent", "session")
# What a forget of episodes counts, as its ForgetReport's ``removed`` (the index rows are the facade's).
FORGET_COUNTS: tuple[str, ...] = ("episodes", "feedback", "canvas_audits", "scenes", "world_records_updated",
                                  "scenes_rederived", "turn_contexts_rederived", "canvases_rederived", "canvases")


@dataclass
class Forgotten:
    """What a forget of episodes did: ``counts`` per kind of record removed or rewritten (the
    ForgetReport's ``removed``), the episodes it deleted (their index rows go) and the live ones
    whose derived text it derived again (``kg.derived``: their index rows are written again)."""

    counts: dict[str, int]
    episode_ids: list[str] = field(default_factory=list)
    rederived: list[str] = field(default_factory=list)


def audit_record(tenant_id: str, kind: str, target_id: str, by: str | None, at: str) -> Record:
    """The audit row of one forget: who forgot which id and when, never the content. A forget of
    episodes adds the ids it deleted (``episode_ids``, for an agent or a session) and those whose
    derived text it wrote again (``rederived``): the purge finishes their index rows."""
    return {"id": str(uuid.uuid4()), "tenant_id": tenant_id, "kind": kind, "target_id": target_id,
            "forgotten_by": by, "forgotten_at": at}


def with_ids(audit: Record, kind: str, episode_ids: list[str], rederived: list[str]) -> Record:
    """``audit`` (changed in place) with the ids ``audit_record`` says a forget of episodes adds."""
    if kind != "episode":
        audit["episode_ids"] = list(episode_ids)
    if rederived:
        audit["rederived"] = list(rederived)
    return audit
