"""Coalesced embedding: concurrent ``embed`` calls share batches.

A model embeds one batch of 256 texts far faster than 256 batches of one (padding, per-call
overhead, an ONNX session or an HTTP round trip each), so the records of concurrent requests
(the server's threads, the CLI's sessions) are embedded together. ``CoalescingEmbedder`` wraps
any embedder:

- a call made while no batch is running embeds at once, alone (no added latency when idle);
- calls made while a batch runs queue up; when it ends, the first of them leads the next batch:
  it waits up to ``max_wait`` seconds for more (or until ``max_batch`` texts), takes whole calls
  from the queue up to ``max_batch`` texts (a larger call goes alone), embeds them in one call
  to the model, and hands each caller its rows;
- a batch that fails, or returns the wrong shape, is embedded again call by call, so each caller
  gets its own vectors or its own error, never another's.

One batch runs at a time. ``embed_query`` (recall's query side) is not coalesced: it goes to the
wrapped model at once. ``name`` and ``dimensions`` are the wrapped model's, so an index built
through the wrapper is labelled as built by the model.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from worldgraph.memory.embedders.base import check_embeddings, embed_query, embedder_name

__all__ = ["CoalescingEmbedder"]


class _Call:
    __slots__ = ("texts", "ready", "vectors", "error", "lead")

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.ready = threading.Event()
        self.vectors: Any = None
        self.error: BaseException | None = None
        self.lead = False  # woken to lead the next batch, not with a result

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.vectors


class CoalescingEmbedder:
    """``inner`` with concurrent ``embed`` calls coalesced into shared batches (see the module)."""

    def __init__(self, inner: Any, max_batch: int = 256, max_wait: float = 0.002) -> None:
        self.inner = inner
        self.name = embedder_name(inner)
        self.dimensions = int(inner.dimensions)
        self.max_batch = max(1, int(max_batch))
        self.max_wait = max(0.0, float(max_wait))
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Call] = []
        self._queued_texts = 0
        self._busy = False  # a leader is collecting or embedding
        self.batches = 0  # model calls made for coalesced work (for tests and benchmarks)

    def embed_query(self, texts: list[str]) -> np.ndarray:
        return embed_query(self.inner, texts)

    def embed(self, texts: list[str]) -> Any:
        texts = list(texts)
        if not texts:
            return self.inner.embed(texts)
        call = _Call(texts)
        with self._cond:
            self._queue.append(call)
            self._queued_texts += len(texts)
            lead = not self._busy
            if lead:
                self._busy = True
            else:
                self._cond.notify_all()  # a collecting leader may have a full batch now
        if not lead:
            call.ready.wait()
            if not call.lead:
                return call.result()
        self._run_batch(wait=not lead)
        return call.result()

    def _run_batch(self, wait: bool) -> None:
        """Lead one batch: the caller's own call is the queue's head, so it is in it."""
        with self._cond:
            if wait and self.max_wait:  # others are active: give them a moment to join
                deadline = time.monotonic() + self.max_wait
                while self._queued_texts < self.max_batch:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(left)
            batch = [self._queue.pop(0)]
            size = len(batch[0].texts)
            while self._queue and size + len(self._queue[0].texts) <= self.max_batch:
                size += len(self._queue[0].texts)
                batch.append(self._queue.pop(0))
            self._queued_texts -= size
        try:
            self._embed(batch)
        finally:
            with self._cond:
                if self._queue:  # hand the lead to the oldest waiting call
                    nxt = self._queue[0]
                    nxt.lead = True
                    nxt.ready.set()
                else:
                    self._busy = False

    def _embed(self, batch: list[_Call]) -> None:
        self.batches += 1
        if len(batch) == 1:
            self._alone(batch[0])
            return
        texts = [t for c in batch for t in c.texts]
        try:
            vectors = check_embeddings(self.inner.embed(texts), len(texts), self.dimensions)
        except Exception:  # noqa: BLE001 - whose texts failed is unknown: each call alone gets its own answer
            for c in batch:
                self._alone(c)
            return
        start = 0
        for c in batch:
            c.vectors = vectors[start:start + len(c.texts)]
            start += len(c.texts)
            c.ready.set()

    def _alone(self, call: _Call) -> None:
        try:
            call.vectors = self.inner.embed(call.texts)  # checked by the caller, as without the wrapper
        except BaseException as exc:  # noqa: BLE001 - handed to the caller it belongs to
            call.error = exc
        call.ready.set()

    def __getattr__(self, name: str) -> Any:  # anything else the wrapped model offers
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)
