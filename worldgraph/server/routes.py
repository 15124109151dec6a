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

import tempfile
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool as in_thread

from worldgraph import __version__
from worldgraph.config import llm_configured
from worldgraph.errors import InvalidInputError, NotFoundError, NotSupportedError
from worldgraph.export.snapshot import read_snapshot, write_snapshot
from worldgraph.names import check_env
from worldgraph.server.auth import Tenant
from worldgraph.server.metrics import metrics_of
from worldgraph.server.models import (
    AgentRound,
    ContextRequest,
    ConversationRequest,
    CypherRequest,
    CypherResponse,
    ErrorResponse,
    ExperienceBatch,
    ExperiencesBody,
    FeedbackRequest,
    GraphDelta,
    Health,
    RecallRequest,
    Snapshot,
    SnapshotOut,
    WorldSearchRequest,
)
from worldgraph.server.results import (
    ContextOut,
    EpisodeIds,
    EpisodesResponse,
    FeedbackOut,
    ImportResult,
    MergeReportOut,
    Readiness,
    RecallResponse,
    RetryResponse,
    RoundResponse,
    WorldGraphOut,
    WorldSearchResponse,
)
from worldgraph.service import WorldModel
from worldgraph.world.pending import waiting_reason


async def _world_model(request: Request) -> WorldModel:
    return request.app.state.wm  # type: ignore[no-any-return]


WM = Annotated[WorldModel, Depends(_world_model)]

# The error answers every /v1 route may give, and a route's 404, as OpenAPI response documents
# (lifecycle_routes.py uses them too).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No API key, or an unknown or revoked one"},
    413: {"model": ErrorResponse, "description": "Body over max_request_bytes"},
    422: {"model": ErrorResponse, "description": "Malformed JSON or a bad field (named in error.field)"},
}
NOT_FOUND_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "Not found in this tenant (another tenant's ids are not found too)"}}
# routes that take an episode id take a unique start of it too (WorldModel resolves it: facade/ids.py)
EPISODE_ID_RESPONSES: dict[int | str, dict[str, Any]] = {
    **NOT_FOUND_RESPONSES,
    409: {"model": ErrorResponse, "description": "ambiguous_id: the start of several episode ids (listed in the "
                                                 "message): give more characters"}}

# Writes take an Idempotency-Key header: a retry with the same key and body gets the first answer
# and stores nothing new (worldgraph.facade.idempotency; 422 for the same key with another body,
# 409 while the first request is still being answered).
IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", description="Any string of 1-255 printable ASCII characters (a UUID): a retry with "
    "the same key and body within 24 h returns the first answer and stores nothing new; the same key with "
    "another body is 422, and 409 while the first request is still being answered.")]
IDEMPOTENT_RESPONSES: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "conflict: a request with this Idempotency-Key is still being "
                                                 "answered (or ambiguous_id: the start of several episode ids)"}}

health_router = APIRouter()
router = APIRouter(prefix="/v1", responses=ERROR_RESPONSES)


@health_router.get("/health", response_model=Health, tags=["service"], summary="Liveness (no key needed)")
async def health(wm: WM) -> dict[str, Any]:
    return {"status": "ok", "version": __version__, "graph_store": wm.store.name,
            "cypher_sandbox": cypher_mode(wm)}


def cypher_mode(wm: WorldModel) -> str:
    """How Cypher is confined here ("landlock", "unsandboxed", "neo4j-plan"), and whether API keys
    may use it without the sandbox ("unsandboxed, allowed for API keys")."""
    mode = wm.store.cypher_sandbox()
    if mode == "unsandboxed":
        mode += ", " + ("allowed" if wm.config.cypher_allow_unsandboxed else "refused") + " for API keys"
    return mode


