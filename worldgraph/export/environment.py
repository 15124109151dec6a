"""An environment's world graph as the canonical snapshot folder, and back (``WorldModel.export``
and ``import_snapshot``): the checks and tenant handling around ``snapshot``'s writer and reader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from worldgraph.errors import NotFoundError
from worldgraph.export.snapshot import read_snapshot, snapshot_dir, write_snapshot
from worldgraph.kg.store import WorldStore
from worldgraph.names import check_env, check_tenant

__all__ = ["export_environment", "import_environment"]


def export_environment(store: WorldStore, tenant_id: str, env_name: str, out_dir: Path, app_name: str) -> Path:
    """Write the five canonical files of one environment; NotFoundError (listing the known
    environments) when it has no world graph. ``app_name``: used when the graph's meta has none."""
    check_tenant(tenant_id)
    check_env(env_name)
    graph = store.world_graph(tenant_id, env_name)
    if graph.get("meta") is None and not graph["nodes"] and not graph["scenes"]:
        known = ", ".join(store.environments(tenant_id)) or "none yet"
        raise NotFoundError("environment", env_name, f"tenant {tenant_id!r} has no world graph there "
                            f"(environments: {known})")
    app = (graph.get("meta") or {}).get("app_name") or app_name
    return write_snapshot(graph, snapshot_dir(out_dir, tenant_id, app, env_name))


def import_environment(store: WorldStore, tenant_id: str, path: Path) -> dict[str, Any]:
    """Load a folder written by ``export_environment`` into ``tenant_id`` (its records are moved to
    that tenant), replacing that environment's graph; returns what was loaded."""
    check_tenant(tenant_id)
    graph = read_snapshot(path)
    meta = graph.get("meta") or {}
    env = check_env(meta.get("env_name"))
    for key in ("nodes", "edges", "rules", "scenes"):
        for rec in graph.get(key, []):
            if rec.get("tenant_id", tenant_id) != tenant_id:
                rec["tenant_id"] = tenant_id
    if meta.get("tenant_id", tenant_id) != tenant_id:
        meta["tenant_id"] = tenant_id
    store.replace_world(tenant_id, env, graph)
    return {"tenant_id": tenant_id, "env_name": env,
            "counts": {k: len(graph.get(k, [])) for k in ("nodes", "edges", "rules", "scenes")}}
