"""The hashing embedder: an offline, model-free fallback (keyword overlap, no synonyms)."""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from functools import lru_cache

import numpy as np

from worldgraph.errors import InvalidInputError
from worldgraph.memory.embedders.base import check_texts, l2_normalise

_WORD_RE = re.compile(r"\w+", re.UNICODE)


def clear_feature_cache() -> None:
    """Forget the words hashed so far (a purge's memo caches of words)."""
    _bucket.cache_clear()


@lru_cache(maxsize=1 << 17)
def _bucket(feature: str, dimensions: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    return value % dimensions, (1.0 if (value >> 63) & 1 else -1.0)


class HashingEmbedder:
    """Deterministic bag-of-features embedder: no model, no network, stable across processes.

    Features are lower-cased word tokens, word bigrams and character trigrams of each word,
    hashed with blake2b into signed buckets, weighted with sublinear tf (1 + ln tf) and
    L2-normalised. Texts that share words get clearly higher cosine than unrelated texts; it
    does not know synonyms (use MiniLM or an OpenAI-compatible model for that).
    """

    WORD_WEIGHT = 1.0
    BIGRAM_WEIGHT = 0.5
    TRIGRAM_WEIGHT = 0.25

    def __init__(self, dimensions: int = 384) -> None:
        if not isinstance(dimensions, int) or dimensions <= 0:
            raise InvalidInputError("dimensions", f"must be a positive integer, got {dimensions!r}")
        self.dimensions = dimensions
        self.name = f"hashing-v1-{dimensions}"

    def _features(self, text: str) -> Counter[str]:
        words = [w.lower() for w in _WORD_RE.findall(text)]
        feats: Counter[str] = Counter()
        for w in words:
            feats["w:" + w] += 1
            padded = f"<{w}>"
            if len(padded) > 3:
                for i in range(len(padded) - 2):
                    feats["c:" + padded[i:i + 3]] += 1
        for a, b in zip(words, words[1:]):
            feats["b:" + a + " " + b] += 1
        return feats

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = check_texts(texts)
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        weights = {"w": self.WORD_WEIGHT, "b": self.BIGRAM_WEIGHT, "c": self.TRIGRAM_WEIGHT}
        for row, text in enumerate(texts):
            feats = self._features(text)
            if not feats:
                feats = Counter({"e:<empty>": 1})
                weights_row = {"e": 1.0}
            else:
                weights_row = weights
            vec = out[row]
            for feat, tf in feats.items():
                idx, sign = _bucket(feat, self.dimensions)
                vec[idx] += sign * weights_row[feat[0]] * (1.0 + math.log(tf))
        return l2_normalise(out)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimensions={self.dimensions})"
