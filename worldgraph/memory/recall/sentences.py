"""The sentence part of the text relevance: an optional recall stage (``sentence_head`` > 0).

A conversation turn often says several things ("That tart looks yummy! Lately I've been doing
great: I won a really big video game tournament last week!"), and its one vector is the mean of
all of them, so a question about one of them ("How many tournaments has Nate won?") finds it
only weakly. The stage embeds each sentence of the ranking's head on its own: a turn whose best
sentence matches the query better than the whole turn does gains

    sentence part = ``sentence_weight`` x max(0, best sentence's cosine - the turn's cosine),

both cosines taken with the same query vector (the speaker-free one when the query names a
speaker). Each sentence is embedded as the turn is (``"Nate: I won a really big video game
tournament last week!"``). A sentence of fewer than ``MIN_WORDS`` words ("Wow!", "Thanks, Mel!")
names no topic of its own and is left out; a turn with fewer than two sentences left has no part
(its vector already is its sentence's); only the first ``MAX_SENTENCES`` count.

The sentences are embedded at recall, not at recording (recording stays as fast as it was), in
one embedder call per recall for the sentences not seen before: a bounded in-process cache keeps
their vectors by tenant and a digest of the text, so later recalls over the same memories embed
nothing. The cost, the first time, is one embedding of up to ``sentence_head`` x
``MAX_SENTENCES`` short texts; bench/README.md ("The sentence part") measures it and the gain.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from worldgraph.memory.cosine import cosine_to
from worldgraph.memory.embeddings import Embedder, check_embeddings
from worldgraph.memory.recall.relevance import split_sentences

__all__ = ["MAX_SENTENCES", "MIN_WORDS", "SentenceCache", "best_sentence_cosines", "sentence_texts"]

MIN_WORDS = 3
MAX_SENTENCES = 8
CACHE_ITEMS = 20_000  # sentence vectors kept (384-d float32: ~31 MB at most)


def sentence_texts(speaker: str, text: str) -> list[str]:
    """The sentences of a turn said by ``speaker`` as they are embedded (``"Nate: I won..."``);
    empty when fewer than two sentences of ``MIN_WORDS`` words or more are left."""
    kept = [s for s in split_sentences(text) if len(s.split()) >= MIN_WORDS][:MAX_SENTENCES]
    if len(kept) < 2:
        return []
    prefix = f"{speaker}: " if speaker else ""
    return [prefix + s for s in kept]


class SentenceCache:
    """Sentence vectors by (tenant, embedder, digest of the text), least recently used dropped
    first. Keyed by tenant so that one tenant's recall never reads (nor times) what another's
    embedded; by digest so that no memory's words stay in it once the memory is forgotten."""

    def __init__(self, max_items: int = CACHE_ITEMS) -> None:
        self.max_items = max_items
        self._items: OrderedDict[tuple[str, str, bytes], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.embedded = 0  # sentences embedded so far (tests and benchmarks read it)

    def drop(self, tenant_id: str) -> None:
        """Forget the tenant's sentence vectors (its forgotten memories' among them)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == tenant_id]:
                del self._items[key]

    def vectors(self, embedder: Embedder, tenant_id: str, texts: Sequence[str]) -> np.ndarray:
        """One row per text: cached, or embedded now (all the missing ones in one call)."""
        name = str(getattr(embedder, "name", None) or type(embedder).__name__)
        keys = [(tenant_id, name, hashlib.blake2b(t.encode("utf-8", "replace"), digest_size=16).digest())
                for t in texts]
        out = np.zeros((len(texts), int(embedder.dimensions)), dtype=np.float32)
        missing: dict[tuple[str, str, bytes], list[int]] = {}
        with self._lock:
            for n, key in enumerate(keys):
                vec = self._items.get(key)
                if vec is None:
                    missing.setdefault(key, []).append(n)
                else:
                    self._items.move_to_end(key)
                    out[n] = vec
        if missing:
            new = list(missing)
            vecs = check_embeddings(embedder.embed([texts[missing[k][0]] for k in new]), len(new),
                                    int(embedder.dimensions))
            with self._lock:
                self.embedded += len(new)
                for key, vec in zip(new, vecs):
                    for n in missing[key]:
                        out[n] = vec
                    self._items[key] = np.asarray(vec, dtype=np.float32)
                while len(self._items) > self.max_items:
                    self._items.popitem(last=False)
        return out


CACHE = SentenceCache()


def best_sentence_cosines(embedder: Embedder, tenant_id: str, qvec: np.ndarray,
                          turns: Sequence[list[str]], cache: SentenceCache = CACHE) -> list[float | None]:
    """Per turn (its ``sentence_texts``): the best cosine of one of its sentences with ``qvec``;
    None for a turn without sentences."""
    flat = [s for t in turns for s in t]
    if not flat:
        return [None] * len(turns)
    sims = cosine_to(cache.vectors(embedder, tenant_id, flat), np.asarray(qvec, dtype=np.float32))
    out: list[float | None] = []
    start = 0
    for t in turns:
        out.append(float(sims[start:start + len(t)].max()) if t else None)
        start += len(t)
    return out
