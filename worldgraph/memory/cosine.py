"""Cosine similarity, written once: recall's semantic score, the index's exact re-ranking and the
diversity penalty all use these. A zero vector is similar to nothing (0), never NaN."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["cosine_to", "cosine_matrix"]


def cosine_to(matrix: Any, query: Any) -> np.ndarray:
    """The cosine similarity of each row of ``matrix`` (n, d) with ``query`` (d,), computed in
    their own dtype (float32 rows stay float32)."""
    m = np.asarray(matrix)
    q = np.asarray(query)
    norms = np.linalg.norm(m, axis=1) * float(np.linalg.norm(q))
    out: np.ndarray = (m @ q) / np.where(norms == 0, 1.0, norms)
    return out


def cosine_matrix(vectors: Any) -> np.ndarray:
    """Pairwise cosine similarity of the rows of ``vectors``, in float64."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit = v / norms
    out: np.ndarray = unit @ unit.T
    return out
