"""The one clock: what "now" is, and the one timestamp format every record stores.

Everything that stamps a record (episodes, scenes, leases, API keys, merges) calls these, so a
timestamp written by one layer sorts and compares as text against one written by another.
"""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["utcnow", "to_utc", "iso", "now_iso"]


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
