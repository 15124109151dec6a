"""What an operator watches: ``GET /metrics`` in the Prometheus text format, and a request id on
every request (its error body, its response header, its log lines).

Metrics (one registry per app, so two apps in one process do not mix their counts):

- ``worldgraph_http_requests_total{method, route, status}`` and
  ``worldgraph_http_request_duration_seconds{method, route, status}``: ``route`` is the route's
  template (``/v1/episodes/{episode_id}/feedback``), never the raw path, so ids do not explode
  the label set; a path no route matched is ``unmatched``.
- ``worldgraph_operation_duration_seconds{operation}``: the facade calls themselves, ``record``,
  ``recall``, ``search_world`` and ``context`` (without HTTP parsing and auth).
- ``worldgraph_scene_packets_pending`` and ``worldgraph_episodes_unindexed`` (gauges read from
  the store at scrape time, all tenants; the episode count stops at ``UNINDEXED_CAP``).
- ``worldgraph_cypher_children_killed_total`` (embedded query children killed at their
  deadline), ``worldgraph_cypher_children_crashed_total`` (children the engine's crash ended)
  and ``worldgraph_cypher_refused_busy_total`` (queries answered 429: too many in flight, either
  store), counted by the process since it started (``kg.cypher_limits.COUNTERS``).

Request ids: an incoming ``X-Request-ID`` of 1-128 characters from ``[A-Za-z0-9._:-]`` is kept,
anything else is replaced by a new one (32 hex digits). It is echoed in the ``X-Request-ID``
response header, added as ``request_id`` to every JSON error body (``{"error": {...,
"request_id"}}``, whatever produced the error), and prefixed to every log line written while the
request runs (``[<id>] message``). ``/metrics`` needs no key (like ``/health``): it carries
counts and timings, no tenant and no data.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from worldgraph.kg.cypher_limits import COUNTERS, CRASHED, KILLED_AT_DEADLINE, REFUSED_BUSY

log = logging.getLogger("worldgraph.server")

REQUEST_ID_HEADER = "X-Request-ID"
_ID_RE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
UNINDEXED_CAP = 100_000
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("worldgraph_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being served in this context (None outside a request)."""
    return request_id_var.get()


