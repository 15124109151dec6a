"""The REST routes of the memory lifecycle: browse (episodes by cursor, one episode, agents,
environments, stats) and forget (an episode, an agent's or a session's episodes, an environment,
the key's own tenant). Every DELETE needs a key with the ``forget`` scope (``auth.require_tenant``);
another tenant's ids are 404; the audit row of a forget names the key (``auth.key_actor``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool as in_thread

from worldgraph.server.auth import Tenant
from worldgraph.server.errors import ApiError
from worldgraph.server.models import ErrorResponse
from worldgraph.server.results import EpisodeOut, ForgetReportOut
from worldgraph.server.routes import EPISODE_ID_RESPONSES, ERROR_RESPONSES, NOT_FOUND_RESPONSES, WM

_FORBIDDEN: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorResponse, "description": "The key lacks the `forget` scope (or the server is read-only)"}}
_LIST_PARAMS = frozenset({"agent_id", "session_id", "since", "until", "limit", "cursor", "metadata"})

router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)


class EpisodePage(BaseModel):
    episodes: list[EpisodeOut] = Field(description="Episodes, newest first (timestamp, then id)")
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; null on the last page")


class StatsOut(BaseModel):
    episodes: int
    agents: int
    feedback: int
    canvases: int
    canvas_audits: int
    scenes: int
    nodes: int
    edges: int
    rules: int
    indexed: int = Field(description="Episodes the index holds (recall finds them).")
    environments: list[str]
    world_pending_reason: str | None = Field(description="Why scene packets wait or failed; null when none do.")
    graph_store: str
    cypher_sandbox: str = Field(description="How Cypher is confined: landlock or unsandboxed (the embedded store), "
                                            "neo4j-plan (Neo4j); docs/cypher.md")
    embedder: str


class AgentOut(BaseModel):
    agent_id: str
    agent_role: str
    episodes: int
    last_seen: str | None


class AgentsOut(BaseModel):
    agents: list[AgentOut]


class EnvOut(BaseModel):
    env_name: str
    graph_version: int
    nodes: int
    edges: int
    rules: int
    scenes: int
    updated_at: str | None


class EnvsOut(BaseModel):
    envs: list[EnvOut]


class TenantConfirm(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirm: str = Field(description="The key's own tenant id, spelled out: forgetting a tenant cannot be undone")


def _json_query(value: str | None, name: str) -> Any:
    """A query parameter that holds JSON (None passes)."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ApiError(422, "invalid_input", f"must be JSON ({exc})", name) from None


@router.get("/episodes", response_model=EpisodePage, tags=["memory"], summary="Page through episodes",
            responses={400: {"model": ErrorResponse, "description": "An unknown query parameter (e.g. offset)"}},
            description="Newest first. Pages are a keyset cursor, never an offset: pass `next_cursor` as "
                        "`?cursor=` with the same filters.")
async def list_episodes(request: Request, tenant: Tenant, wm: WM,
                        agent_id: Annotated[str | None, Query(description="Only this agent's")] = None,
                        session_id: Annotated[str | None, Query(description="Only this session's")] = None,
                        since: Annotated[str | None, Query(description="ISO-8601, inclusive")] = None,
                        until: Annotated[str | None, Query(description="ISO-8601, exclusive")] = None,
                        limit: Annotated[int, Query(gt=0, le=1000, description="Page size")] = 100,
                        cursor: Annotated[str | None, Query(description="next_cursor of the previous page")] = None,
                        metadata: Annotated[str | None, Query(description="Conditions on the episodes' metadata, as "
                                                              "JSON: {\"field\": value} or {\"field\": {\"$gt\": 3}}")
                                            ] = None,
                        ) -> dict[str, Any]:
    for name in request.query_params:
        if name not in _LIST_PARAMS:
            raise ApiError(400, "invalid_input", f"unknown query parameter {name!r}: pages are fetched with "
                           "?cursor= (the previous page's next_cursor), never an offset; parameters: "
                           + ", ".join(sorted(_LIST_PARAMS)), name)
    page = await in_thread(wm.list_episodes, tenant, agent_id, session_id, since, until, limit, cursor,
                           _json_query(metadata, "metadata"))
    return page.to_dict("episodes")


@router.get("/episodes/{episode_id}", response_model=EpisodeOut, tags=["memory"], responses=EPISODE_ID_RESPONSES,
            summary="One episode by id",
            description="`episode_id` is the full id or a unique start of it (at least 4 characters).")
