"""The REST API in-process (FastAPI's TestClient over the real ASGI app): every endpoint's
success and failure, keys, tenants, size limits and the error shape, on both stores."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from worldgraph import WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys

EXPERIENCE = {"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconciliation",
              "task_description": "Reconcile SKU-123 inventory discrepancy", "outcome": "success",
              "confidence": 0.9, "learnings": ["weighted average costing"]}
DELTA = {"entities": [{"ref": "k", "name": "brass key", "type": "item"}, {"ref": "t", "name": "table", "type": "furniture"}],
         "states": [], "edges": [{"relation": "containment", "src_ref": "t", "dst_ref": "k"},
                                 {"relation": "sideways", "src_ref": "t", "dst_ref": "k"}],
         "rules": [{"condition": "the key is on the table", "outcome": "it can be taken", "linked_refs": ["k"]}]}
ROUND = {"round": 3, "action": "take brass key", "before_observation": "A brass key lies on the table.",
         "after_observation": "Taken.", "response": "done\nFLAG_CURIOSITY: yes\nCURIOSITY_REASON: a key"}


class Api:
    """A TestClient speaking for one tenant's key."""

    def __init__(self, client: TestClient, key: str, tenant: str) -> None:
        self.client, self.key, self.tenant = client, key, tenant

    def __call__(self, method: str, path: str, status: int = 200, **kw: Any) -> Any:
        headers = {"Authorization": f"Bearer {self.key}", **kw.pop("headers", {})}
        r = self.client.request(method, path, headers=headers, **kw)
        assert r.status_code == status, r.text
        return r.json() if r.headers.get("content-type", "").startswith("application/json") else r.text


@pytest.fixture(params=["embedded", pytest.param("neo4j", marks=pytest.mark.neo4j)])
def wm(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WorldModel]:
    kw: dict[str, Any] = {}
    if request.param == "neo4j":
        server = request.getfixturevalue("neo4j_server")
        kw = {"graph": "neo4j", "neo4j_uri": server["uri"], "neo4j_user": server["user"],
              "neo4j_password": server["password"]}
    model = WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(384), max_request_bytes=64_000, **kw)
    yield model
    model.close()


@pytest.fixture
def client(wm: WorldModel) -> Iterator[TestClient]:
    with TestClient(create_app(wm), raise_server_exceptions=False) as c:
        yield c


def _tenant_api(wm: WorldModel, client: TestClient) -> Api:
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    key, _ = ApiKeys(wm.store).create(tenant)
    return Api(client, key, tenant)


@pytest.fixture
def api(wm: WorldModel, client: TestClient) -> Api:
    return _tenant_api(wm, client)


@pytest.fixture
def other(wm: WorldModel, client: TestClient) -> Api:
    return _tenant_api(wm, client)


def _error(body: Any, type_: str, field: str | None = None) -> str:
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message", "field", "request_id"}, body
    assert body["error"]["type"] == type_, body
    assert body["error"]["field"] == field, body
    return str(body["error"]["message"])


