"""Session order: the episodes of one session (a chat, thread or run) linked in time order.

Both stores keep the same links (Neo4j: ``(:Episode)-[:NEXT]->(:Episode)``; embedded: the
``next_id`` column of ``session_links``), computed by this pure code inside their write
transaction. The order is (timestamp, seq): ``seq`` counts the episodes of a session in the
order they were recorded, so turns that share a timestamp (a transcript dated by day) keep the
order they were given in, and a late turn with an older timestamp is linked in where it belongs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True, order=True)
class Link:
    """One episode's place in its session."""

    ts: float
    seq: int
    id: str


def by_session(episodes: Iterable[Record]) -> dict[str, list[Record]]:
    """The episodes that name a session, grouped by it (in the order given)."""
    out: dict[str, list[Record]] = {}
    for e in episodes:
        sid = e.get("session_id")
        if sid:
            out.setdefault(sid, []).append(e)
    return out


def new_links(episodes: list[Record], last_seq: int) -> list[Link]:
    """Places for a batch of one session's new episodes: seq continues after ``last_seq``."""
    return [Link(float(e["ts"]), last_seq + 1 + i, e["id"]) for i, e in enumerate(episodes)]


def relink(before: Link | None, after: list[Link], new: list[Link]) -> list[tuple[str, str | None]]:
    """The (episode, next episode) pairs to write once ``new`` joins the session.

    ``before``: the stored episode just before the first new one (None if there is none);
    ``after``: the stored episodes after it, in order (usually none: turns are appended). Every
    episode of the affected stretch gets its next (None for the last of the session); nothing
    outside it changes.
    """
    chain = ([before] if before is not None else []) + sorted(after + new)
    return [(a.id, chain[i + 1].id if i + 1 < len(chain) else None) for i, a in enumerate(chain)]
