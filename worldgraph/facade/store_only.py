"""Answers that need the graph store alone, for short-lived processes (the command line).

``WorldModel.open`` opens the store, the LanceDB index (lancedb, pyarrow) and the embedder
(onnxruntime and its model): seconds of imports and loading that ``worldgraph stats`` does not
need. ``stats`` here opens the store read-only and answers what ``WorldModel.stats`` answers, with
the same keys in the same order: ``indexed`` is what the store marks as held by the index (equal to
the index's row count once nothing is pending), ``embedder`` the model recorded beside the index.
It returns None when it cannot answer that way (an index on an object store, one without its
label, or an embedder chosen by the settings), and the caller opens the WorldModel instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from worldgraph.access import open_storage
from worldgraph.config import WorldGraphConfig
from worldgraph.names import check_tenant
from worldgraph.world.pending import waiting_reason

__all__ = ["stats"]

META_FILE = "index_meta.json"  # the index's label file (memory/index/schema.py writes it)


def stats(path: str | Path, graph: str, tenant_id: str) -> dict[str, Any] | None:
    """``WorldModel.stats(tenant_id)`` of the folder at ``path`` from the store alone, or None."""
    check_tenant(tenant_id)
    cfg = WorldGraphConfig.from_env()
    if "://" in cfg.lancedb_path or cfg.embedding_provider != "auto":
        return None  # an object store to ask, or a chosen embedder whose match with the index the open checks
    root = Path(path)
    embedder = _recorded_embedder(root / cfg.lancedb_path)
    if embedder is None:
        return None
    store, _ = open_storage(root, graph, cfg, read_only=True)
    try:
        out: dict[str, Any] = dict(store.stats(tenant_id))
        out["environments"] = store.environments(tenant_id)
        out["world_pending_reason"] = waiting_reason(store, tenant_id)
        out["graph_store"] = store.name
        out["cypher_sandbox"] = store.cypher_sandbox()
        out["embedder"] = embedder
        return out
    finally:
        store.close()


def _recorded_embedder(index_dir: Path) -> str | None:
    try:
        name = json.loads((index_dir / META_FILE).read_text(encoding="utf-8")).get("embedder")
    except (OSError, ValueError, AttributeError):
        return None
    return name if isinstance(name, str) and name else None
