"""The REST routes: each parses its input with a pydantic model, calls one WorldModel method for
the key's tenant, and returns the result. Errors are mapped in ``errors`` (one place).

The facade blocks (SQLite, LanceDB, Neo4j), so each route hands its one facade call to the
threadpool (``in_thread``) and the event loop stays free for other requests. The routes
themselves are ``async``: a plain ``def`` route would cost two more trips to the threadpool per
request (FastAPI runs the route and then its response validation there), ~20 % of the server's
CPU for a small request. The key check is a sync dependency (a store read: it runs in the
threadpool before the body is parsed, so a bad key is a 401 whatever the body).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool as in_thread

from worldgraph import __version__
from worldgraph.server.auth import Tenant
from worldgraph.server.models import (
    AgentRound,
    CypherRequest,
    CypherResponse,
    EpisodeIds,
    EpisodesResponse,
    ErrorResponse,
    ExperienceBatch,
    ExperiencesBody,
    FeedbackOut,
    FeedbackRequest,
    GraphDelta,
    Health,
    MergeReportOut,
    Readiness,
    RecallRequest,
    RecallResponse,
    RoundResponse,
    WorldGraphOut,
)
from worldgraph.service import WorldModel


async def _world_model(request: Request) -> WorldModel:
    return request.app.state.wm  # type: ignore[no-any-return]


WM = Annotated[WorldModel, Depends(_world_model)]

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No API key, or an unknown or revoked one"},
    413: {"model": ErrorResponse, "description": "Body over max_request_bytes"},
    422: {"model": ErrorResponse, "description": "Malformed JSON or a bad field (named in error.field)"},
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "Not found in this tenant (another tenant's ids are not found too)"}}

health_router = APIRouter()
router = APIRouter(prefix="/v1", responses=_ERRORS)


@health_router.get("/health", response_model=Health, tags=["service"], summary="Liveness (no key needed)")
async def health(wm: WM) -> dict[str, Any]:
    return {"status": "ok", "version": __version__, "graph_store": wm.store.name}


# ------------------------------------------------------------------------------ memory
@router.post("/experiences", response_model=EpisodeIds, tags=["memory"], summary="Record agent runs",
             description="One experience (an AgentExperience object), or a batch "
                         "`{\"experiences\": [...], \"canvases\": [...]}` stored in one transaction.")
async def record_experiences(body: Annotated[ExperiencesBody, Body()], tenant: Tenant, wm: WM) -> dict[str, Any]:
    if isinstance(body, ExperienceBatch):
        canvases: list[Any] | None = body.canvases
        ids = await in_thread(wm.record_experiences, tenant, body.experiences, canvases)
    else:
        ids = await in_thread(wm.record_experiences, tenant, [body])
    return {"episode_ids": ids}


@router.post("/recall", response_model=RecallResponse, tags=["memory"], summary="Recall past runs by meaning",
             description="Candidates by vector similarity (plus BM25 hits), filtered, scored (semantic, recency, "
                         "feedback, confidence), diversified; the best `limit`.")
async def recall_experiences(body: RecallRequest, tenant: Tenant, wm: WM) -> dict[str, Any]:
    return {"results": await in_thread(wm.recall_experiences, tenant, body.agent_role, body.query, body.limit,
                                       body.options)}


@router.post("/episodes/{episode_id}/feedback", response_model=FeedbackOut, tags=["memory"],
             responses=_NOT_FOUND, summary="Rate an episode in [-1, 1]")
async def submit_feedback(episode_id: str, body: FeedbackRequest, tenant: Tenant, wm: WM) -> dict[str, Any]:
    return await in_thread(wm.submit_feedback, tenant, episode_id, body.score, body.notes, body.category,
                           body.created_by)


@router.get("/agents/{agent_id}/episodes", response_model=EpisodesResponse, tags=["memory"], responses=_NOT_FOUND,
            summary="An agent's newest episodes")
async def get_agent_episodes(agent_id: str, tenant: Tenant, wm: WM,
                             limit: Annotated[int, Query(gt=0, le=1000, description="How many, newest first")] = 30,
                             ) -> dict[str, Any]:
    return {"episodes": await in_thread(wm.get_agent_episodes, tenant, agent_id, limit)}


@router.get("/agents/{agent_id}/readiness", response_model=Readiness, tags=["memory"], responses=_NOT_FOUND,
            summary="Graduation exam over an agent's last runs")
async def readiness(agent_id: str, tenant: Tenant, wm: WM,
                    window: Annotated[int, Query(gt=0, le=1000, description="How many of its newest runs")] = 30,
                    ) -> dict[str, Any]:
    return await in_thread(wm.readiness, tenant, agent_id, window)


# ------------------------------------------------------------------------------ world graph
@router.post("/envs/{env}/rounds", response_model=RoundResponse, tags=["world"], summary="Observe an agent round",
             description="Records the round as an episode. When its response ends with `FLAG_CURIOSITY: yes`, a "
                         "scene packet is stored (pending) and the server's background worker extracts and merges "
                         "a graph delta from it with the configured LLM.")
async def observe_round(env: str, body: AgentRound, tenant: Tenant, wm: WM) -> dict[str, Any]:
    return {"packet": await in_thread(wm.observe_round, tenant, env, body.model_dump())}


@router.post("/envs/{env}/deltas", response_model=MergeReportOut, tags=["world"],
             summary="Merge a graph delta you already have (no LLM)")
async def apply_delta(env: str, delta: Annotated[GraphDelta, Body()], tenant: Tenant, wm: WM,
                      reason: Annotated[str | None, Query(description="Why (the scene's trigger reason)")] = None,
                      ) -> dict[str, Any]:
    report = await in_thread(wm.apply_delta, tenant, env, delta, reason)
    return report.to_dict()  # type: ignore[no-any-return]


@router.get("/envs/{env}/graph", response_model=WorldGraphOut, tags=["world"], responses=_NOT_FOUND,
            summary="One environment's graph: nodes, edges, rules, scenes, meta")
async def world_graph(env: str, tenant: Tenant, wm: WM) -> dict[str, Any]:
    return await in_thread(wm.world_graph, tenant, env)


@router.get("/envs/{env}/view", response_class=HTMLResponse, tags=["world"], responses=_NOT_FOUND,
            summary="One self-contained HTML page drawing the environment's graph")
async def view(env: str, tenant: Tenant, wm: WM) -> HTMLResponse:
    from worldgraph.server.headers import with_frame_ancestors
    from worldgraph.server.view import render_view, view_csp

    page = await in_thread(lambda: render_view(wm.world_graph(tenant, env), env))
    return HTMLResponse(page, headers={"Content-Security-Policy": with_frame_ancestors(view_csp())})


@router.post("/cypher", response_model=CypherResponse, tags=["world"],
             responses={403: {"model": ErrorResponse, "description": "Refused: writes, procedures, or not "
                                                                      "scoped to $tenant_id"},
                        400: {"model": ErrorResponse, "description": "Neo4j could not run the query"},
                        501: {"model": ErrorResponse, "description": "The server runs the embedded store"}},
             summary="Read-only, tenant-scoped Cypher (Neo4j store)")
async def cypher(body: CypherRequest, tenant: Tenant, wm: WM) -> dict[str, Any]:
    return {"rows": await in_thread(wm.cypher, tenant, body.query, body.params)}
