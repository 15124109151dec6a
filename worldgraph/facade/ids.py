"""Episode ids given whole or by their start, on every surface (Python, REST, MCP, the CLI).

Tables print the first 8 characters of an id, and people paste what they see. So each call that
takes an episode id takes a unique start of one too: the whole id is tried first (a caller that
sends whole ids pays nothing more), then the tenant's ids that start with the text. A start must
have at least ``MIN_PREFIX`` characters, and ``MIN_DELETE_PREFIX`` for a forget (a short start
that happens to be unique today must not erase the wrong episode after more are recorded). Several
matches are an ``AmbiguousIdError`` (409) listing them; none is a ``NotFoundError`` (404).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from worldgraph.errors import AmbiguousIdError, InvalidInputError, NotFoundError
from worldgraph.kg.store import GraphStore

__all__ = ["MIN_DELETE_PREFIX", "MIN_PREFIX", "by_id_or_prefix", "full_episode_id"]

MIN_PREFIX = 4
MIN_DELETE_PREFIX = 8
SHOWN = 6  # candidates listed in an ambiguity error (one more than shown tells "and more")

T = TypeVar("T")


def full_episode_id(store: GraphStore, tenant_id: str, text: str, minimum: int = MIN_PREFIX) -> str:
    """The one id of the tenant's episodes that is ``text`` or starts with it."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInputError("episode_id", "must be an episode id or the start of one", text)
    if store.get_episodes(tenant_id, [text]):
        return text
    if len(text) < minimum:
        raise NotFoundError("episode", text, f"tenant {tenant_id!r} holds no such episode; the start of an id "
                            f"must have at least {minimum} characters here")
    matches = store.episode_ids_with_prefix(tenant_id, text, limit=SHOWN)
    if len(matches) == 1:
        return str(matches[0])
    if not matches:
        raise NotFoundError("episode", text, f"tenant {tenant_id!r} has no episode with this id or an id "
                            "starting with it")
    raise AmbiguousIdError("episode", text, [str(m) for m in matches], "episode_id")


def by_id_or_prefix(store: GraphStore, tenant_id: str, text: str, call: Callable[[str], T],
                    minimum: int = MIN_PREFIX) -> T:
    """``call(id)`` with ``text`` as given, and when no episode has that id, with the one whose id
    starts with it."""
    try:
        return call(text)
    except NotFoundError as exc:
        if exc.kind != "episode" or not isinstance(text, str):
            raise
        full = full_episode_id(store, tenant_id, text, minimum)
        if full == text:
            raise
        return call(full)