# ------------------------------------------------------------------------------ memory
def test_record_rate_recall_episodes_readiness(api: Api, other: Api) -> None:
    one = api("POST", "/v1/experiences", json=EXPERIENCE)["episode_ids"]
    batch = api("POST", "/v1/experiences", json={
        "experiences": [{**EXPERIENCE, "task_description": "Reconcile SKU-9 inventory count", "outcome": "failure"},
                        {**EXPERIENCE, "agent_id": "dev-1", "task_description": "Draw a revenue chart"}],
        "canvases": [{"id": "canvas-7", "name": "Board", "actions": [{"id": "a1", "type": "update_component"}]},
                     None]})["episode_ids"]
    assert len(one) == 1 and len(batch) == 2

    fb = api("POST", f"/v1/episodes/{one[0]}/feedback", json={"score": 0.8, "category": "accuracy", "notes": "ok"})
    assert fb["episode_id"] == one[0] and fb["average"] == pytest.approx(0.9) and fb["count"] == 1
    assert fb["feedback_category"] == "accuracy" and fb["created_by"] == "anonymous"

    results = api("POST", "/v1/recall", json={"query": "reconcile inventory discrepancy", "agent_role": "Finance",
                                             "limit": 5, "options": {"min_similarity": 0.0}})["results"]
    assert results[0]["episode_id"] == one[0] and results[0]["feedback_score"] == pytest.approx(0.9)
    assert {r["episode_id"] for r in results} == {one[0], batch[0], batch[1]}
    assert results[0]["score_breakdown"]["final"] == pytest.approx(results[0]["relevance_score"])
    canvas = api("POST", "/v1/recall", json={"query": "Reconcile SKU-9 inventory count",
                                            "options": {"min_similarity": 0.0, "canvas_ids": ["canvas-7"]}})
    assert [r["episode_id"] for r in canvas["results"]] == [batch[0]]
    assert canvas["results"][0]["canvas_actions"] == ["a1"]

    episodes = api("GET", "/v1/agents/fin-1/episodes?limit=1")["episodes"]
    assert len(episodes) == 1 and episodes[0]["agent_id"] == "fin-1"
    assert len(api("GET", "/v1/agents/fin-1/episodes")["episodes"]) == 2
    ready = api("GET", "/v1/agents/fin-1/readiness?window=5")
    assert ready["episodes"] == 2 and ready["success_rate"] == 0.5 and ready["ready"] is False
    assert "episodes" in ready["failing"]

    # The other tenant sees none of it, and cannot rate it.
    assert other("POST", "/v1/recall", json={"query": "reconcile inventory", "options": {"min_similarity": 0}}) == \
        {"results": []}
    _error(other("GET", "/v1/agents/fin-1/episodes", 404), "not_found", "agent_id")
    _error(other("GET", "/v1/agents/fin-1/readiness", 404), "not_found", "agent_id")
    _error(other("POST", f"/v1/episodes/{one[0]}/feedback", 404, json={"score": 1}), "not_found", "episode_id")
    assert api("POST", f"/v1/episodes/{one[0]}/feedback", json={"score": -1})["count"] == 2  # still only 1 + 1


def test_memory_failures_name_the_field(api: Api) -> None:
    missing = {k: v for k, v in EXPERIENCE.items() if k != "outcome"}
    _error(api("POST", "/v1/experiences", 422, json=missing), "invalid_input", "experience.outcome")
    _error(api("POST", "/v1/experiences", 422, json={**EXPERIENCE, "outcome": "meh"}), "invalid_input",
           "experience.outcome")
    _error(api("POST", "/v1/experiences", 422, json={**EXPERIENCE, "colour": "red"}), "invalid_input",
           "experience.colour")
    _error(api("POST", "/v1/experiences", 422, json={"experiences": [EXPERIENCE, {**EXPERIENCE, "confidence": 3}]}),
           "invalid_input", "experiences[1].confidence")  # the name the caller used (an alias)
    msg = _error(api("POST", "/v1/experiences", 422, json={"experiences": [EXPERIENCE], "canvases": [None, None]}),
                 "invalid_input", "canvases")
    assert "2 items for 1" in msg
    _error(api("POST", "/v1/experiences", 422, json={"experiences": []}), "invalid_input", "experiences")
    _error(api("POST", "/v1/experiences", 422, json=[EXPERIENCE]), "invalid_input", "experience")
    msg = _error(api("POST", "/v1/experiences", 422, content=b'{"agent_id": ',
                     headers={"content-type": "application/json"}), "invalid_input", "body")
    assert "malformed JSON" in msg
    _error(api("POST", "/v1/experiences", 422), "invalid_input", "body")  # no body at all
    _error(api("POST", "/v1/recall", 422, json={"query": ""}), "invalid_input", "query")
    _error(api("POST", "/v1/recall", 422, json={"query": "x", "options": {"limit": 0}}), "invalid_input",
           "options.limit")
    _error(api("POST", "/v1/recall", 422, json={"query": "x", "options": {"date_range": {"start": "soon"}}}),
           "invalid_input", "options.date_range.start")
    _error(api("POST", "/v1/episodes/x/feedback", 422, json={"score": 1.5}), "invalid_input", "score")
    _error(api("POST", "/v1/episodes/x/feedback", 422, json={"score": "high"}), "invalid_input", "score")
    _error(api("POST", "/v1/episodes/nope/feedback", 404, json={"score": 0.1}), "not_found", "episode_id")
    _error(api("GET", "/v1/agents/fin-1/episodes?limit=0", 422), "invalid_input", "limit")
    _error(api("GET", "/v1/agents/fin-1/readiness?window=lots", 422), "invalid_input", "window")
    _error(api("GET", "/v1/agents/nobody/readiness", 404), "not_found", "agent_id")