def refuse_unsandboxed(wm: WorldModel) -> None:
    """Cypher from an API key needs the operating system's sandbox, unless the operator opted in
    (docs/cypher.md): NotSupportedError otherwise."""
    if wm.store.cypher_sandbox() == "unsandboxed" and not wm.config.cypher_allow_unsandboxed:
        raise NotSupportedError(
            "this server runs embedded Cypher without the operating system's sandbox (Landlock, Linux 5.13 or "
            "later, is not available here), so it does not run Cypher for API keys; the query was not run. The "
            "operator may allow it anyway with WORLDGRAPH_CYPHER_ALLOW_UNSANDBOXED=true (queries then run in a "
            "read-only child process behind the text guard alone: docs/cypher.md), or serve on a Linux kernel "
            "with Landlock, or use the Neo4j store")


# ------------------------------------------------------------------------------ memory
@router.post("/experiences", response_model=EpisodeIds, tags=["memory"], summary="Record agent runs",
             responses=IDEMPOTENT_RESPONSES,
             description="One experience (an AgentExperience object), or a batch "
                         "`{\"experiences\": [...], \"canvases\": [...]}` stored in one transaction.")
async def record_experiences(body: Annotated[ExperiencesBody, Body()], tenant: Tenant, wm: WM,
                             request: Request, key: IdempotencyKey = None,
                             replace: Annotated[bool, Query(description="An episode_id already recorded is "
                                                            "replaced: that episode forgotten, this one recorded "
                                                            "under its id (an upsert)")] = False) -> dict[str, Any]:
    with metrics_of(request).timed("record"):
        if isinstance(body, ExperienceBatch):
            canvases: list[Any] | None = body.canvases
            ids = await in_thread(wm.record_experiences, tenant, body.experiences, canvases, idempotency_key=key,
                                  replace=replace)
        else:
            ids = await in_thread(wm.record_experiences, tenant, [body], idempotency_key=key, replace=replace)
    return {"episode_ids": ids}


@router.post("/conversations", response_model=EpisodeIds, tags=["memory"], summary="Record a conversation",
             description="A transcript, turn by turn, in order: one episode per turn (speaker -> agent_id, text -> "
                         "task_description, the turn before -> input_summary), linked in time order within "
                         "the session. All turns are checked before anything is recorded.",
             responses=IDEMPOTENT_RESPONSES)
async def record_conversation(body: ConversationRequest, tenant: Tenant, wm: WM,
                              key: IdempotencyKey = None) -> dict[str, Any]:
    # plain dicts, so that the facade's own checks (e.g. a turn may not set agent_id) run on them
    turns = [t.model_dump(exclude_unset=True) for t in body.turns]
    return {"episode_ids": await in_thread(wm.record_conversation, tenant, body.session_id, turns,
                                           idempotency_key=key)}


@router.post("/recall", response_model=RecallResponse, tags=["memory"], summary="Recall past runs by meaning",
             description="Candidates by vector similarity (plus BM25 hits), filtered, scored (semantic, recency, "
                         "feedback, confidence), diversified; the best `limit`.")
async def recall_experiences(body: RecallRequest, tenant: Tenant, wm: WM, request: Request) -> dict[str, Any]:
    with metrics_of(request).timed("recall"):
        return {"results": await in_thread(wm.recall_experiences, tenant, body.agent_role, body.query, body.limit,
                                           body.options)}


@router.post("/episodes/{episode_id}/feedback", response_model=FeedbackOut, tags=["memory"],
             responses={**EPISODE_ID_RESPONSES, **IDEMPOTENT_RESPONSES}, summary="Rate an episode in [-1, 1]",
             description="`episode_id` is the full id or a unique start of it (at least 4 characters). "
                         "`created_by` defaults to the API key's name (anonymous for an unnamed key).")
async def submit_feedback(episode_id: str, body: FeedbackRequest, tenant: Tenant, wm: WM,
                          request: Request, key: IdempotencyKey = None) -> dict[str, Any]:
    created_by = body.created_by or getattr(request.state, "key_name", None)

    def rate() -> Any:
        # the episode id, or a unique start of it (at least 4 characters): WorldModel resolves it
        return wm.submit_feedback(tenant, episode_id, body.score, body.notes, body.category, created_by,
                                  idempotency_key=key)

    return await in_thread(rate)