class Metrics:
    """The app's registry and instruments."""

    def __init__(self, wm: Any) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("worldgraph_http_requests", "HTTP requests by route template and status",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("worldgraph_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route", "status"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.operations = Histogram("worldgraph_operation_duration_seconds",
                                    "Time in the facade's record, recall, search_world and context calls", ["operation"],
                                    buckets=_LATENCY_BUCKETS, registry=self.registry)
        if wm is not None:
            self.registry.register(_StoreGauges(wm))
        self.registry.register(_CypherCounters())

    @contextmanager
    def timed(self, operation: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.operations.labels(operation).observe(time.perf_counter() - start)

    def response(self) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class _StoreGauges(Collector):
    """Queue depths read from the store when Prometheus scrapes."""

    def __init__(self, wm: Any) -> None:
        self.wm = wm

    def collect(self) -> Iterator[GaugeMetricFamily]:
        store = self.wm.store
        try:
            pending = len(store.list_scenes(None, None, ["pending"]))
            unindexed = len(store.unindexed_episodes(limit=UNINDEXED_CAP))
        except Exception as exc:  # noqa: BLE001 - a scrape reports what it can; the store's trouble is logged
            log.warning("metrics: could not read the queue depths (%s)", exc)
            return
        yield GaugeMetricFamily("worldgraph_scene_packets_pending",
                                "Scene packets waiting for a world update (all tenants)", value=pending)
        yield GaugeMetricFamily("worldgraph_episodes_unindexed",
                                f"Episodes awaiting (re-)indexing, all tenants (counted up to {UNINDEXED_CAP})",
                                value=unindexed)


class _CypherCounters(Collector):
    """What became of Cypher queries in this process (kg.cypher_limits.COUNTERS)."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        for name, key, what in (
                ("worldgraph_cypher_children_killed", KILLED_AT_DEADLINE,
                 "Embedded Cypher query children killed at their query's deadline"),
                ("worldgraph_cypher_children_crashed", CRASHED,
                 "Embedded Cypher query children ended by an engine crash"),
                ("worldgraph_cypher_refused_busy", REFUSED_BUSY,
                 "Cypher queries refused with 429: too many in flight (of a tenant, or of the process)")):
            yield CounterMetricFamily(name, what, value=COUNTERS.get(key))


def metrics_of(request: Request) -> Metrics:
    return request.app.state.metrics  # type: ignore[no-any-return]


async def metrics_endpoint(request: Request) -> Response:
    return metrics_of(request).response()


class RequestObserver:
    """ASGI middleware: the request id (kept or made, echoed, in error bodies and log lines), and
    each request's count and latency by route template and status. An exception that reaches it
    (a bug) becomes the one 500 body, logged with its traceback and request id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = _header(scope, b"x-request-id")
        rid = incoming if incoming and _ID_RE.fullmatch(incoming) else uuid.uuid4().hex
        token = request_id_var.set(rid)
        scope.setdefault("state", {})["request_id"] = rid
        start = time.perf_counter()
        status = [500]
        held: list[Message] = []  # an error response's start, held until its body has the id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message.setdefault("headers", [])
                message["headers"] = [(k, v) for k, v in message["headers"] if k.lower() != b"x-request-id"]
                message["headers"].append((b"x-request-id", rid.encode()))
                if status[0] >= 400 and _header_in(message["headers"], b"content-type", b"application/json"):
                    held.append(message)
                    return
            elif message["type"] == "http.response.body" and held:
                held.append(message)
                if message.get("more_body"):
                    return
                await _send_error_with_id(send, held, rid)
                held.clear()
                return
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception as exc:
            from worldgraph.server.errors import describe

            log.exception("unhandled error in %s %s", scope.get("method"), scope.get("path"))
            err = describe(exc)
            body = err.body()
            body.setdefault("error", {})["request_id"] = rid
            status[0] = err.status
            await send({"type": "http.response.start", "status": err.status,
                        "headers": [(b"content-type", b"application/json"), (b"x-request-id", rid.encode())]})
            await send({"type": "http.response.body", "body": json.dumps(body).encode()})
        finally:
            metrics: Metrics | None = getattr(scope["app"].state, "metrics", None) if "app" in scope else None
            if metrics is not None:
                labels = (scope.get("method", ""), route_template(scope), str(status[0]))
                metrics.requests.labels(*labels).inc()
                metrics.latency.labels(*labels).observe(time.perf_counter() - start)
            request_id_var.reset(token)


def route_template(scope: Scope) -> str:
    """The label of the route that served the request: its template. FastAPI's own routes put
    themselves in ``scope["route"]``; Starlette's (``/openapi.json``, ``/docs``, the mounted docs
    assets) only leave their endpoint, so it is looked up among the app's routes (a mount's label is
    its prefix). ``unmatched`` when no route served it."""
    route = scope.get("route")
    if route is not None and getattr(route, "path", None):
        return str(route.path)
    endpoint = scope.get("endpoint")
    if endpoint is not None and "app" in scope:
        for candidate in getattr(scope["app"], "routes", ()):
            if getattr(candidate, "endpoint", None) is endpoint or getattr(candidate, "app", None) is endpoint:
                return str(getattr(candidate, "path", "") or "unmatched")
    return "unmatched"


async def _send_error_with_id(send: Send, held: list[Message], rid: str) -> None:
    start, bodies = held[0], held[1:]
    raw = b"".join(m.get("body", b"") for m in bodies)
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        doc["error"]["request_id"] = rid
        raw = json.dumps(doc, ensure_ascii=False).encode("utf-8")
    start["headers"] = [(k, v) for k, v in start["headers"] if k.lower() != b"content-length"]
    start["headers"].append((b"content-length", str(len(raw)).encode()))
    await send(start)
    await send({"type": "http.response.body", "body": raw})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1").strip())
    return None


def _header_in(headers: list[tuple[bytes, bytes]], name: bytes, prefix: bytes) -> bool:
    return any(k.lower() == name and v.lower().startswith(prefix) for k, v in headers)


_installed = False


def install_log_ids() -> None:
    """Prefix every log record made while a request runs with ``[<request id>] `` and give every
    record a ``request_id`` attribute (``-`` outside a request), for formats that place it
    themselves. Installed once per process (a record factory wraps the one before it)."""
    global _installed
    if _installed:
        return
    _installed = True
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        rid = request_id_var.get()
        record.request_id = rid or "-"
        if rid is not None and isinstance(record.msg, str):
            record.msg = f"[{rid}] {record.msg}"
        return record

    logging.setLogRecordFactory(factory)
