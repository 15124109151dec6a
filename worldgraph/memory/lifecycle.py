"""Browsing and forgetting, the parts above the store: pages and their cursors, the report of a
forget, the time filters, and the background purge.

A page cursor is opaque: base64url of ``[version, ts, id, filter digest]``, the (timestamp, id)
of the page's last episode in the listing order (newest first). The next page is a keyset seek
strictly after it, never an offset, so a page costs the same however deep it is, and episodes
recorded or forgotten meanwhile neither repeat nor skip one. The digest ties a cursor to the
filters it was made with: reusing it with other filters is an error, not a silently wrong page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from worldgraph.errors import InvalidInputError
from worldgraph.kg.lifecycle import EpisodeFilter

log = logging.getLogger("worldgraph")

__all__ = ["Page", "ForgetReport", "encode_cursor", "decode_cursor", "parse_time", "Purger"]

_CURSOR_VERSION = 1
_BAD_CURSOR = "is not a cursor this API returned: pass the previous page's next_cursor unchanged, with the same filters"


@dataclass
class Page:
    """One page of a listing: ``items`` and the cursor of the next page (None on the last).
    ``episodes`` is the same list under the name REST, MCP and TypeScript give it."""

    items: list[Any]
    next_cursor: str | None

    @property
    def episodes(self) -> list[Any]:
        """``items``, as the other surfaces name a page of episodes."""
        return self.items

    def to_dict(self, key: str = "items") -> dict[str, Any]:
        return {key: list(self.items), "next_cursor": self.next_cursor}


@dataclass
class ForgetReport:
    """What a forget removed (counts per kind of record) and its audit row's id and time. The bytes
    leave the files with the next ``purge()`` (the background one runs by ``purge_due_by``)."""

    kind: str  # episode | agent | session | environment | tenant
    tenant_id: str
    target_id: str
    audit_id: str
    forgotten_at: str
    forgotten_by: str | None
    removed: dict[str, int] = field(default_factory=dict)
    purge_due_by: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _digest(flt: EpisodeFilter, metadata: Any = None) -> str:
    parts: list[Any] = [flt.agent_id, flt.session_id, flt.since, flt.until]
    if metadata:  # a page of a metadata filter continues that filter only
        parts.append(metadata)
    raw = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def encode_cursor(ts: float, episode_id: str, flt: EpisodeFilter, metadata: Any = None) -> str:
    raw = json.dumps([_CURSOR_VERSION, float(ts), episode_id, _digest(flt, metadata)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None, flt: EpisodeFilter, metadata: Any = None) -> tuple[float, str] | None:
    if cursor is None:
        return None
    if not isinstance(cursor, str) or not cursor or len(cursor) > 2000:
        raise InvalidInputError("cursor", _BAD_CURSOR, cursor)
    try:
        raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise InvalidInputError("cursor", _BAD_CURSOR, cursor) from None
    if (not isinstance(raw, list) or len(raw) != 4 or raw[0] != _CURSOR_VERSION
            or not isinstance(raw[1], (int, float)) or isinstance(raw[1], bool) or not isinstance(raw[2], str)):
        raise InvalidInputError("cursor", _BAD_CURSOR, cursor)
    if raw[3] != _digest(flt, metadata):
        raise InvalidInputError("cursor", "was made for other filters (agent_id, session_id, since, until, metadata): "
                                "keep the filters of the first page, or start again without a cursor", cursor)
    return float(raw[1]), raw[2]


def parse_time(value: Any, name: str) -> float | None:
    """An ISO-8601 date/time (text or datetime; naive means UTC) as unix seconds; None passes."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(name, "must be an ISO-8601 date or date/time, e.g. 2026-01-31 or "
                                    "2026-01-31T12:00:00Z", value) from None
    if not isinstance(value, datetime):
        raise InvalidInputError(name, "must be an ISO-8601 date/time string or a datetime", value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return float(value.timestamp())


class Purger:
    """The background purge: ``kick()`` after a forget runs ``purge`` once ``delay`` seconds have
    passed (kicks meanwhile join that run); ``stop()`` ends it (what is left is purged by the next
    process that opens the folder, or ``worldgraph purge``)."""

    def __init__(self, purge: Callable[[], Any], delay: float) -> None:
        self._purge = purge
        self.delay = delay
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def kick(self) -> None:
        with self._lock:
            if self._stop.is_set() or self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="worldgraph-purge", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        if self._stop.wait(self.delay):
            return
        with self._lock:
            self._thread = None  # a forget from now on schedules the next run
        try:
            self._purge()
            self.runs += 1
        except Exception as exc:  # noqa: BLE001 - left for the next run: the audit rows stay unpurged
            log.warning("background purge did not finish (%s); the next forget, open or `worldgraph purge` "
                        "completes it", exc)

    def wait(self, timeout: float | None = None) -> None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
