"""Query preprocessing and entity extraction (seed recall step 1a / 1c), and the filters a
query's own words turn into, end to end."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from worldgraph import InvalidInputError, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.recall.query import clean, parse_query

NOW = datetime(2026, 11, 18, 15, 30, tzinfo=timezone.utc)  # a Wednesday
US = timedelta(microseconds=1)


def day(y: int, m: int, d: int) -> datetime:
    return datetime(y, m, d, tzinfo=timezone.utc)


@pytest.mark.parametrize("query, canvas, artifact, agents", [
    ("what broke on canvas-123", ["canvas-123"], [], []),
    ("compare canvas-123 with canvas_sales-q3.", ["canvas-123", "canvas-sales-q3"], [], []),
    ("charts built from artifact-456", [], ["artifact-456"], []),
    ("canvas-7 and artifact-8 together", ["canvas-7"], ["artifact-8"], []),
    ("what did agent:bob try", [], [], ["bob"]),
    ("Agent: carol.smith retries", [], [], ["carol.smith"]),
    ("ask @alice about invoices", [], [], ["alice"]),
    ("mail bob@example.com the report", [], [], []),  # an e-mail address is not an agent reference
    ("plain question about refunds", [], [], []),
])
def test_reference_extraction(query: str, canvas: list[str], artifact: list[str], agents: list[str]) -> None:
    p = parse_query(query, NOW)
    assert (p.canvas_ids, p.artifact_ids, p.agent_ids) == (canvas, artifact, agents)
    assert p.original == query


@pytest.mark.parametrize("query, start, end, text", [
    ("errors on 2026-10-05", day(2026, 10, 5), day(2026, 10, 6) - US, "errors"),
    ("deploys since 2026-11-01", day(2026, 11, 1), None, "deploys"),
    ("deploys after 2026-11-01T08:00:00Z", datetime(2026, 11, 1, 8, tzinfo=timezone.utc), None, "deploys"),
    ("refunds before 2026-01-01", None, day(2026, 1, 1), "refunds"),
    ("refunds between 2026-10-01 and 2026-10-31", day(2026, 10, 1), day(2026, 11, 1) - US, "refunds"),
    ("refunds from 2026-10-01 to 2026-10-31", day(2026, 10, 1), day(2026, 11, 1) - US, "refunds"),
    ("failed deploys last week", NOW - timedelta(days=7), NOW, "failed deploys"),
    ("failed deploys yesterday", day(2026, 11, 17), day(2026, 11, 18) - US, "failed deploys"),
    ("outages today", day(2026, 11, 18), NOW, "outages"),
    ("outages in the last 3 days", NOW - timedelta(days=3), NOW, "outages"),
    ("outages in the past 2 weeks", NOW - timedelta(weeks=2), NOW, "outages"),
    ("outages in the last 24 hours", NOW - timedelta(hours=24), NOW, "outages"),
    ("outages this week", day(2026, 11, 16), NOW, "outages"),  # from Monday
    ("outages this month", day(2026, 11, 1), NOW, "outages"),
    ("outages last month", NOW - timedelta(days=30), NOW, "outages"),
    ("no dates in here", None, None, "no dates in here"),
])
def test_dates(query: str, start: datetime | None, end: datetime | None, text: str) -> None:
    p = parse_query(query, NOW)
    assert (p.start, p.end) == (start, end)
    assert p.text == text
    assert (start is None and end is None) == (p.date_phrases == [])


def test_text_left_for_embedding() -> None:
    p = parse_query("  what broke   on canvas-123 for agent:bob last week?? ", NOW)
    assert p.canvas_ids == ["canvas-123"] and p.agent_ids == ["bob"]
    assert (p.start, p.end) == (NOW - timedelta(days=7), NOW)
    # the agent and date phrases are gone; the canvas name stays (it often carries meaning)
    assert p.text == "what broke on canvas-123 for ??"
    assert "last week" not in p.text and "agent" not in p.text
    # a query that is nothing but a filter still has something to embed
    assert parse_query("last week", NOW).text == "last week"
    ent = parse_query("canvas-9 since 2026-11-01", NOW).entities()
    assert ent["canvas_ids"] == ["canvas-9"] and ent["start"] == "2026-11-01T00:00:00+00:00" and ent["end"] is None


def test_clean() -> None:
    assert clean("  reconcile\tinventory\n\n discrepancies ") == "reconcile inventory discrepancies"
    assert clean("fix «the» bug™ — now") == "fix the bug now"
    assert clean("keep: a-b/c, d.e? 50% & @x #1 + y!") == "keep: a-b/c, d.e? 50% & @x #1 + y!"


def test_an_impossible_date_is_left_as_text() -> None:
    p = parse_query("report 2026-13-45", NOW)
    assert (p.start, p.end) == (None, None)
    assert "2026-13-45" in p.text


# ------------------------------------------------------------------------------------ end to end


def _exp(desc: str, days_ago: float, canvas: str | None = None, agent: str = "dev-1") -> dict[str, Any]:
    e: dict[str, Any] = {"agent_id": agent, "agent_role": "Developer", "task_type": "visualisation",
                         "task_description": desc, "outcome": "success",
                         "timestamp": (datetime.now(timezone.utc) - timedelta(days=days_ago)).isoformat()}
    if canvas:
        e["canvas_id"] = canvas
    return e


@pytest.fixture
def wm(tmp_path: Path):  # type: ignore[no-untyped-def]
    w = WorldModel.open(tmp_path, embedder=HashingEmbedder(384))
    yield w
    w.close()


def test_query_canvas_reference_filters_recall(wm: WorldModel) -> None:
    ids = wm.record_experiences("t1", [
        _exp("build a revenue bar chart", 1, "canvas-123"),
        _exp("build a revenue bar chart quickly", 2, "canvas-999"),
        _exp("build a revenue bar chart again", 3, None),
        _exp("build a revenue line chart", 4, "canvas-123"),
    ])
    opts = {"min_similarity": 0.0}
    res = wm.recall_experiences("t1", "Developer", "build a revenue bar chart on canvas-123", limit=10, options=opts)
    assert {r["episode_id"] for r in res} == {ids[0], ids[3]}
    assert all(r["canvas_id"] == "canvas-123" for r in res)
    # without extraction the reference is only words: every canvas comes back
    res = wm.recall_experiences("t1", "Developer", "build a revenue bar chart on canvas-123", limit=10,
                                options={**opts, "extract_filters": False})
    assert len(res) == 4
    # an explicit canvas_ids option wins over the query's reference
    res = wm.recall_experiences("t1", "Developer", "build a revenue bar chart on canvas-123", limit=10,
                                options={**opts, "canvas_ids": ["canvas-999"]})
    assert [r["episode_id"] for r in res] == [ids[1]]


def test_query_agent_reference_filters_recall(wm: WorldModel) -> None:
    ids = wm.record_experiences("t1", [_exp("tune the cache", 1, agent="bob"), _exp("tune the cache", 1, agent="eve")])
    res = wm.recall_experiences("t1", None, "tune the cache agent:bob", limit=10, options={"min_similarity": 0.0})
    assert [r["episode_id"] for r in res] == [ids[0]]
    res = wm.recall_experiences("t1", None, "what did @eve do to tune the cache", limit=10,
                                options={"min_similarity": 0.0})
    assert [r["episode_id"] for r in res] == [ids[1]]
    # the agent_id option filters the same way
    res = wm.recall_experiences("t1", None, "tune the cache", limit=10, options={"min_similarity": 0.0, "agent_id": "bob"})
    assert [r["episode_id"] for r in res] == [ids[0]]


def _old(desc: str, when: str) -> dict[str, Any]:
    return {"agent_id": "ops-1", "task_type": "ops", "task_description": desc, "outcome": "success",
            "timestamp": when}


GATEWAY = "restart the payment gateway"


def _dates(res: list[Any]) -> dict[str, float]:
    return {r["episode_id"]: r["score_breakdown"]["date_match"] for r in res}


def test_query_dates_are_soft_signals(wm: WorldModel) -> None:
    ids = wm.record_experiences("t1", [
        _exp(GATEWAY, 1), _exp(GATEWAY, 6.5), _exp(GATEWAY, 8), _exp(GATEWAY, 40)])
    res = wm.recall_experiences("t1", None, f"{GATEWAY} last week", limit=10, options={"min_similarity": 0.0})
    # nothing is filtered out; what falls inside the window gets the date boost and ranks first
    order = [r["episode_id"] for r in res]
    assert set(order[:2]) == {ids[0], ids[1]} and order[2:] == [ids[2], ids[3]]
    boost = wm.config.date_match_boost
    assert _dates(res) == {ids[0]: boost, ids[1]: boost, ids[2]: 0.0, ids[3]: 0.0}
    res = wm.recall_experiences("t1", None, f"{GATEWAY} in the last 2 days", limit=10, options={"min_similarity": 0.0})
    assert len(res) == 4 and _dates(res)[ids[0]] == boost and _dates(res)[ids[1]] == 0.0
    # an explicit date_range is the caller's filter: it stays hard, and replaces the query's phrase
    old = (datetime.now(timezone.utc) - timedelta(days=60)).isoformat()
    res = wm.recall_experiences("t1", None, f"{GATEWAY} last week", limit=10,
                                options={"min_similarity": 0.0,
                                         "date_range": {"start": old,
                                                        "end": (datetime.now(timezone.utc) - timedelta(days=30)).isoformat()}})
    assert [r["episode_id"] for r in res] == [ids[3]] and _dates(res) == {ids[3]: 0.0}


def test_relative_phrases_read_against_now_or_the_newest_memory(wm: WorldModel) -> None:
    ids = wm.record_experiences("t1", [
        _old(GATEWAY, "2023-04-01T10:00:00Z"), _old(GATEWAY, "2023-05-01T10:00:00Z"),
        _old(GATEWAY, "2023-05-07T10:00:00Z")])
    boost = wm.config.date_match_boost
    # every memory is older than today's "last week": the phrase is read against the newest one
    res = wm.recall_experiences("t1", None, f"{GATEWAY} last week", limit=10, options={"min_similarity": 0.0})
    assert _dates(res) == {ids[0]: 0.0, ids[1]: boost, ids[2]: boost}
    assert {r["episode_id"] for r in res[:2]} == {ids[1], ids[2]}
    # an explicit now wins
    res = wm.recall_experiences("t1", None, f"{GATEWAY} yesterday", limit=10,
                                options={"min_similarity": 0.0, "now": "2023-04-02T09:00:00Z"})
    assert _dates(res) == {ids[0]: boost, ids[1]: 0.0, ids[2]: 0.0} and res[0]["episode_id"] == ids[0]
    res = wm.recall_experiences("t1", None, f"{GATEWAY} last week", limit=10,
                                options={"min_similarity": 0.0, "now": "2026-01-01T00:00:00Z"})
    assert len(res) == 3 and set(_dates(res).values()) == {0.0}  # nothing inside, nothing lost
    # written dates name a day, a month or a year
    for query, inside in ((f"{GATEWAY} on 7 May 2023", {ids[2]}), (f"{GATEWAY} on May 1st, 2023", {ids[1]}),
                          (f"{GATEWAY} in April 2023", {ids[0]}), (f"{GATEWAY} in 2023", set(ids))):
        res = wm.recall_experiences("t1", None, query, limit=10, options={"min_similarity": 0.0})
        assert {i for i, d in _dates(res).items() if d} == inside, query


def test_bad_now_and_empty_queries(wm: WorldModel) -> None:
    wm.record_experiences("t1", [_exp(GATEWAY, 1)])
    with pytest.raises(InvalidInputError) as err:
        wm.recall_experiences("t1", None, GATEWAY, options={"now": "last tuesday"})
    assert err.value.field == "options.now"
    for query in ("™ ©", "?!", "   "):
        with pytest.raises(InvalidInputError) as err:
            wm.recall_experiences("t1", None, query)
        assert err.value.field == "query"
