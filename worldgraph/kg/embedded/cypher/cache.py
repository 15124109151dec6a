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

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[str, tuple[Any, Projection]] = OrderedDict()

    def get(self, tenant_id: str, version: Any, build: Callable[[], Projection],
            refresh: Callable[[Projection], bool], serves: Callable[[Projection], bool] = lambda _: True) -> Projection:
        """The tenant's projection at ``version`` (the store's generations): as it is, brought up to
        date by ``refresh`` (False: it cannot be, row by row), or built anew; built anew too when
        the one kept does not ``serve`` the query (the world part alone, for a query that needs more)."""
        with self._lock:
            item = self._items.get(tenant_id)
            if item is not None and item[1].closed:  # abandoned by a query past its deadline (run)
                del self._items[tenant_id]
                item = None
            if item is not None and not serves(item[1]):
                proj = build()
                item[1].close()
                return self._keep(tenant_id, version, proj)
            if item is not None and item[0] == version:
                self._items.move_to_end(tenant_id)
                return item[1]
            if item is not None:
                try:
                    fresh = refresh(item[1])
                except ProjectionBusy:  # a query still runs on it: built anew below
                    fresh = False
                except BaseException:  # half reloaded: never hand it out again
                    del self._items[tenant_id]
                    item[1].close()
                    raise
                if fresh and not item[1].closed:
                    self._items[tenant_id] = (version, item[1])
                    self._items.move_to_end(tenant_id)
                    return item[1]
            proj = build()
            if item is not None:
                item[1].close()
            return self._keep(tenant_id, version, proj)

    def _keep(self, tenant_id: str, version: Any, proj: Projection) -> Projection:
        """(Under the lock.) ``proj`` becomes the tenant's projection; the least recently queried
        tenants' beyond PROJECTIONS_KEPT are closed."""
        self._items[tenant_id] = (version, proj)
        self._items.move_to_end(tenant_id)
        while len(self._items) > PROJECTIONS_KEPT:
            _, (_, old) = self._items.popitem(last=False)
            old.close()
        return proj

    def current(self, tenant_id: str) -> Projection | None:
        """The tenant's projection kept, if any."""
        with self._lock:
            item = self._items.get(tenant_id)
        return item[1] if item is not None else None

    def drop(self, tenant_id: str) -> None:
        """Close the tenant's projection (a query running on it ends first) and forget it."""
        with self._lock:
            item = self._items.pop(tenant_id, None)
        if item is not None:
            item[1].close()

    def close(self) -> None:
        with self._lock:
            for _, proj in self._items.values():
                proj.close()
            self._items.clear()

