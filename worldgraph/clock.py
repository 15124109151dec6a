"""The one clock: what "now" is, and the one timestamp format every record stores.

Everything that stamps a record (episodes, scenes, leases, API keys, merges) calls these, so a
timestamp written by one layer sorts and compares as text against one written by another.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

__all__ = ["utcnow", "to_utc", "iso", "now_iso", "seconds_left"]


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


def to_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; aware ones are converted."""
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def iso(value: datetime) -> str:
    """The one timestamp format stored everywhere (sorts as text, round-trips exactly)."""
    return to_utc(value).isoformat(timespec="microseconds")


def now_iso() -> str:
    """``iso(utcnow())``: the current time as stored."""
    return iso(utcnow())


def seconds_left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (a ``time.monotonic()`` value), never below 0; None (no bound)
    for None: the timeout to hand a join or a wait inside a close bounded by one deadline."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
