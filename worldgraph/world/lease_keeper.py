"""Renews the leases a process holds on scene packets while their extraction runs (one thread).

A lease lasts ``lease_seconds``; the keeper renews each held lease every third of that, so a
holder must miss two renewals in a row before another worker may take its packet. A renewal that
finds the lease gone (taken over after a long pause, or released) marks the hold lost: its merge
is then refused by the store's fence anyway, and the worker does not write the packet's status.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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


class LeaseKeeper:
    def __init__(self, store: WorldStore, lease_seconds: float) -> None:
        self.store = store
        self.lease_seconds = lease_seconds
        self._holds: dict[str, Hold] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def until(self) -> str:
        """The end of a lease taken or renewed now."""
        return iso_after(self.lease_seconds)

    @contextmanager
    def hold(self, tenant_id: str, scene_id: str, owner: str) -> Iterator[Hold]:
        """Keep ``owner``'s lease on the scene alive for the duration of the block."""
        held = Hold(tenant_id, scene_id, owner)
        with self._lock:
            self._holds[owner] = held
            if self._thread is None or not self._thread.is_alive():
                self._stopped = False
                self._thread = threading.Thread(target=self._loop, name="worldgraph-lease-keeper", daemon=True)
                self._thread.start()
        try:
            yield held
        finally:
            with self._lock:
                self._holds.pop(owner, None)

    def held(self) -> list[Hold]:
        """The holds alive now (for a worker that shuts down: it releases them)."""
        with self._lock:
            return list(self._holds.values())

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        self._wake.set()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.lease_seconds / 3)
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
                holds = [h for h in self._holds.values() if not h.lost]
            for h in holds:
                try:
                    if not self.store.renew_scene_lease(h.tenant_id, h.scene_id, h.owner, self.until(), now_iso()):
                        h.lost = True
                        log.warning("lost the lease on scene %s (it was taken over or released); its merge "
                                    "will be refused", h.scene_id)
                except Exception as exc:  # noqa: BLE001 - a store hiccup: the next round tries again
                    log.warning("renewing the lease on scene %s failed: %s", h.scene_id, exc)