@router.get("/agents/{agent_id}/episodes", response_model=EpisodesResponse, tags=["memory"], responses=NOT_FOUND_RESPONSES,
            summary="An agent's newest episodes")
async def get_agent_episodes(agent_id: str, tenant: Tenant, wm: WM,
                             limit: Annotated[int, Query(gt=0, le=1000, description="How many, newest first")] = 30,
                             ) -> dict[str, Any]:
    return {"episodes": await in_thread(wm.get_agent_episodes, tenant, agent_id, limit)}


@router.get("/agents/{agent_id}/readiness", response_model=Readiness, tags=["memory"], responses=NOT_FOUND_RESPONSES,
            summary="Graduation exam over an agent's last runs")
async def readiness(agent_id: str, tenant: Tenant, wm: WM,
                    window: Annotated[int, Query(gt=0, le=1000, description="How many of its newest runs")] = 30,
                    ) -> dict[str, Any]:
    return await in_thread(wm.readiness, tenant, agent_id, window)


# ------------------------------------------------------------------------------ world graph
def world_update_note(wm: WorldModel, pending: int, reason: str | None = None) -> str | None:
    """What becomes of ``pending`` scene packets on this server, and what to do when nothing
    will (no LLM configured): the answer of a round or a retry says it, not only the server log."""
    if pending == 0:
        return None
    if not llm_configured():
        return (f"no LLM is configured on the server, so {pending} scene packet(s) stay pending: set OPENAI_API_KEY "
                "(or OPENAI_BASE_URL for a local OpenAI-compatible server) in the server's environment, restart "
                "it, then POST /v1/world/retry (or run `worldgraph world retry`).")
    if not wm.config.world_background_updates:
        return (f"{pending} scene packet(s) pending: background world updates are off on this server "
                "(world_background_updates), so a `worldgraph worker` process merges them.")
    return (f"{pending} scene packet(s) pending: the server's background worker extracts a delta with the LLM and "
            "merges it; the scene's status shows in GET /v1/envs/{env}/graph."
            + (f" Packets of this environment wait because: {reason}" if reason else ""))


def retry_note(wm: WorldModel, reports: list[dict[str, Any]]) -> str | None:
    """Why the packets a retry did not merge wait: no LLM, or each distinct error (the LLM's host
    and what went wrong, never the credentials its address may carry)."""
    pending = sum(1 for r in reports if not r["ok"])
    if pending == 0 or not llm_configured():
        return world_update_note(wm, pending)
    errors: dict[str, int] = {}
    for r in reports:
        if not r["ok"] and r.get("error"):
            errors[str(r["error"])] = errors.get(str(r["error"]), 0) + 1
    return f"{pending} scene packet(s) not merged: " + "; ".join(f"{n} x {e}" for e, n in errors.items())


@router.post("/envs/{env}/rounds", response_model=RoundResponse, tags=["world"], summary="Observe an agent round",
             description="Records the round as an episode. When its response ends with `FLAG_CURIOSITY: yes`, a "
                         "scene packet is stored (pending) and the server's background worker extracts and merges "
                         "a graph delta from it with the configured LLM. Without an LLM on the server the packet "
                         "stays pending: `llm_configured` is false and `note` says how to configure one.",
             responses=IDEMPOTENT_RESPONSES)
async def observe_round(env: str, body: AgentRound, tenant: Tenant, wm: WM, key: IdempotencyKey = None) -> dict[str, Any]:
    packet = await in_thread(wm.observe_round, tenant, env, body.model_dump(), idempotency_key=key)
    pending = int(packet is not None and packet.get("status") == "pending")
    # an earlier packet's failed extraction (the LLM unreachable) is why this one will wait too
    reason = await in_thread(waiting_reason, wm.store, tenant, env) if pending and llm_configured() else None
    return {"packet": packet, "llm_configured": llm_configured(), "note": world_update_note(wm, pending, reason)}


