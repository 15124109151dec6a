"""Opening and closing a ``WorldModel``: the settings, the embedder, the store (writable or
read-only: access.py decides) and the index, made in that order and undone if a later one fails;
and closing the store within a deadline."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worldgraph.access import open_storage
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError, ReadOnlyError
from worldgraph.kg.store import GraphStore
from worldgraph.memory.embeddings import Embedder, embedder_name, index_name, make_embedder
from worldgraph.memory.index.episode_index import EpisodeIndex, stored_embedder_name
from worldgraph.memory.index.objectstore import index_location

log = logging.getLogger("worldgraph")


@dataclass(frozen=True)
class Parts:
    """What a WorldModel is made of (its constructor's arguments); ``read_only_reason``: None when
    it is writable."""

    path: Path
    store: GraphStore
    index: EpisodeIndex
    embedder: Embedder
    config: WorldGraphConfig
    read_only_reason: str | None


def open_parts(path: str | Path, embedder: Embedder | None, graph: str | GraphStore, config: WorldGraphConfig | None,
               rebuild_index: bool, read_only: bool, overrides: dict[str, Any]) -> Parts:
    """The parts of ``WorldModel.open(path, ...)`` (its arguments, ``overrides`` its keywords); with
    ``rebuild_index``, the store's episodes are marked pending before the index is dropped."""
    cfg = config or WorldGraphConfig.from_env(**overrides)
    root = Path(path)
    # A folder keeps the local model that built its index (see memory/embedders/factory.py).
    built_by = None if rebuild_index else stored_embedder_name(index_location(root, cfg.lancedb_path),
                                                             cfg.object_store_timeout_seconds)
    emb = embedder or make_embedder(cfg, built_by)
    for attr in ("dimensions", "embed"):
        if not hasattr(emb, attr):
            raise InvalidInputError("embedder", f"has no {attr!r}: give an object with .dimensions and .embed(texts)")
    store, reason = open_storage(root, graph, cfg, read_only)
    try:
        if reason is not None and rebuild_index:
            raise ReadOnlyError("rebuild_index", reason)
        if rebuild_index:
            store.mark_pending()  # before the tables are dropped (see reindex)
        index = EpisodeIndex(index_location(root, cfg.lancedb_path), int(emb.dimensions),
                             index_name(embedder_name(emb), built_by), cfg,
                             rebuild=rebuild_index, read_only=reason is not None)
    except Exception:
        store.close()
        raise
    return Parts(root, store, index, emb, cfg, reason)


def close_store(store: GraphStore, deadline: float | None) -> None:
    """Close ``store``; by ``deadline`` (``time.monotonic()``), else it is left to the process's exit."""
    if deadline is None:
        store.close()
        return
    closer = threading.Thread(target=store.close, name="worldgraph-store-close", daemon=True)
    closer.start()
    closer.join(max(0.0, deadline - time.monotonic()))
    if closer.is_alive():
        log.warning("the %s store did not close within the shutdown deadline; leaving it to the process "
                    "exit", store.name)
