"""An environment's world graph as the canonical snapshot folder, and back (``WorldModel.export``
and ``import_snapshot``): the checks and tenant handling around ``snapshot``'s writer and reader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from worldgraph.errors import InvalidInputError, NotFoundError
from worldgraph.export.snapshot import FILES, META_FILE, read_snapshot, snapshot_dir, write_snapshot
from worldgraph.kg.store import WorldStore
from worldgraph.names import check_env, check_tenant

__all__ = ["export_environment", "find_snapshot", "import_environment"]

# progress(done, total) over the steps of an export or import (read, then write)
Progress = Callable[[int, int], None]


def _step(progress: Progress | None, done: int, total: int = 2) -> None:
    if progress is not None:
        progress(done, total)


def export_environment(store: WorldStore, tenant_id: str, env_name: str, out_dir: Path, app_name: str,
                       progress: Progress | None = None) -> Path:
    """Write the five canonical files of one environment; NotFoundError (listing the known
    environments) when it has no world graph. ``app_name``: used when the graph's meta has none."""
    check_tenant(tenant_id)
    check_env(env_name)
    _step(progress, 0)
    graph = store.world_graph(tenant_id, env_name)
    _step(progress, 1)
    if graph.get("meta") is None and not graph["nodes"] and not graph["scenes"]:
        known = ", ".join(store.environments(tenant_id)) or "none yet"
        raise NotFoundError("environment", env_name, f"tenant {tenant_id!r} has no world graph there "
                            f"(environments: {known})")
    app = (graph.get("meta") or {}).get("app_name") or app_name
    path = write_snapshot(graph, snapshot_dir(out_dir, tenant_id, app, env_name))
    _step(progress, 2)
    return path


def import_environment(store: WorldStore, tenant_id: str, path: Path, env_name: str | None = None,
                       progress: Progress | None = None) -> dict[str, Any]:
    """Load a snapshot into ``tenant_id`` (its records are moved to that tenant), replacing that
    environment's graph; returns what was loaded. ``path`` is a snapshot folder, or the folder
    given to ``export`` (``find_snapshot`` picks the snapshot in it, ``env_name`` choosing among several)."""
    check_tenant(tenant_id)
    _step(progress, 0)
    graph = read_snapshot(find_snapshot(path, tenant_id, env_name))
    _step(progress, 1)
    meta = graph.get("meta") or {}
    env = check_env(meta.get("env_name"))
    for key in ("nodes", "edges", "rules", "scenes"):
        for rec in graph.get(key, []):
            if rec.get("tenant_id", tenant_id) != tenant_id:
                rec["tenant_id"] = tenant_id
    if meta.get("tenant_id", tenant_id) != tenant_id:
        meta["tenant_id"] = tenant_id
    store.replace_world(tenant_id, env, graph)
    _step(progress, 2)
    return {"tenant_id": tenant_id, "env_name": env,
            "counts": {k: len(graph.get(k, [])) for k in ("nodes", "edges", "rules", "scenes")}}


def _is_snapshot(folder: Path) -> bool:
    return (folder / META_FILE).is_file() or any((folder / name).is_file() for name in FILES.values())


def find_snapshot(path: Path, tenant_id: str, env_name: str | None = None) -> Path:
    """The snapshot folder at ``path``: ``path`` itself when it holds the snapshot files, else the
    one snapshot ``export --out path`` wrote below it (``<tenant>/<app>/world_model_graph/<env>``).
    With several there, ``env_name`` picks by environment, then ``tenant_id`` by tenant; still
    several (or none) is an error naming what is there and how to choose."""
    folder = Path(path)
    if not folder.is_dir() or _is_snapshot(folder):
        return folder  # read_snapshot reports a missing folder or file itself
    found = sorted(p for pattern in ("*/*/world_model_graph/*", "*/world_model_graph/*", "world_model_graph/*", "*")
                   for p in folder.glob(pattern) if p.is_dir() and _is_snapshot(p))
    if env_name is not None:
        found = [p for p in found if p.name == env_name]
    if len(found) > 1:
        mine = [p for p in found if tenant_id in p.relative_to(folder).parts[:1]]
        found = mine or found
    if len(found) == 1:
        return found[0]
    if not found:
        what = f"no snapshot of environment {env_name!r}" if env_name else "no snapshot (nodes.jsonl ... meta.json)"
        raise NotFoundError("snapshot folder", str(folder), f"{what} in it or in its "
                            "<tenant>/<app>/world_model_graph/<env> folders (what `export --out` writes)")
    shown = ", ".join(str(p.relative_to(folder)) for p in found[:5]) + (", ..." if len(found) > 5 else "")
    raise InvalidInputError("dir", f"{folder} holds {len(found)} snapshots ({shown}); give one of these folders, "
                            "or choose with --env ENV", str(folder))
