"""The FastAPI application of ``worldgraph serve``: the REST routes under ``/v1``, ``/health``,
the OpenAPI document at ``/openapi.json`` (docs at ``/docs``) and the MCP server at ``/mcp``.

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
from starlette.routing import Route

from worldgraph import __version__
from worldgraph.server import errors
from worldgraph.server.auth import BearerTenant
from worldgraph.server.headers import SecurityHeaders
from worldgraph.server.keys import ApiKeys
from worldgraph.server.limits import BodySizeLimit
from worldgraph.server.mcp_server import build_mcp
from worldgraph.server.routes import health_router, router
from worldgraph.service import WorldModel

DESCRIPTION = """A world model and long-term memory for LLM agents.

Every `/v1` call sends `Authorization: Bearer <key>` (create one with `worldgraph keys create --tenant T`);
the key's tenant is the call's tenant, and no path or body names a tenant. Errors are
`{"error": {"type", "message", "field"}}`: 401 no or revoked key, 404 unknown id (another tenant's
ids too), 413 body over the size limit, 422 malformed JSON or a bad field (named in `field`).
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

    app = FastAPI(title="worldgraph", version=__version__, description=DESCRIPTION, lifespan=lifespan,
                  generate_unique_id_function=lambda route: route.name)  # operationId = the function's name
    app.state.wm = wm
    app.state.keys = ApiKeys(wm.store) if wm is not None else None
    errors.install(app)
    app.include_router(health_router)
    app.include_router(router)
    app.router.routes.append(Route("/mcp", BearerTenant(mcp.session_manager.handle_request),
                                   methods=["GET", "POST", "DELETE"], include_in_schema=False))
    app.add_middleware(BodySizeLimit, max_bytes=limit)
    app.add_middleware(SecurityHeaders)  # outermost: also on the 413s and errors of the others
    return app


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document of the service (what /openapi.json serves)."""
    return create_app(None).openapi()
