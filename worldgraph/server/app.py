"""The FastAPI application of ``worldgraph serve``: the REST routes under ``/v1``, ``/health``,
the OpenAPI document at ``/openapi.json`` (Swagger UI at ``/docs``, offline) and the MCP server at ``/mcp``.

``create_app(wm)`` serves a WorldModel the caller opened and closes (``worldgraph serve`` closes
it after uvicorn's graceful shutdown, which is when background world updates are waited for).
``create_app(None)`` builds the same routes without a model, to dump the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from fastapi_offline import FastAPIOffline
from starlette.routing import Route

from worldgraph import __version__
from worldgraph.server import errors
from worldgraph.server.auth import BearerTenant
from worldgraph.server.headers import SecurityHeaders
from worldgraph.server.keys import ApiKeys
from worldgraph.server.lifecycle_routes import router as lifecycle_router
from worldgraph.server.limits import BodySizeLimit
from worldgraph.server.mcp_server import build_mcp
from worldgraph.server.metrics import Metrics, RequestObserver, install_log_ids, metrics_endpoint
from worldgraph.server.routes import health_router, router
from worldgraph.service import WorldModel

DESCRIPTION = """A world model and long-term memory for LLM agents.

Every `/v1` call sends `Authorization: Bearer <key>` (create one with `worldgraph keys create --tenant T`);
the key's tenant is the call's tenant, and no path or body names a tenant. Errors are
`{"error": {"type", "message", "field"}}`: 401 no or revoked key, 404 unknown id (another tenant's
ids too), 413 body over the size limit, 422 malformed JSON or a bad field (named in `field`).
Every response carries an `X-Request-ID` header (yours, if you sent a valid one), and every
error body names it in `error.request_id`, as do the server's log lines. `GET /metrics` serves
Prometheus metrics.
MCP (streamable HTTP) is served at `/mcp` with the same key."""


def create_app(wm: WorldModel | None, *, max_request_bytes: int | None = None, threads: int | None = None,
               host: str = "127.0.0.1") -> FastAPI:
    """The ASGI app. ``max_request_bytes`` and ``threads`` default to the model's config;
    ``host`` is where it listens (loopback turns on the MCP transport's DNS-rebinding guard)."""
    cfg = wm.config if wm is not None else None
    limit = max_request_bytes or (cfg.max_request_bytes if cfg else 1 << 20)
    workers = threads or (cfg.server_threads if cfg else 8)
    mcp = build_mcp(lambda: app.state.wm)
    # Stateless: no MCP session lives in this process, so several servers behind one address need
    # no affinity, and a restart loses nothing. JSON answers: a tool call is one request, one reply.
    mcp.streamable_http_app(stateless_http=True, json_response=True, host=host, max_request_body_size=limit)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # The facade's calls block; they run in this many threads (FastAPI's threadpool).
        anyio.to_thread.current_default_thread_limiter().total_tokens = workers
        async with mcp.session_manager.run():
            yield

    # FastAPIOffline: /docs (Swagger UI) loads its script and styles from the assets the
    # fastapi-offline package ships (served under /static-offline-docs), never from a CDN, so the
    # docs work on a machine without internet access. No /redoc: ReDoc's page still fetches its
    # vendor's logo from a CDN.
    app = FastAPIOffline(title="worldgraph", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                         redoc_url=None,
                         generate_unique_id_function=lambda route: route.name,  # operationId = the function's name
                         swagger_ui_parameters={"validatorUrl": None})  # no badge fetched from swagger.io
    app.state.wm = wm
    app.state.keys = ApiKeys(wm.store) if wm is not None else None
    app.state.metrics = Metrics(wm)
    install_log_ids()
    errors.install(app)
    app.include_router(health_router)
    app.add_api_route("/metrics", metrics_endpoint, methods=["GET"], response_class=PlainTextResponse,
                      tags=["service"], summary="Prometheus metrics (no key needed)",
                      description="Requests and latencies by route template and status, record, recall, "
                                  "search_world and context timings, scene packets pending and episodes awaiting "
                                  "indexing, in the Prometheus text format. Carries no tenant and no data.")
    app.include_router(router)
    app.include_router(lifecycle_router)
    app.router.routes.append(Route("/mcp", BearerTenant(mcp.session_manager.handle_request),
                                   methods=["GET", "POST", "DELETE"], include_in_schema=False))
    app.add_middleware(BodySizeLimit, max_bytes=limit)
    app.add_middleware(RequestObserver)  # added last: outermost, so it sees every response (a 413 too)
    app.add_middleware(SecurityHeaders)  # outermost: also on the 413s and errors of the others
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the service (what /openapi.json serves)."""
    return create_app(None).openapi()
