"""The request size limit, enforced on the raw ASGI stream before anything parses the body.

A declared ``Content-Length`` over the limit is refused before a byte of the body is read.
Otherwise (chunked bodies, or a length that lies) the body is read as it arrives and refused the
moment the running total passes the limit, so a client cannot make the server hold more than
``max_bytes`` of one request. Bodies within the limit are handed to the app unchanged.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worldgraph.server.errors import ApiError


class BodySizeLimit:
    """ASGI middleware: 413 for an HTTP request body over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, send, declared)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away mid-body
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(scope, send, size)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: http.disconnect, as the app expects

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, send: Send, size: int) -> None:
        err = ApiError(413, "payload_too_large",
                       f"the request body is over the limit of {self.max_bytes} bytes ({size} bytes or more); "
                       "send less per request (e.g. split a batch), or raise WORLDGRAPH_MAX_REQUEST_BYTES",
                       "body", headers={"Connection": "close"})
        await err.response()(scope, _never, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _never() -> Message:
    return {"type": "http.disconnect"}
