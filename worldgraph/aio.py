"""AsyncWorldModel: the WorldModel API for asyncio code (agent frameworks are asyncio-first).

    from worldgraph import AsyncWorldModel
    async with await AsyncWorldModel.open("./data") as wm:
        episode_id = await wm.record_experience("acme", {...})
        results = await wm.recall_experiences("acme", "Finance", "reconcile inventory")

Every public method of :class:`WorldModel` is here, with the same name, arguments and result, as
a coroutine. The methods are generated from WorldModel's at import: each runs the sync method, as
it is, in a worker thread (``asyncio.to_thread``), so the event loop stays free and every
guarantee of the sync API holds unchanged (validation before any write, one transaction per
batch, the same exceptions). There is no second implementation to drift.

Cancelling an awaiting task does not stop the thread: a write that has started finishes (or fails
whole, as in the sync API); only its result is dropped. ``sync`` is the underlying WorldModel.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from worldgraph.service import WorldModel

__all__ = ["ASYNC_METHODS", "AsyncWorldModel"]

# Lifecycle methods have async forms of their own (open, close, the context manager); every other
# public method is wrapped.
_OWN = frozenset({"open", "close"})


def _public_methods(cls: type) -> list[str]:
    return sorted(name for name, value in inspect.getmembers(cls, callable)
                  if not name.startswith("_") and name not in _OWN)


ASYNC_METHODS: tuple[str, ...] = tuple(_public_methods(WorldModel))


class AsyncWorldModel:
    """The WorldModel API as coroutines. Use ``await AsyncWorldModel.open(path)`` (same arguments
    as ``WorldModel.open``), or wrap a model you opened: ``AsyncWorldModel(wm)``."""

    def __init__(self, wm: WorldModel) -> None:
        if not isinstance(wm, WorldModel):
            raise TypeError(f"AsyncWorldModel wraps a WorldModel, got {type(wm).__name__}")
        self.sync = wm

    @classmethod
    async def open(cls, path: str | Path = "./data", **kwargs: Any) -> AsyncWorldModel:
        """``WorldModel.open(path, **kwargs)`` in a worker thread (opening may re-index)."""
        return cls(await asyncio.to_thread(WorldModel.open, path, **kwargs))

    async def close(self, timeout: float | None = None) -> None:
        """Waits for background world updates, then closes the store (in a worker thread);
        ``timeout`` bounds the whole close, as ``WorldModel.close`` says."""
        await asyncio.to_thread(self.sync.close, timeout)

    async def __aenter__(self) -> AsyncWorldModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def config(self) -> Any:
        return self.sync.config

    @property
    def read_only(self) -> bool:
        return self.sync.read_only

    if TYPE_CHECKING:  # the generated coroutines below, for type checkers
        def __getattr__(self, name: str) -> Callable[..., Any]: ...


def _wrap(name: str) -> Callable[..., Any]:
    method = getattr(WorldModel, name)

    @functools.wraps(method)
    async def call(self: AsyncWorldModel, *args: Any, **kwargs: Any) -> Any:
        return await asyncio.to_thread(getattr(self.sync, name), *args, **kwargs)

    return call


for _name in ASYNC_METHODS:
    setattr(AsyncWorldModel, _name, _wrap(_name))