@router.post("/world/retry", response_model=RetryResponse, tags=["world"],
             summary="Re-run pending and failed scene packets now (`worldgraph world retry`)",
             description="Extracts and merges every pending or failed scene packet of the tenant (of one "
                         "environment with `env`), and those left running by a process that died. Needs an LLM "
                         "on the server: without one every packet stays pending, `llm_configured` is false and "
                         "`note` says how to configure one.")
async def retry_updates(tenant: Tenant, wm: WM,
                        env: Annotated[str | None, Query(description="Only this environment")] = None,
                        stale_minutes: Annotated[float, Query(ge=0, description="Also re-run packets left "
                                                              "'running' this long by a process that died")] = 10.0,
                        ) -> dict[str, Any]:
    def run() -> list[dict[str, Any]]:
        if env is not None:
            known = wm.store.environments(tenant)
            if check_env(env) not in known:
                raise NotFoundError("environment", env, f"tenant {tenant!r} has no world graph there "
                                    f"(environments: {', '.join(known) or 'none yet'})")
        return [r.to_dict() for r in wm.retry_updates(tenant, env, stale_minutes * 60)]

    reports = await in_thread(run)
    return {"reports": reports, "llm_configured": llm_configured(), "note": retry_note(wm, reports)}


@router.post("/envs/{env}/deltas", response_model=MergeReportOut, tags=["world"],
             summary="Merge a graph delta you already have (no LLM)", responses=IDEMPOTENT_RESPONSES)
async def apply_delta(env: str, delta: Annotated[GraphDelta, Body()], tenant: Tenant, wm: WM,
                      reason: Annotated[str | None, Query(description="Why (the scene's trigger reason)")] = None,
                      key: IdempotencyKey = None) -> dict[str, Any]:
    report = await in_thread(wm.apply_delta, tenant, env, delta, reason, idempotency_key=key)
    return report.to_dict()


@router.get("/envs/{env}/graph", response_model=WorldGraphOut, tags=["world"], responses=NOT_FOUND_RESPONSES,
            summary="One environment's graph: nodes, edges, rules, scenes, meta")
async def world_graph(env: str, tenant: Tenant, wm: WM) -> dict[str, Any]:
    return await in_thread(wm.world_graph, tenant, env)


@router.get("/envs/{env}/snapshot", response_model=SnapshotOut, tags=["world"], responses=NOT_FOUND_RESPONSES,
            summary="Export an environment's canonical snapshot (`worldgraph export`)",
            description="The records of the five snapshot files (nodes, edges, rules, scenes, meta), each list "
                        "sorted by id with every contract key; PUT it back to import it.")
async def export_snapshot(env: str, tenant: Tenant, wm: WM) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        with tempfile.TemporaryDirectory(prefix="worldgraph-export-") as tmp:
            return read_snapshot(wm.export(tenant, env, tmp))

    return await in_thread(run)


@router.put("/envs/{env}/snapshot", response_model=ImportResult, tags=["world"],
            summary="Import a snapshot into an environment (`worldgraph import`): replaces its graph",
            description="Loads a snapshot (as GET /v1/envs/{env}/snapshot returns it, or the files of "
                        "`worldgraph export`) into this environment of the key's tenant, replacing its world "
                        "graph; records of another tenant are moved to the key's tenant (meta.env_name, when "
                        "given, must be the path's). Everything is checked "
                        "before anything is replaced; a bad record is named (e.g. nodes[3]). The body is bound by "
                        "max_request_bytes: import larger snapshots with `worldgraph import`.")
