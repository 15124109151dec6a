"""The world path of ``WorldModel`` beyond the world updater (world/updater.py): a packet given to
``update_world`` checked, an environment's graph read, the tenant's environments listed."""

from __future__ import annotations

from typing import Any

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.kg.store import GraphStore
from worldgraph.limits import check_value
from worldgraph.names import check_env, check_tenant, require_environment


def check_packet(cfg: WorldGraphConfig, packet: Any) -> None:
    """A packet given to ``update_world``: within ``max_experience_bytes``; one given as a dict (not
    stored yet: it is stored from these fields first) names its tenant, id, environment and time."""
    check_value(packet, "packet", cfg, cfg.max_experience_bytes, "max_experience_bytes")
    if isinstance(packet, dict):  # a packet not stored yet is stored from these fields first
        for key in ("tenant_id", "id", "env_name", "created_at"):
            if not isinstance(packet.get(key), str) or not packet[key]:
                raise InvalidInputError(f"packet.{key}", "is required (give the packet returned by observe_round)")
        check_tenant(packet["tenant_id"], "packet.tenant_id")
        check_env(packet["env_name"])


def world_graph(store: GraphStore, tenant_id: str, env_name: str) -> dict[str, Any]:
    """``WorldModel.world_graph`` once the tenant is checked."""
    graph = store.world_graph(tenant_id, check_env(env_name))
    if graph.get("meta") is None and not graph.get("scenes") and not graph.get("nodes"):
        require_environment(store, tenant_id, env_name)
    return graph


def environments(store: GraphStore, tenant_id: str) -> list[dict[str, Any]]:
    """``WorldModel.list_environments`` once the tenant is checked."""
    out = []
    for env, meta in store.environment_metas(tenant_id).items():
        counts = (meta or {}).get("counts") or {}
        out.append({"env_name": env, "graph_version": (meta or {}).get("graph_version", 0),
                    "nodes": counts.get("nodes", 0), "edges": counts.get("edges", 0),
                    "rules": counts.get("rules", 0), "scenes": counts.get("scenes", 0),
                    "updated_at": (meta or {}).get("updated_at")})
    return out
