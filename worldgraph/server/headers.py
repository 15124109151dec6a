"""Security headers on every response of ``worldgraph serve``, as real HTTP headers (a ``<meta>``
Content-Security-Policy cannot say ``frame-ancestors``, and a page saved to disk loses it).

- every response: ``X-Content-Type-Options: nosniff`` (a JSON body is never sniffed into HTML);
- HTML responses (the world page, ``/docs``): ``Content-Security-Policy`` with
  ``frame-ancestors 'none'`` (no other site frames the page to click-jack it) and
  ``X-Frame-Options: DENY`` for browsers that predate ``frame-ancestors``. A route that sets its
  own policy (the world page: only its own scripts, by hash; no network) keeps it, with
  ``frame-ancestors 'none'`` added when it lacks one; other HTML gets :data:`HTML_CSP`.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

FRAME_ANCESTORS = "frame-ancestors 'none'"
# For HTML without a policy of its own (FastAPI's /docs): what such a page must never do, without
# naming where its scripts come from.
HTML_CSP = f"{FRAME_ANCESTORS}; base-uri 'none'; form-action 'none'; object-src 'none'"


def with_frame_ancestors(policy: str) -> str:
    """``policy`` with ``frame-ancestors 'none'`` added unless it already has a frame-ancestors."""
    if "frame-ancestors" in policy:
        return policy
    return f"{policy.rstrip('; ')}; {FRAME_ANCESTORS}"


class SecurityHeaders:
    """ASGI middleware adding the headers above to each HTTP response start."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["X-Content-Type-Options"] = "nosniff"
                if headers.get("content-type", "").lower().startswith("text/html"):
                    policy = headers.get("content-security-policy")
                    headers["Content-Security-Policy"] = with_frame_ancestors(policy) if policy else HTML_CSP
                    headers["X-Frame-Options"] = "DENY"
            await send(message)

        await self.app(scope, receive, send_with_headers)
