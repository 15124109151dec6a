"""For operators: GET /metrics (Prometheus text), and a request id in every response header,
error body and log line of the request."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys

EXP = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
       "task_description": "Reconcile SKU-123 inventory discrepancy", "outcome": "success"}


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[WorldModel, TestClient, dict[str, str]]]:
    wm = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384), max_request_bytes=20_000)
    try:
        key, _ = ApiKeys(wm.store).create(f"t-{uuid.uuid4().hex[:8]}")
        with TestClient(create_app(wm), raise_server_exceptions=False) as client:
            yield wm, client, {"Authorization": f"Bearer {key}"}
    finally:
        wm.close()


def samples(client: TestClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_requests_by_route_template_and_status(served: Any) -> None:
    wm, client, auth = served
    for _ in range(3):
        assert client.post("/v1/experiences", json=EXP, headers=auth).status_code == 200
    assert client.post("/v1/recall", json={"query": "reconcile"}, headers=auth).status_code == 200
    assert client.post("/v1/episodes/nope-nope/feedback", json={"score": 0.5}, headers=auth).status_code == 404
    assert client.post("/v1/episodes/other-id/feedback", json={"score": 0.5}, headers=auth).status_code == 404
    client.get("/no/such/path")
    m = samples(client)
    rec = (("method", "POST"), ("route", "/v1/experiences"), ("status", "200"))
    assert m[("worldgraph_http_requests_total", rec)] == 3
    assert m[("worldgraph_http_request_duration_seconds_count", rec)] == 3
    fb = (("method", "POST"), ("route", "/v1/episodes/{episode_id}/feedback"), ("status", "404"))
    assert m[("worldgraph_http_requests_total", fb)] == 2  # the template, not two raw paths
    assert m[("worldgraph_http_requests_total", (("method", "GET"), ("route", "unmatched"), ("status", "404")))] == 1
    assert m[("worldgraph_operation_duration_seconds_count", (("operation", "record"),))] == 3
    assert m[("worldgraph_operation_duration_seconds_count", (("operation", "recall"),))] == 1
    assert m[("worldgraph_episodes_unindexed", ())] == 0
    assert m[("worldgraph_scene_packets_pending", ())] == 0
    tenant = next(iter(wm.store.tenants()))
    wm.store.set_index_status(tenant, [e["id"] for e in wm.get_agent_episodes(tenant, "fin-1")[:2]], "failed")
    assert samples(client)[("worldgraph_episodes_unindexed", ())] == 2


def test_request_ids_in_headers_error_bodies_and_log_lines(served: Any, caplog: pytest.LogCaptureFixture) -> None:
    _, client, auth = served
    r = client.get("/health", headers={"X-Request-ID": "trace-abc.123"})
    assert r.headers["x-request-id"] == "trace-abc.123"  # a valid incoming id is kept
    made = client.get("/health", headers={"X-Request-ID": "bad id\twith spaces"}).headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)  # an invalid one is replaced
    ids = set()
    for resp in (client.post("/v1/recall", json={"query": "x"}),  # 401
                 client.post("/v1/recall", json={"query": 5}, headers=auth),  # 422
                 client.post("/v1/episodes/nope-nope/feedback", json={"score": 0.5}, headers=auth),  # 404
                 client.post("/v1/experiences", content=b"x" * 30_000, headers={**auth, "content-type":
                                                                                 "application/json"}),  # 413
                 client.post("/v1/cypher", json={"query": "CREATE (n) RETURN n"}, headers=auth)):  # 403
        assert resp.status_code >= 400
        body = resp.json()["error"]
        assert body["request_id"] == resp.headers["x-request-id"], (resp.status_code, body)
        assert int(resp.headers["content-length"]) == len(resp.content)
        ids.add(body["request_id"])
    assert len(ids) == 5
    resp = client.post("/v1/recall", json={"query": "x"}, headers={"X-Request-ID": "mine-1"})
    assert resp.json()["error"]["request_id"] == "mine-1"


def test_an_unhandled_error_is_one_500_body_with_the_id_logged(served: Any, caplog: pytest.LogCaptureFixture) -> None:
    wm, client, auth = served

    def broken(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("disk on fire")

    wm.stats = broken  # type: ignore[method-assign]
    wm.recall_experiences = broken  # type: ignore[method-assign]
    with caplog.at_level(logging.ERROR):
        resp = client.post("/v1/recall", json={"query": "x"}, headers={**auth, "X-Request-ID": "req-500"})
    assert resp.status_code == 500
    assert resp.json()["error"]["request_id"] == "req-500" and "disk on fire" not in resp.text
    assert any("[req-500]" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


def test_the_openapi_document_and_the_docs_pages_are_labelled_by_their_route(served: Any) -> None:
    _, client, _ = served
    assert client.get("/openapi.json").status_code == 200
    page = client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:href|src)="(/[^"]+\.(?:css|js))"', page.text)
    assert assets, page.text[:500]
    for asset in assets:
        assert client.get(asset).status_code == 200, asset
    m = samples(client)
    routes = {dict(labels)["route"] for (name, labels) in m if name == "worldgraph_http_requests_total"}
    assert {"/openapi.json", "/docs"} <= routes, routes
    prefixes = {"/" + a.split("/")[1] for a in assets}
    assert prefixes <= routes, (prefixes, routes)  # a mount's label is its prefix, not each file
    assert not any(a in routes for a in assets)
    assert "unmatched" not in routes
