"""Bearer API keys -> the request's tenant, for the REST routes (a FastAPI dependency) and for
the MCP endpoint (an ASGI wrapper that puts the tenant in the request's scope)."""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Receive, Scope, Send

from worldgraph.server.errors import ApiError, unauthorized
from worldgraph.server.keys import ApiKeys
from worldgraph.server.scopes import rest_scope

TENANT_STATE = "worldgraph_tenant"  # where BearerTenant leaves the tenant in scope["state"]
SCOPES_STATE = "worldgraph_scopes"  # and the key's scopes (worldgraph.server.keys.SCOPES)
ACTOR_STATE = "worldgraph_actor"  # and who the key says is acting (key_actor)
NO_KEY = ("send the header Authorization: Bearer <key>; create a key with "
          "`worldgraph keys create --tenant T`")
BAD_KEY = "the API key is unknown or revoked; create a new one with `worldgraph keys create --tenant T`"

bearer = HTTPBearer(auto_error=False, scheme_name="ApiKey",
                    description="An API key from `worldgraph keys create --tenant T`. The key names the tenant: "
                                "every call sees only that tenant's data.")


def authenticate(keys: ApiKeys, token: str | None) -> str:
    """The tenant of ``token``, or a 401 ApiError."""
    return str(key_record(keys, token)["tenant_id"])


def key_record(keys: ApiKeys, token: str | None) -> dict[str, Any]:
    """The public record of ``token``'s key (tenant_id, name, scopes, ...), or a 401 ApiError."""
    if not token:
        raise unauthorized(NO_KEY)
    record = keys.record_of(token)
    if record is None:
        raise unauthorized(BAD_KEY)
    return record


def key_actor(record: dict[str, Any]) -> str:
    """Who acts with a key, as an audit row records it (a forget's ``forgotten_by``): the key's
    name, or ``key <id>`` for an unnamed key (the id ``worldgraph keys list`` shows)."""
    return str(record.get("name") or f"key {record['id']}")


def needed_scope(method: str, template: str) -> str:
    """The scope a request to the route ``template`` needs: its row of ``scopes.OPERATIONS``. A
    route without a row is refused (403), never served with a guess."""
    need = rest_scope(method, template)
    if need is None:
        raise ApiError(403, "forbidden", f"{method} {template} has no row in worldgraph.server.scopes.OPERATIONS, "
                       "which says the key scope each route needs; it is refused until it has one", "scope")
    return need


def forbidden(scope: str) -> ApiError:
    return ApiError(403, "forbidden", f"this API key lacks the {scope!r} scope; create a key that has it: "
                    f"`worldgraph keys create --tenant T --scope {scope}` (scopes: read, write, forget)", "scope")


def require_tenant(request: Request,
                   credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]) -> str:
    """FastAPI dependency (sync: the key lookup is a store read, so it runs in the threadpool): the
    key's tenant, after checking that the key has the scope the request needs (403 otherwise).
    The key's name is left in ``request.state.key_name`` (None for an unnamed key): what a write
    records as its author when the body names none; ``request.state.actor`` is who the audit of a
    forget names (``key_actor``)."""
    record = key_record(request.app.state.keys, credentials.credentials if credentials else None)
    route = request.scope.get("route")
    need = needed_scope(request.method, getattr(route, "path", request.url.path))
    if need not in record["scopes"]:
        raise forbidden(need)
    request.state.key_name = record.get("name") or None
    request.state.actor = key_actor(record)
    return str(record["tenant_id"])


Tenant = Annotated[str, Depends(require_tenant)]


class BearerTenant:
    """ASGI wrapper: 401 without a valid key, else the tenant in ``scope["state"]``. The keys are
    the app's (``app.state.keys``), as for the REST routes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = _bearer_token(scope)
        try:
            record = await anyio.to_thread.run_sync(key_record, scope["app"].state.keys, token)
        except ApiError as err:
            await err.response()(scope, receive, send)
            return
        scope.setdefault("state", {})[TENANT_STATE] = str(record["tenant_id"])
        scope["state"][SCOPES_STATE] = frozenset(record["scopes"])
        scope["state"][ACTOR_STATE] = key_actor(record)
        await self.app(scope, receive, send)


def _bearer_token(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def scope_tenant(request: Any) -> str | None:
    """The tenant BearerTenant put in a request's scope (None outside an HTTP request)."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    state = scope.get("state")
    return state.get(TENANT_STATE) if isinstance(state, dict) else None


def scope_scopes(request: Any) -> frozenset[str] | None:
    """The key scopes BearerTenant put in a request's scope (None outside an HTTP request)."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    state = scope.get("state")
    found = state.get(SCOPES_STATE) if isinstance(state, dict) else None
    return found if isinstance(found, frozenset) else None


def scope_actor(request: Any) -> str | None:
    """Who BearerTenant says acts in a request (``key_actor``; None outside an HTTP request)."""
    scope = getattr(request, "scope", None)
    if not isinstance(scope, dict):
        return None
    state = scope.get("state")
    found = state.get(ACTOR_STATE) if isinstance(state, dict) else None
    return found if isinstance(found, str) else None
