"""What every embedder shares: the protocol, output checks, and the query-side entry point.

An embedder has ``dimensions`` (int), ``name`` (str: the model that built an index, with its
dimensions) and ``embed(texts) -> np.ndarray`` of shape ``(len(texts), dimensions)``, float32,
L2-normalised. A model that embeds questions differently from the texts it searches (e5's
``query: `` / ``passage: `` prefixes) also has ``embed_query(texts)``; callers that embed a search
query go through :func:`embed_query`, which uses it when present and ``embed`` otherwise.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from worldgraph.errors import EmbeddingDimensionError, InvalidInputError, WorldGraphError


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into fixed-size vectors.

    ``name`` (optional, str): the label recorded beside an index, saying which model built it
    (e.g. ``"my-org/e5-small-v2"``); open() refuses an index built under another label, since
    vectors of two models cannot be compared. Give it, and change it when the model changes.
    Without it the label is ``<class name>/<dimensions>``, the same however the class's module
    was loaded (run as a script or imported), but blind to a change of model inside the class.
    """

    dimensions: int

    def embed(self, texts: list[str]) -> np.ndarray:  # (n, dimensions) float32
        ...


class EmbeddingServiceError(WorldGraphError, ConnectionError):
    """The embedding server could not be reached or refused the request."""


def embedder_name(embedder: Any) -> str:
    """The label recorded beside an index: ``embedder.name``, else ``<class name>/<dimensions>``."""
    name = getattr(embedder, "name", None)
    return str(name) if name else f"{type(embedder).__name__}/{int(embedder.dimensions)}"


def same_fallback_label(old: str, new: str) -> bool:
    """Whether ``old`` is the module-qualified label earlier versions derived from the class
    (``pkg.mod.MyEmbedder/384``, ``__main__.MyEmbedder/384``) of the class ``new`` now labels."""
    return "/" in new and "." not in new.split("/", 1)[0] and old.endswith("." + new)


def embed_query(embedder: Any, texts: list[str]) -> np.ndarray:
    """Vectors for search queries: ``embedder.embed_query`` when it has one, else ``embed``."""
    fn = getattr(embedder, "embed_query", None)
    vectors: np.ndarray = fn(texts) if callable(fn) else embedder.embed(texts)
    return vectors


def check_embeddings(arr: Any, n_texts: int, dimensions: int) -> np.ndarray:
    """Coerce an embedder's output to a float32 (n, d) array, or raise EmbeddingDimensionError."""
    try:
        out = np.asarray(arr, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingDimensionError(
            "embedding", f"expected a numeric array of shape (n, d) = ({n_texts}, {dimensions}): {exc}"
        ) from exc
    if out.ndim == 1 and n_texts == 1 and out.shape[0] == dimensions:
        out = out.reshape(1, dimensions)
    if out.ndim != 2 or out.shape != (n_texts, dimensions):
        raise EmbeddingDimensionError(
            "embedding",
            f"expected shape (n, d) = ({n_texts}, {dimensions}), got {tuple(out.shape)}",
        )
    if out.size and not np.isfinite(out).all():
        raise EmbeddingDimensionError("embedding", "vectors contain NaN or infinite values")
    return np.ascontiguousarray(out)


def l2_normalise(arr: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    unit: np.ndarray = (arr / norms).astype(np.float32, copy=False)
    return unit


def check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise InvalidInputError("texts", "expected a list of strings, got one string (wrap it in a list)")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidInputError(f"texts[{i}]", f"expected a string, got {type(t).__name__}")
    return out


def check_batch_size(batch_size: Any) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise InvalidInputError("batch_size", f"must be a positive integer, got {batch_size!r}")
    return batch_size
