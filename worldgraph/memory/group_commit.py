"""Group commit of concurrent record calls: one store transaction and one index append per group.

A record's write half (store the episodes, append their index rows, mark them indexed) runs in
the index's write window, one caller at a time. Callers of the same tenant that arrive while a
write runs queue up; when it ends, one of them (the leader) writes the whole queue as one group:
one ``write`` of every caller's episodes, canvases, audits and vectors together. Each caller
returns when the group holding its episodes has been written (so, as before, the episodes are in
the store before the call returns), and raises only its own error:

- a caller alone in its group writes alone, exactly as without grouping;
- if a group's write raises, the store is read back: if every episode of the group is there (the
  store transaction committed, something after it failed), every caller succeeds and the index
  retrier picks up what is not indexed; otherwise (the transaction rolled back: nothing of the
  group is stored) each caller's part is written again alone, so each caller gets its own
  result or error and a valid caller's episodes are never dropped because of another's.

A caller naming an episode id that another caller of the forming group names is held back for a
later group and, before it is written, looked up in the store: if the id is there now, it fails
as a record of an existing id does (one transaction holding both would fail for everyone on
SQLite, and merge the two into one episode on Neo4j).

The first caller of an idle tenant writes at once: grouping adds no wait, it only gathers the
callers that would otherwise wait for the write lock one after another.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from worldgraph.errors import InvalidInputError

log = logging.getLogger("worldgraph")

Record = dict[str, Any]
# write(tenant_id, episodes, canvases, audits, vectors): stores and indexes, as record_experiences does alone
Write = Callable[[str, list[Record], list[Record], list[Record], Any], None]


@dataclass(eq=False)
class _Part:
    episodes: list[Record]
    canvases: list[Record]
    audits: list[Record]
    vectors: Any
    done: bool = False
    error: BaseException | None = None
    recheck: bool = False  # an earlier group held one of its ids: look in the store before writing


@dataclass
class GroupStats:
    """What the committer did (for tests and the benchmark): groups written, their parts, solo retries."""
    groups: int = 0
    parts: int = 0
    largest: int = 0
    retried_alone: int = 0
    sizes: list[int] = field(default_factory=list)


class GroupCommit:
    """Combines concurrent ``commit`` calls per tenant into one ``write`` (see the module doc).

    ``stored(tenant_id, ids)`` returns which of ``ids`` the store holds; ``after_failure`` is called
    when a group's write failed but its episodes are stored (to kick the index retrier).
    ``max_episodes`` caps a group (a caller's own part is always in the group it leads).
    """

    def __init__(self, write: Write, stored: Callable[[str, list[str]], set[str]],
                 after_failure: Callable[[], None], max_episodes: int) -> None:
        self._write = write
        self._stored = stored
        self._after_failure = after_failure
        self._max = max(1, int(max_episodes))
        self._cv = threading.Condition()
        self._queues: dict[str, list[_Part]] = {}
        self._busy: set[str] = set()
        self.stats = GroupStats()

    def queued(self, tenant_id: str) -> int:
        """Callers of ``tenant_id`` waiting for the next group (for tests)."""
        with self._cv:
            return len(self._queues.get(tenant_id, ()))

    def commit(self, tenant_id: str, episodes: list[Record], canvases: list[Record], audits: list[Record],
               vectors: Any) -> None:
        """Write these episodes in the next group of ``tenant_id``; returns once it is written,
        raises what writing this caller's part raised."""
        part = _Part(episodes, canvases, audits, vectors)
        with self._cv:
            queue = self._queues.setdefault(tenant_id, [])
            queue.append(part)
            while not part.done and tenant_id in self._busy:
                self._cv.wait()
            if not part.done:  # the tenant is idle and this part still queued: lead the next group
                group = self._take(queue, part)
                self._busy.add(tenant_id)
                self._count(group)
        if not part.done:
            try:
                self._run(tenant_id, group)
            finally:
                with self._cv:
                    for p in group:
                        if not p.done:  # interrupted (KeyboardInterrupt ...): never a silent success
                            p.error = p.error or RuntimeError("group commit interrupted before this part was written")
                            p.done = True
                    self._busy.discard(tenant_id)
                    if not self._queues.get(tenant_id):
                        self._queues.pop(tenant_id, None)
                    self._cv.notify_all()
        if part.error is not None:
            raise part.error

    def _take(self, queue: list[_Part], own: _Part) -> list[_Part]:
        """The next group: ``own``, then the queue in arrival order up to ``max_episodes``. A part
        naming an episode id another part of the group names stays queued for a later group (one
        transaction holding both would fail on SQLite and merge them on Neo4j), marked to be
        checked against the store before it is written."""
        group, ids = [own], {e["id"] for e in own.episodes}
        n = len(own.episodes)
        for p in queue:
            if p is own:
                continue
            mine = {e["id"] for e in p.episodes}
            if mine & ids:
                p.recheck = True
                continue
            if n + len(p.episodes) > self._max:
                break
            group.append(p)
            ids |= mine
            n += len(p.episodes)
        for p in group:
            queue.remove(p)
        return group

    def _count(self, group: list[_Part]) -> None:
        self.stats.groups += 1
        self.stats.parts += len(group)
        self.stats.largest = max(self.stats.largest, len(group))
        if len(self.stats.sizes) < 10_000:
            self.stats.sizes.append(len(group))

    def _run(self, tenant_id: str, group: list[_Part]) -> None:
        group = [p for p in group if not self._already_recorded(tenant_id, p)]
        if not group:
            return
        if len(group) == 1:
            self._alone(tenant_id, group[0])
            return
        episodes = [e for p in group for e in p.episodes]
        canvases = list({c["id"]: c for p in group for c in p.canvases}.values())  # upserts: last one wins
        try:
            self._write(tenant_id, episodes, canvases, [a for p in group for a in p.audits],
                        np.concatenate([np.asarray(p.vectors) for p in group]))
        except Exception as exc:  # noqa: BLE001 - decided below, per caller
            ids = [e["id"] for e in episodes]
            try:
                held = self._stored(tenant_id, ids)
            except Exception as read_exc:  # noqa: BLE001 - cannot tell what is stored: each caller learns it failed
                log.warning("group commit of %d calls failed (%s) and the store cannot be read back (%s)",
                            len(group), exc, read_exc)
                for p in group:
                    p.error, p.done = exc, True
                return
            if len(held) == len(set(ids)):  # committed; what failed after it is the retrier's to redo
                log.warning("group commit of %d calls: stored, then failed (%s); re-indexing later", len(group), exc)
                for p in group:
                    p.done = True
                self._after_failure()
                return
            log.info("group commit of %d calls failed (%s); writing each call alone", len(group), exc)
            for p in group:
                with self._cv:
                    self.stats.retried_alone += 1
                self._alone(tenant_id, p)
            return
        for p in group:
            p.done = True

    def _already_recorded(self, tenant_id: str, p: _Part) -> bool:
        """For a part held back because an earlier group held one of its ids: if the store has
        one of them now, the part fails as a record of an existing id does (nothing written)."""
        if not p.recheck:
            return False
        try:
            held = self._stored(tenant_id, [e["id"] for e in p.episodes])
        except Exception as exc:  # noqa: BLE001 - this caller's own error
            p.error, p.done = exc, True
            return True
        if not held:
            return False
        first = next(e["id"] for e in p.episodes if e["id"] in held)
        p.error = InvalidInputError("episode_id", f"{first!r} is already recorded (by a concurrent call); "
                                    "leave episode_id out to get a new id")
        p.done = True
        return True

    def _alone(self, tenant_id: str, p: _Part) -> None:
        try:
            self._write(tenant_id, p.episodes, p.canvases, p.audits, p.vectors)
        except Exception as exc:  # noqa: BLE001 - this caller's own error, raised in its thread
            p.error = exc
        p.done = True