def test_a_body_cannot_switch_tenants(api: Api, other: Api) -> None:
    """The key names the tenant; a body naming another one is refused, naming the same one is fine."""
    msg = _error(api("POST", "/v1/experiences", 422, json={**EXPERIENCE, "tenant_id": other.tenant}),
                 "invalid_input", "experience.tenant_id")
    assert other.tenant in msg
    _error(api("POST", "/v1/experiences", 422, json={"experiences": [EXPERIENCE, {**EXPERIENCE,
                                                                                  "tenant_id": other.tenant}]}),
           "invalid_input", "experiences[1].tenant_id")
    mine = api("POST", "/v1/experiences", json={**EXPERIENCE, "tenant_id": api.tenant})["episode_ids"]
    assert [e["id"] for e in api("GET", "/v1/agents/fin-1/episodes")["episodes"]] == mine
    _error(other("GET", "/v1/agents/fin-1/episodes", 404), "not_found", "agent_id")


# ------------------------------------------------------------------------------ world graph
def test_rounds_deltas_graph_view(api: Api, other: Api) -> None:
    quiet = api("POST", "/v1/envs/Kitchen/rounds", json={"round": 1, "action": "look", "response": "nothing"})
    assert quiet["packet"] is None
    packet = api("POST", "/v1/envs/Kitchen/rounds", json={**ROUND, "agent_id": "explorer"})["packet"]
    assert packet["status"] == "pending" and packet["env_name"] == "Kitchen" and packet["current_round"] == 3
    assert packet["trigger_reason"] == "a key"
    assert len(api("GET", "/v1/agents/explorer/episodes")["episodes"]) == 1

    report = api("POST", "/v1/envs/Kitchen/deltas?reason=unit+test", json=DELTA)
    assert report["ok"] and len(report["created"]["nodes"]) == 2 and len(report["created"]["edges"]) == 1
    assert [d["kind"] for d in report["dropped"]] == ["edge"] and "sideways" in report["dropped"][0]["reason"]
    again = api("POST", "/v1/envs/Kitchen/deltas", json=DELTA)
    assert again["created"]["nodes"] == [] and sorted(again["merged"]["nodes"]) == sorted(report["created"]["nodes"])

    graph = api("GET", "/v1/envs/Kitchen/graph")
    assert {n["name"] for n in graph["nodes"]} == {"brass key", "table"}
    assert len(graph["edges"]) == 1 and len(graph["rules"]) == 1
    assert graph["meta"]["graph_version"] == 2 and graph["meta"]["counts"]["nodes"] == 2
    assert {s["id"] for s in graph["scenes"]} >= {packet["id"]}
    page = api("GET", "/v1/envs/Kitchen/view")
    assert page.lstrip().lower().startswith("<!doctype html") and "brass key" in page and "Kitchen" in page

    unknown = _error(other("GET", "/v1/envs/Kitchen/graph", 404), "not_found", "env_name")
    assert "Kitchen" in unknown and "none yet" in unknown  # another tenant's environment is not found


def test_world_failures(api: Api) -> None:
    _error(api("POST", "/v1/envs/Kitchen/rounds", 422, json={"round": -1}), "invalid_input", "round")
    _error(api("POST", "/v1/envs/Kitchen/rounds", 422, json={"action": "look"}), "invalid_input", "round")
    _error(api("POST", "/v1/envs/bad%20env/rounds", 422, json=ROUND), "invalid_input", "env_name")
    msg = _error(api("POST", "/v1/envs/Kitchen/deltas", 422, json={"entities": "many"}), "invalid_delta", "entities")
    assert "states: missing" in msg
    _error(api("POST", "/v1/envs/Kitchen/deltas", 422, json=["not", "an", "object"]), "invalid_input", "body")
    _error(api("POST", "/v1/envs/bad%20env/deltas", 422, json=DELTA), "invalid_input", "env_name")
    _error(api("GET", "/v1/envs/bad%20env/graph", 422), "invalid_input", "env_name")
    _error(api("GET", "/v1/envs/bad%20env/view", 422), "invalid_input", "env_name")


