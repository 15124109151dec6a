"""Renews the leases a process holds on scene packets while their extraction runs (a thread per
held packet).

A lease lasts ``lease_seconds``; each hold's thread renews it every third of that, so a holder must
miss two renewals in a row before another worker may take its packet. Each hold has its own
thread because a renewal can wait: on Neo4j it takes the scene's lock, which a merge of that scene
holds to its commit (seconds on a loaded machine); one thread renewing every hold in turn would
let the other packets' leases run out meanwhile, and another worker would take over (and extract
again) packets whose holder is alive. A renewal that finds the lease gone (taken over after a long
pause, or released) marks the hold lost: its merge is then refused by the store's fence anyway,
and the worker does not write the packet's status. A renewal that finds the packet merged by its
own hold, which ended meanwhile, is not a loss.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from worldgraph.clock import now_iso
from worldgraph.kg.lease import iso_after
from worldgraph.kg.store import WorldStore

log = logging.getLogger("worldgraph.world")

__all__ = ["LeaseKeeper", "Hold"]


@dataclass
class Hold:
    tenant_id: str
    scene_id: str
    owner: str
    lost: bool = False
    ended: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)


class LeaseKeeper:
    def __init__(self, store: WorldStore, lease_seconds: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self._holds: dict[str, Hold] = {}
        self._lock = threading.Lock()

    def until(self) -> str:
        """The end of a lease taken or renewed now."""
        return iso_after(self.lease_seconds)

    @contextmanager
    def hold(self, tenant_id: str, scene_id: str, owner: str) -> Iterator[Hold]:
        """Keep ``owner``'s lease on the scene alive for the duration of the block."""
        held = Hold(tenant_id, scene_id, owner)
        with self._lock:
            self._holds[owner] = held
        threading.Thread(target=self._renew, args=(held,), name=f"worldgraph-lease-{scene_id[:8]}",
                         daemon=True).start()
        try:
            yield held
        finally:
            held.ended.set()
            with self._lock:
                self._holds.pop(owner, None)

    def held(self) -> list[Hold]:
        """The holds alive now (for a worker that shuts down: it releases them)."""
        with self._lock:
            return list(self._holds.values())

    def stop(self) -> None:
        """Stop renewing the holds alive now (their leases run out unless they are released)."""
        for h in self.held():
            h.ended.set()

    def _renew(self, h: Hold) -> None:
        while not h.ended.wait(self.lease_seconds / 3):
            try:
                renewed = self.store.renew_scene_lease(h.tenant_id, h.scene_id, h.owner, self.until(), now_iso())
            except Exception as exc:  # noqa: BLE001 - a store hiccup: the next round tries again
                log.warning("renewing the lease on scene %s failed: %s", h.scene_id, exc)
                continue
            if not renewed:
                if not h.ended.is_set():  # not merged or released by the hold itself meanwhile
                    h.lost = True
                    log.warning("lost the lease on scene %s (it was taken over or released); its merge "
                                "will be refused", h.scene_id)
                return
