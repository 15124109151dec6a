"""Query text and parameters of cypher() checked before any store sees them
(``worldgraph.kg.cypher_limits``), on every surface: Python, REST, MCP. No server needed: the
checks run first, so on the embedded store too a hostile input is ``invalid_input`` naming the
limit or the parameter, never a 500 nor the store's own answer.

The same inputs against a real Neo4j, and the deadline: tests/unit/kg/test_cypher_deadline.py."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp import Client

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.kg.cypher_limits import check_params, check_query_text, json_size, nesting_depth
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.server.app import create_app
from worldgraph.server.keys import ApiKeys
from worldgraph.server.mcp_server import build_mcp

CFG = WorldGraphConfig()
HUGE = 123456789012345678901234567890
DEEP_QUERY = "RETURN " + "[" * 900 + "1" + "]" * 900 + " AS x"


def deep_list(n: int) -> Any:
    value: Any = 1
    for _ in range(n):
        value = [value]
    return value


def refused(fn: Any, *args: Any) -> InvalidInputError:
    with pytest.raises(InvalidInputError) as info:
        fn(*args)
    return info.value


# ------------------------------------------------------------------------------ the functions
def test_nesting_depth_counts_brackets_and_case_outside_strings_and_comments() -> None:
    assert nesting_depth("RETURN 1") == 0
    assert nesting_depth("RETURN [[1]]") == 2
    assert nesting_depth("MATCH (e:Episode {tenant_id: $tenant_id}) RETURN e") == 2
    assert nesting_depth("RETURN CASE WHEN true THEN CASE WHEN false THEN [1] END END") == 3
    assert nesting_depth("RETURN '[[[[' AS s, \"((((\" AS t, `{{{{` AS u // [[[[\n /* (((( */") == 0
    assert nesting_depth("RETURN 'it\\'s [[' AS s, [1]") == 1
    assert nesting_depth("MATCH (n) WHERE n.name ENDS WITH 'x' RETURN n.end, n.case") == 1
    assert nesting_depth("RETURN '[[[ unterminated") == 0
    assert nesting_depth(DEEP_QUERY) == 900


def test_query_text_limits_name_the_setting() -> None:
    err = refused(check_query_text, DEEP_QUERY, CFG)
    assert err.field == "query" and "900 levels" in err.rule and "cypher_max_nesting_depth" in err.rule
    err = refused(check_query_text, "RETURN 1 // " + "x" * 70_000, CFG)
    assert err.field == "query" and "cypher_max_query_bytes" in err.rule
    err = refused(check_query_text, "RETURN '\ud800'", CFG)
    assert "not valid Unicode" in err.rule
    assert refused(check_query_text, "  ", CFG).field == "query"
    check_query_text("RETURN " + "[" * 64 + "1" + "]" * 64, CFG)  # the limit itself passes
    assert "65 levels" in refused(check_query_text, "RETURN " + "[" * 65 + "1" + "]" * 65, CFG).rule
    small = WorldGraphConfig(cypher_max_nesting_depth=2, cypher_max_query_bytes=20)
    assert "cypher_max_nesting_depth" in refused(check_query_text, "RETURN [[[1]]]", small).rule
    assert "over the limit of 20" in refused(check_query_text, "RETURN 1 AS aaaaaaaaaaaaaaa", small).rule


def test_query_text_check_is_linear() -> None:
    started = time.perf_counter()
    nesting_depth("RETURN " + "'a' + " * 10_000 + "([{" * 3_000 + "1" + "}])" * 3_000)
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(("params", "field", "words"), [
    ({"x": HUGE}, "params.x", "64-bit range"),
    ({"x": -(1 << 63) - 1}, "params.x", "64-bit range"),
    ({"x": [1, {"y": HUGE}]}, "params.x[1].y", "64-bit range"),
    ({"x": deep_list(900)}, "params.x", "cypher_max_nesting_depth"),
    ({"x": deep_list(1_000_000)}, "params.x", "cypher_max_nesting_depth"),
    ({"x": float("nan")}, "params.x", "finite"),
    ({"x": "\ud800"}, "params.x", "not valid Unicode"),
    ({"x": {1: "a"}}, "params.x", "keys must be strings"),
    ({"x": object()}, "params.x", "not a Cypher value"),
    ({"x": "a" * 1_100_000}, "params", "cypher_max_params_bytes"),
    ({"x": list(range(200_000))}, "params", "cypher_max_params_bytes"),
    (["x"], "params", "must be a map"),
])
def test_params_are_refused_naming_the_parameter(params: Any, field: str, words: str) -> None:
    err = refused(check_params, params, CFG)
    assert err.field.startswith(field) and words in err.rule, (err.field, err.rule)


def test_params_that_any_store_can_bind_pass() -> None:
    check_params(None, CFG)
    check_params({"n": (1 << 63) - 1, "m": -(1 << 63), "f": 1.5, "s": "é", "b": b"\x00", "t": True, "z": None,
                  "l": [1, "a", [2.0]], "d": {"k": {"k": [None]}}, "when": dt.datetime(2026, 1, 1),
                  "day": dt.date(2026, 1, 1), "span": dt.timedelta(seconds=3), "deep": deep_list(63)}, CFG)


def test_params_that_hold_themselves_are_refused_not_walked_forever() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert "cypher_max_nesting_depth" in refused(check_params, {"x": loop}, CFG).rule


def test_json_size_stops_at_its_budget() -> None:
    assert json_size({"a": [1, "xy"]}, 1000) == 2 + 5 + 2 + 2 + 8 + 4
    huge = list(range(3_000_000))
    started = time.perf_counter()
    assert json_size(huge, 1000) > 1000
    assert json_size([huge], 1000) > 1000
    assert time.perf_counter() - started < 0.5


# ------------------------------------------------------------------------------ every surface
@pytest.fixture
def wm(tmp_path: Path) -> Iterator[WorldModel]:
    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64)) as model:
        yield model


def test_python_refuses_before_the_store(wm: WorldModel) -> None:
    """On the embedded store, which answered NotSupportedError for any query before."""
    assert "cypher_max_nesting_depth" in refused(wm.cypher, "acme", DEEP_QUERY).rule
    assert refused(wm.cypher, "acme", "RETURN $x", {"x": HUGE}).field == "params.x"
    assert refused(wm.cypher, "acme", "RETURN $x", {"x": deep_list(900)}).field.startswith("params.x")


def test_rest_answers_invalid_input_naming_the_limit_or_parameter(wm: WorldModel) -> None:
    key, _ = ApiKeys(wm.store).create("acme")
    with TestClient(create_app(wm), raise_server_exceptions=False) as client:
        def post(body: dict[str, Any]) -> dict[str, Any]:
            r = client.post("/v1/cypher", json=body, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == 400, r.text
            return r.json()["error"]  # type: ignore[no-any-return]

        err = post({"query": DEEP_QUERY})
        assert err["type"] == "invalid_input" and err["field"] == "query" and "cypher_max_nesting_depth" in err["message"]
        err = post({"query": "RETURN $x", "params": {"x": HUGE}})
        assert err["type"] == "invalid_input" and err["field"] == "params.x" and "64-bit" in err["message"]
        # 900 deep: JSON the server parses, refused by the Cypher limits (400), naming x
        err = post({"query": "RETURN $x", "params": {"x": deep_list(900)}})
        assert err["type"] == "invalid_input" and err["field"].startswith("params.x"), err


def test_mcp_answers_invalid_input_naming_the_limit_or_parameter(wm: WorldModel) -> None:
    """Through the SDK's own client, connected in-process."""
    async def errors(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        async with Client(build_mcp(lambda: wm, tenant="acme")) as client:
            for args in calls:
                result = await client.call_tool("cypher", args)
                assert result.is_error
                text = result.content[0].text  # type: ignore[union-attr]
                out.append(json.loads(text[text.index("{"):])["error"])
        return out

    deep, huge, nested = asyncio.run(errors([
        {"query": DEEP_QUERY}, {"query": "RETURN $x", "params": {"x": HUGE}},
        # 100 deep: the SDK's client refuses to serialize 900 (pydantic's depth limit)
        {"query": "RETURN $x", "params": {"x": deep_list(100)}}]))
    assert deep["type"] == "invalid_input" and deep["field"] == "query" and "cypher_max_nesting_depth" in deep["message"]
    assert huge["type"] == "invalid_input" and huge["field"] == "params.x"
    assert nested["type"] == "invalid_input" and nested["field"].startswith("params.x")
