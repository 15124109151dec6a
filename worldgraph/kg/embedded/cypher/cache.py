"""The projections of the last few tenants queried, each tagged with the store's version."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from worldgraph.kg.embedded.cypher.projection import Projection, ProjectionBusy

PROJECTIONS_KEPT = 4  # tenants whose projection stays in memory (least recently queried dropped)


class ProjectionCache:
    """The projections of the last few tenants queried, each tagged with the store's version."""

    def __init__(self, dispose: Callable[[Projection], None] = Projection.close) -> None:
        """``dispose``: what is done with a projection the cache lets go (closed here, its query
        children ended, a temporary file deleted)."""
        self._dispose = dispose
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[Any, Projection]] = OrderedDict()

    def get(self, tenant_id: str, version: Any, build: Callable[[], Projection],
            refresh: Callable[[Projection], bool], serves: Callable[[Projection], bool] = lambda _: True) -> Projection:
        """The tenant's projection at ``version`` (the store's generations): as it is, brought up to
        date by ``refresh`` (False: it cannot be, row by row), or built anew; built anew too when
        the one kept does not ``serve`` the query (the world part alone, for a query that needs more)."""
        with self._lock:
            item = self._items.get(tenant_id)
            if item is not None and item[1].closed:  # its file could not be opened (damaged, deleted)
                del self._items[tenant_id]
                self._dispose(item[1])
                item = None
            if item is not None and not serves(item[1]):
                proj = build()
                self._dispose(item[1])
                return self._keep(tenant_id, version, proj)
            if item is not None and item[0] == version:
                self._items.move_to_end(tenant_id)
                return item[1]
            if item is not None:
                try:
                    fresh = refresh(item[1])
                except ProjectionBusy:  # it cannot be written: built anew below
                    fresh = False
                except BaseException:  # half reloaded: never hand it out again
                    del self._items[tenant_id]
                    self._dispose(item[1])
                    raise
                if fresh and not item[1].closed:
                    self._items[tenant_id] = (version, item[1])
                    self._items.move_to_end(tenant_id)
                    return item[1]
            proj = build()
            if item is not None:
                self._dispose(item[1])
            return self._keep(tenant_id, version, proj)

    def _keep(self, tenant_id: str, version: Any, proj: Projection) -> Projection:
        """(Under the lock.) ``proj`` becomes the tenant's projection; the least recently queried
        tenants' beyond PROJECTIONS_KEPT are closed."""
        self._items[tenant_id] = (version, proj)
        self._items.move_to_end(tenant_id)
        while len(self._items) > PROJECTIONS_KEPT:
            _, (_, old) = self._items.popitem(last=False)
            self._dispose(old)
        return proj

    def current(self, tenant_id: str) -> Projection | None:
        """The tenant's projection kept, if any."""
        with self._lock:
            item = self._items.get(tenant_id)
        return item[1] if item is not None else None

    def drop(self, tenant_id: str) -> None:
        """Let the tenant's projection go and forget it."""
        with self._lock:
            item = self._items.pop(tenant_id, None)
        if item is not None:
            self._dispose(item[1])

    def close(self) -> None:
        with self._lock:
            for _, proj in self._items.values():
                self._dispose(proj)
            self._items.clear()