def test_cypher(api: Api, other: Api, wm: WorldModel) -> None:
    eid = api("POST", "/v1/experiences", json=EXPERIENCE)["episode_ids"][0]
    other("POST", "/v1/experiences", json=EXPERIENCE)
    query = "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e.id AS id, e.agent_id AS agent"
    assert api("POST", "/v1/cypher", json={"query": query}) == {"rows": [{"id": eid, "agent": "fin-1"}]}
    rows = api("POST", "/v1/cypher", json={"query": query + " LIMIT $n", "params": {"n": 0}})
    assert rows == {"rows": []}
    _error(api("POST", "/v1/cypher", 403, json={"query": "MATCH (e:Episode {tenant_id: $tenant_id}) DETACH DELETE e"}),
           "query_refused", "query")
    unscoped = {"query": "MATCH (e:Episode) RETURN e.id AS id"}
    if wm.store.name == "neo4j":  # refused: the plan check cannot prove it stays in the tenant
        _error(api("POST", "/v1/cypher", 403, json=unscoped), "query_refused", "query")
    else:  # the embedded store's projection holds only the caller's tenant: its own episode alone
        assert api("POST", "/v1/cypher", json=unscoped) == {"rows": [{"id": eid}]}
    _error(api("POST", "/v1/cypher", 403, json={"query": query, "params": {"tenant_id": "someone-else"}}),
           "query_refused", "query")
    _error(api("POST", "/v1/cypher", 400, json={"query": "MATCH (e:Episode {tenant_id: $tenant_id}) RETURN"}),
           "invalid_query", "query")
    _error(api("POST", "/v1/cypher", 422, json={"params": {}}), "invalid_input", "query")


# ------------------------------------------------------------------------------ keys, limits, errors
def test_every_v1_route_needs_a_valid_key(client: TestClient, wm: WorldModel) -> None:
    keys = ApiKeys(wm.store)
    revoked, record = keys.create("acme")
    keys.revoke(record["id"])
    paths = client.get("/openapi.json").json()["paths"]
    routes = [(method.upper(), path) for path, ops in paths.items() if path.startswith("/v1") for method in ops]
    assert len(routes) == 26  # every /v1 route of the OpenAPI document
    for method, path in routes:
        url = path.format(episode_id="e1", agent_id="a1", env="Kitchen", session_id="s1")
        for headers in ({}, {"Authorization": f"Bearer {revoked}"}, {"Authorization": "Bearer wg_nope"},
                        {"Authorization": f"Basic {revoked}"}):
            r = client.request(method, url, headers=headers, json={})
            assert r.status_code == 401, (method, url, headers, r.text)
            assert r.headers["www-authenticate"] == "Bearer"
            _error(r.json(), "unauthorized")
    assert client.get("/health").json()["status"] == "ok"  # no key needed
    assert client.get("/openapi.json").json()["info"]["title"] == "worldgraph"
    assert "swagger" in client.get("/docs").text.lower()


def test_request_size_limit(api: Api) -> None:
    big = {**EXPERIENCE, "input_summary": "x" * 70_000}  # the fixture's limit is 64 000 bytes
    msg = _error(api("POST", "/v1/experiences", 413, json=big), "payload_too_large", "body")
    assert "64000" in msg

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"query": "'
        for _ in range(20):
            yield b"y" * 4000
        yield b'"}'

    _error(api("POST", "/v1/recall", 413, content=chunks(), headers={"content-type": "application/json"}),
           "payload_too_large", "body")
    lying = api.client.post("/v1/recall", content=b'{"query": "' + b"z" * 70_000 + b'"}',
                            headers={"Authorization": f"Bearer {api.key}", "content-type": "application/json",
                                     "content-length": "20"})
    assert lying.status_code in (400, 413, 422)  # never parsed as a 20-byte body that "fits"
    # under the body limit, the request reaches the facade (whose own query limit answers 422)
    _error(api("POST", "/v1/recall", 422, json={"query": "y" * 30_000}), "invalid_input", "query")
    assert api("POST", "/v1/recall", json={"query": "y " * 2_000})["results"] == []


def test_unknown_paths_and_methods_use_the_error_shape(api: Api) -> None:
    _error(api("GET", "/v1/nothing-here", 404), "not_found")
    _error(api("DELETE", "/v1/recall", 405), "method_not_allowed")
