"""Which key scope each operation needs: one table, read by the REST routes (``auth.require_tenant``)
and the MCP tools (``mcp_server``), and by both test matrices.

A key carries scopes (``keys.SCOPES``): ``read`` (every call that only reads, Cypher included),
``write`` (every call that records or changes something) and ``forget`` (every call that
erases). An operation is one row of ``OPERATIONS``: the facade call it makes, the scope it needs,
its REST route (method and path template, as FastAPI declares it) and its MCP tool, either
``None`` when that surface has none.

**Adding a route or a tool: add (or extend) its row here.** A ``/v1`` route or a tool without a
row is refused with 403 naming the missing row (fail closed), and
``tests/unit/server/test_scopes.py`` fails for every route of the app and every tool of the MCP
server that has none, so a new one cannot ship unscoped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["OPERATIONS", "Operation", "Scope", "rest_scope", "tool_scope"]

Scope = Literal["read", "write", "forget"]


@dataclass(frozen=True)
class Operation:
    name: str  # the WorldModel call it makes
    scope: Scope
    rest: tuple[str, str] | None  # (method, path template) of its REST route, if any
    mcp: str | None  # its MCP tool, if any


OPERATIONS: tuple[Operation, ...] = (
    # memory
    Operation("record_experience", "write", ("POST", "/v1/experiences"), "record_experience"),
    Operation("record_conversation", "write", ("POST", "/v1/conversations"), "record_conversation"),
    Operation("recall_experiences", "read", ("POST", "/v1/recall"), "recall_experiences"),
    Operation("submit_feedback", "write", ("POST", "/v1/episodes/{episode_id}/feedback"), "submit_feedback"),
    Operation("get_agent_episodes", "read", ("GET", "/v1/agents/{agent_id}/episodes"), "get_agent_episodes"),
    Operation("readiness", "read", ("GET", "/v1/agents/{agent_id}/readiness"), "readiness"),
    Operation("list_episodes", "read", ("GET", "/v1/episodes"), "list_episodes"),
    Operation("get_episode", "read", ("GET", "/v1/episodes/{episode_id}"), "get_episode"),
    Operation("list_agents", "read", ("GET", "/v1/agents"), None),
    Operation("stats", "read", ("GET", "/v1/stats"), None),
    # world
    Operation("observe_round", "write", ("POST", "/v1/envs/{env}/rounds"), "observe_round"),
    Operation("retry_world_updates", "write", ("POST", "/v1/world/retry"), None),
    Operation("apply_delta", "write", ("POST", "/v1/envs/{env}/deltas"), "apply_delta"),
    Operation("world_graph", "read", ("GET", "/v1/envs/{env}/graph"), "world_graph"),
    Operation("world_view", "read", ("GET", "/v1/envs/{env}/view"), None),
    Operation("export", "read", ("GET", "/v1/envs/{env}/snapshot"), None),
    Operation("import_snapshot", "write", ("PUT", "/v1/envs/{env}/snapshot"), None),
    Operation("list_environments", "read", ("GET", "/v1/envs"), None),
    Operation("cypher", "read", ("POST", "/v1/cypher"), "cypher"),
    Operation("search_world", "read", ("POST", "/v1/world/search"), "search_world"),
    Operation("context", "read", ("POST", "/v1/context"), "context"),
    # forgetting
    Operation("forget_episode", "forget", ("DELETE", "/v1/episodes/{episode_id}"), "forget_episode"),
    Operation("forget_agent", "forget", ("DELETE", "/v1/agents/{agent_id:path}"), "forget_agent"),
    Operation("forget_session", "forget", ("DELETE", "/v1/sessions/{session_id:path}"), "forget_session"),
    Operation("forget_environment", "forget", ("DELETE", "/v1/envs/{env}"), None),
    Operation("forget_tenant", "forget", ("DELETE", "/v1/tenant"), None),
)

_BY_ROUTE = {op.rest: op.scope for op in OPERATIONS if op.rest is not None}
_BY_TOOL = {op.mcp: op.scope for op in OPERATIONS if op.mcp is not None}


def rest_scope(method: str, template: str) -> Scope | None:
    """The scope the route ``method template`` needs (HEAD as GET); None: it has no row."""
    return _BY_ROUTE.get(("GET" if method == "HEAD" else method, template))


def tool_scope(name: str) -> Scope | None:
    """The scope the MCP tool ``name`` needs; None: it has no row."""
    return _BY_TOOL.get(name)