async def import_snapshot(env: str, body: Snapshot, tenant: Tenant, wm: WM) -> dict[str, Any]:
    def run() -> dict[str, Any]:
        check_env(env)  # before it names a folder
        graph = body.model_dump()
        meta = graph["meta"] or {}
        if meta.get("env_name") not in (None, env):  # its records name that environment too
            raise InvalidInputError("meta.env_name", f"is {meta['env_name']!r}, but the path names {env!r}: import "
                                    f"it at /v1/envs/{meta['env_name']}/snapshot")
        graph["meta"] = {**meta, "env_name": env}
        with tempfile.TemporaryDirectory(prefix="worldgraph-import-") as tmp:
            return wm.import_snapshot(tenant, write_snapshot(graph, Path(tmp) / env))

    return await in_thread(run)


@router.get("/envs/{env}/view", response_class=HTMLResponse, tags=["world"], responses=NOT_FOUND_RESPONSES,
            summary="One self-contained HTML page drawing the environment's graph")
async def view(env: str, tenant: Tenant, wm: WM) -> HTMLResponse:
    from worldgraph.server.headers import with_frame_ancestors
    from worldgraph.server.view import render_view, view_csp

    page = await in_thread(lambda: render_view(wm.world_graph(tenant, env), env))
    return HTMLResponse(page, headers={"Content-Security-Policy": with_frame_ancestors(view_csp())})


@router.post("/world/search", response_model=WorldSearchResponse, tags=["world"], responses=NOT_FOUND_RESPONSES,
             summary="Search the world model: facts, rules, states and entities by meaning",
             description="Hybrid search (vector + BM25) over the tenant's world graphs (or `env_name`'s): "
                         "entities, states, facts (every edge as a sentence) and rules. Each hit says whether it "
                         "holds now (read from the store at query time), its confidence, evidence, source scenes "
                         "and at most 10 current facts around it. Current records rank above closed ones unless "
                         "`as_of` asks for a past moment. 404 when `env_name` is not one of the tenant's.")
async def search_world(body: WorldSearchRequest, tenant: Tenant, wm: WM, request: Request) -> dict[str, Any]:
    with metrics_of(request).timed("search_world"):
        hits = await in_thread(wm.search_world, tenant, body.query, body.env_name, body.k, body.as_of)
    return {"hits": hits}


@router.post("/context", response_model=ContextOut, tags=["world"], responses=NOT_FOUND_RESPONSES,
             summary="One prompt-ready block: what the agent knows that matters for a query",
             description="The relevant current facts and rules of the world model first, then the most relevant "
                         "past episodes (of `agent_role`) in compact form, cut to `max_tokens`; every line cites "
                         "its record's id (its start; `citations` has the whole ids and kinds).")
async def context(body: ContextRequest, tenant: Tenant, wm: WM, request: Request) -> Any:
    with metrics_of(request).timed("context"):
        return await in_thread(wm.context, tenant, body.query, body.agent_role, body.env_name, body.max_tokens)


@router.post("/cypher", response_model=CypherResponse, tags=["world"],
             responses={403: {"model": ErrorResponse, "description": "Refused: writes, procedures, or not "
                                                                      "scoped to $tenant_id"},
                        400: {"model": ErrorResponse, "description": "The store's Cypher engine could not run the "
                                                                     "query, or a feature it lacks (named)"},
                        429: {"model": ErrorResponse, "description": "Too many Cypher queries at once (of this "
                                                                     "tenant, or of the server): see Retry-After"},
                        501: {"model": ErrorResponse, "description": "The server has no operating-system sandbox "
                                                                     "for embedded Cypher and the operator did not "
                                                                     "allow it without one"},
                        503: {"model": ErrorResponse, "description": "The embedded Cypher engine crashed on the "
                                                                     "query (its own process only): see "
                                                                     "Retry-After"}},
             summary="Read-only, tenant-scoped Cypher (either store)")
async def cypher(body: CypherRequest, tenant: Tenant, wm: WM) -> dict[str, Any]:
    refuse_unsandboxed(wm)
    return {"rows": await in_thread(wm.cypher, tenant, body.query, body.params)}
