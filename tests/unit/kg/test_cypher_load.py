"""The Episode columns decoded by Arrow's JSON reader (load.arrow_episodes) are the columns the
Python decode makes (load.add_episodes), value for value and type for type, as LadybugDB receives
them; records the reader would copy differently are left to the Python decode."""

from __future__ import annotations

from typing import Any

import pytest

from worldgraph.kg.codec import dumps
from worldgraph.kg.embedded.cypher.load import add_episodes, arrow_episodes
from worldgraph.kg.embedded.cypher.model import empty_nodes, node_names
from worldgraph.kg.embedded.cypher.projection import _array

TENANT = "t"


def record(n: int, **extra: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"id": f"ep-{n}", "tenant_id": TENANT, "agent_id": f"agent-{n % 3}", "agent_role": "planner",
                           "ts": 1_700_000_000.25 + n, "timestamp": "2026-01-05T12:00:00+00:00", "task_type": "t",
                           "task_description": f"tâche {n} \"quoted\"\nline\t✓", "outcome": "success",
                           "canvas_id": None if n % 2 else f"c-{n}", "session_id": "s1" if n < 3 else None,
                           # nested keys the copy must not confuse with the episode's own
                           "actions": [{"ts": 5, "id": "nested"}], "context": {"outcome": False, "ts": [1, 2]}}
    rec.update(extra)
    return rec


def rows_of(recs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(dumps(r), "indexed" if i % 2 else "pending", None if i % 3 else "boom") for i, r in enumerate(recs)]


def columns(rows: list[tuple[Any, ...]], arrow: bool) -> tuple[dict[str, tuple[list[Any], str]], Any]:
    ep = empty_nodes(["Episode"])["Episode"]
    seq = {"ep-0": (0, "ep-1"), "ep-1": (1, None)}
    if arrow:
        out = arrow_episodes(ep, rows, TENANT, seq)
        assert out is not None, "the Arrow decode refused records it should take"
        _ids, agents, canvases = out
    else:
        agents, canvases = add_episodes(ep, rows, TENANT, seq)
    cols = {}
    for n in node_names("Episode"):
        arr, kind = _array(n, ep[n])
        cols[n] = (arr.to_pylist(), kind)
    return cols, (agents, canvases)


@pytest.mark.parametrize("recs", [
    [record(n) for n in range(7)],
    [record(n, canvas_id=None, session_id=None) for n in range(3)],  # all-null columns: strings both ways
    [record(n, ts=None) for n in range(3)],
    [{"id": "ep-0", "tenant_id": TENANT}],  # a bare record: every other column null
    [record(n, ts=1e10 + n / 3) for n in range(3)],
])
def test_the_arrow_decode_makes_the_python_decodes_columns(recs: list[dict[str, Any]]) -> None:
    rows = rows_of(recs)
    assert columns(rows, arrow=True) == columns(rows, arrow=False)


@pytest.mark.parametrize("why, recs", [
    ("an integer ts stays an integer", [record(0), record(1, ts=1_700_000_000)]),
    ("a number where a string is", [record(0), record(1, task_type=5)]),
    ("a boolean where a string is", [record(0, outcome=True)]),
    ("an object where a property is", [record(0, canvas_id={"id": "c"})]),
    ("a list where a property is", [record(0, agent_role=["a", "b"])]),
    ("a legacy index state in the record", [record(0, index_status="indexed")]),
])
def test_records_it_would_copy_differently_are_left_to_python(why: str, recs: list[dict[str, Any]]) -> None:
    ep = empty_nodes(["Episode"])["Episode"]
    assert arrow_episodes(ep, rows_of(recs), TENANT, {}) is None, why
    assert all(v == [] for v in ep.values()), "a refused decode left columns behind"


def test_text_arrow_cannot_read_is_left_to_python() -> None:
    ep = empty_nodes(["Episode"])["Episode"]
    lone = dumps(record(0)).replace("tâche", "t\ud800che")  # a lone surrogate (the json fallback can write one)
    duplicate = dumps(record(0))[:-1] + ',"outcome":"failure"}'  # the Python decode keeps the last
    escaped = dumps(record(0)).replace("tâche", "t\\ud800che")
    for data in (lone, duplicate, escaped):
        assert arrow_episodes(ep, [(data, "indexed", None)], TENANT, {}) is None
    assert arrow_episodes(ep, [], TENANT, {}) is None