async def get_episode(episode_id: str, tenant: Tenant, wm: WM) -> dict[str, Any]:
    return dict(await in_thread(wm.get_episode, tenant, episode_id))


# a forget reports only the kinds of record it touched (response_model_exclude_unset)
@router.delete("/episodes/{episode_id}", response_model=ForgetReportOut, tags=["forget"],
               response_model_exclude_unset=True,
               responses={**EPISODE_ID_RESPONSES, **_FORBIDDEN}, summary="Forget an episode (needs the forget scope)",
               description="Gone from every read path at once, with its feedback, session links, index rows and "
                           "(for a round) its scene packet; the bytes leave the files with the background purge. "
                           "`episode_id` is the full id or a unique start of it of at least 8 characters.")
async def forget_episode(episode_id: str, request: Request, tenant: Tenant, wm: WM) -> dict[str, Any]:
    report = await in_thread(wm.forget_episode, tenant, episode_id, request.state.actor)
    return report.to_dict()


@router.delete("/agents/{agent_id:path}", response_model=ForgetReportOut, tags=["forget"],
               response_model_exclude_unset=True,
               responses={**NOT_FOUND_RESPONSES, **_FORBIDDEN},
               summary="Forget every episode of an agent (needs the forget scope)",
               description="Every episode of the agent (a conversation's speaker, say), as DELETE /v1/episodes/{id} "
                           "forgets one; what live records showed of them (the turns that quoted them, a canvas) "
                           "is derived again.")
async def forget_agent(agent_id: str, request: Request, tenant: Tenant, wm: WM) -> dict[str, Any]:
    report = await in_thread(wm.forget_agent, tenant, agent_id, request.state.actor)
    return report.to_dict()


@router.delete("/sessions/{session_id:path}", response_model=ForgetReportOut, tags=["forget"],
               response_model_exclude_unset=True,
               responses={**NOT_FOUND_RESPONSES, **_FORBIDDEN},
               summary="Forget every episode of a session (needs the forget scope)",
               description="Every episode of the session (a chat, a thread, a run), as DELETE /v1/episodes/{id} "
                           "forgets one.")
async def forget_session(session_id: str, request: Request, tenant: Tenant, wm: WM) -> dict[str, Any]:
    report = await in_thread(wm.forget_session, tenant, session_id, request.state.actor)
    return report.to_dict()


@router.get("/agents", response_model=AgentsOut, tags=["memory"], summary="The tenant's agents")
async def list_agents(tenant: Tenant, wm: WM) -> dict[str, Any]:
    return {"agents": await in_thread(wm.list_agents, tenant)}


@router.get("/envs", response_model=EnvsOut, tags=["world"], summary="The tenant's environments")
async def list_environments(tenant: Tenant, wm: WM) -> dict[str, Any]:
    return {"envs": await in_thread(wm.list_environments, tenant)}


@router.delete("/envs/{env}", response_model=ForgetReportOut, tags=["forget"],
               response_model_exclude_unset=True,
               responses={**NOT_FOUND_RESPONSES, **_FORBIDDEN},
               summary="Forget an environment's world graph, scenes and packets (needs the forget scope)")
async def forget_environment(env: str, request: Request, tenant: Tenant, wm: WM) -> dict[str, Any]:
    report = await in_thread(wm.forget_environment, tenant, env, request.state.actor)
    return report.to_dict()


@router.delete("/tenant", response_model=ForgetReportOut, tags=["forget"],
               response_model_exclude_unset=True,
               responses=_FORBIDDEN,
               summary="Forget every record of the key's own tenant, its API keys included (needs the forget scope)")
async def forget_tenant(body: Annotated[TenantConfirm, Body()], request: Request, tenant: Tenant,
                        wm: WM) -> dict[str, Any]:
    if body.confirm != tenant:
        raise ApiError(422, "invalid_input", "confirm must be this key's tenant id, spelled out; nothing was "
                       "forgotten", "confirm")
    report = await in_thread(wm.forget_tenant, tenant, request.state.actor)
    return report.to_dict()


@router.get("/stats", response_model=StatsOut, tags=["memory"], summary="Counts of the key's tenant")
async def stats(tenant: Tenant, wm: WM) -> dict[str, Any]:
    return await in_thread(wm.stats, tenant)
