"""One JSON shape for every error, ``{"error": {"type", "message", "field"}}``, and the one place
that maps worldgraph's exceptions to HTTP status codes. The MCP tools report the same bodies.

| exception                                   | status | type               |
|---------------------------------------------|--------|--------------------|
| no key, unknown or revoked key              | 401    | unauthorized       |
| body over ``max_request_bytes``             | 413    | payload_too_large  |
| CypherInputError: a Cypher query, params or result over a limit | 400 | invalid_input |
| malformed JSON, a bad field, InvalidInputError | 422 | invalid_input      |
| DeltaValidationError (delta refused whole)  | 422    | invalid_delta      |
| NotFoundError (also another tenant's id)    | 404    | not_found          |
| ReadOnlyQueryError: a query that writes, calls procedures or is not tenant-scoped | 403 | query_refused |
| CypherQueryError: the engine could not run the query (syntax, types, timeout, a missing feature) | 400 | invalid_query |
| NotSupportedError (e.g. a store without scene leases or API keys) | 501 | not_supported      |
| StoreUnavailableError (Neo4j down; CypherCrashError: the engine crashed, Retry-After) | 503 | store_unavailable |
| CypherBusyError (too many Cypher queries at once, of the tenant or the server; with Retry-After) | 429 | too_many_requests |
| ExtractionError (the LLM failed)            | 502    | extraction_failed  |
| ReadOnlyError (served with --read-only, or a read-only / full data folder) | 403 | read_only |
| StorageError (the disk refused the write; nothing of it is stored) | 507 | storage_full_or_failed |
| PartialWriteError (first write stored, second failed; the message says what is stored) | 500 | partial_write |
| EmbeddingDimensionError (the server's embedder is misconfigured) | 500 | embedder_error |
| any other WorldGraphError                   | 400    | bad_request        |
| anything else                               | 500    | internal (details only in the server log) |

A refused Cypher query is 403, not 400: the request is well-formed, and the server refuses it
by policy (read-only, sealed tenants); a query Neo4j itself rejects is the caller's mistake (400).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from worldgraph.errors import EmbeddingDimensionError, ExtractionError, WorldGraphError, classify
from worldgraph.server.models import UNION_TAGS

log = logging.getLogger("worldgraph.server")

_HTTP_TYPES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type",
               422: "invalid_input", 429: "too_many_requests", 500: "internal", 503: "unavailable"}


class ApiError(Exception):
    """An error with its HTTP status and JSON body."""

    def __init__(self, status: int, type_: str, message: str, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.field = status, type_, message, field
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.type, "message": self.message, "field": self.field}}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message, headers={"WWW-Authenticate": "Bearer"})


def describe(exc: BaseException) -> ApiError:
    """The ApiError for any exception a facade call raised."""
    if isinstance(exc, ApiError):
        return exc
    known = classify(exc)
    if known is None:
        return ApiError(500, "internal", "internal error; the server log has the details")
    status, type_, field = known
    retry = getattr(exc, "retry_after", None)  # CypherBusyError, CypherCrashError
    return ApiError(status, type_, str(exc), field,
                    headers={"Retry-After": str(int(retry))} if isinstance(retry, (int, float)) else None)


def field_path(loc: Sequence[Any]) -> str | None:
    """A pydantic error location as the field name a user reads: ('body', 'experiences', 0,
    'outcome') -> 'experiences[0].outcome'; ('query', 'limit') -> 'limit'."""
    parts = list(loc)
    source = parts.pop(0) if parts and parts[0] in ("body", "query", "path", "header", "cookie") else None
    if parts and parts[0] in UNION_TAGS:
        parts.pop(0)
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or source


def validation_error(errors: Sequence[Any]) -> ApiError:
    """FastAPI's request validation errors as one 422 naming the first field at fault."""
    err: dict[str, Any] = dict(errors[0]) if errors else {"loc": ("body",), "msg": "invalid request", "type": ""}
    if err.get("type") == "json_invalid":
        pos = err["loc"][1] if len(err["loc"]) > 1 else "?"
        reason = (err.get("ctx") or {}).get("error", "")
        return ApiError(422, "invalid_input", f"body: malformed JSON ({reason} at character {pos})", "body")
    field = field_path(err.get("loc", ()))
    rule = "is required" if err.get("type") == "missing" else str(err.get("msg", "is invalid"))
    if err.get("type") == "extra_forbidden":
        rule = "is not a known field (check its spelling against the schema at /docs)"
    if len(errors) > 1:
        rule += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return ApiError(422, "invalid_input", f"{field}: {rule}" if field else rule, field)


def install(app: FastAPI) -> None:
    """Route every error of the app through the one JSON shape."""

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        return validation_error(exc.errors() if isinstance(exc, RequestValidationError) else []).response()

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        type_ = _HTTP_TYPES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else type_
        return ApiError(exc.status_code, type_, message, headers=dict(exc.headers or {})).response()

    async def on_error(_: Request, exc: Exception) -> JSONResponse:
        err = describe(exc)
        # Other exceptions reach the Exception handler, which Starlette runs in its outermost
        # middleware and re-raises afterwards, so the server logs their traceback itself.
        if isinstance(exc, (EmbeddingDimensionError, ExtractionError)):
            log.error("%s: %s", type(exc).__name__, exc, exc_info=exc)
        return err.response()

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(ApiError, on_error)
    app.add_exception_handler(WorldGraphError, on_error)
    app.add_exception_handler(Exception, on_error)
