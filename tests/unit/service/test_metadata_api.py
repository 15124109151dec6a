"""What agent frameworks need of the public API, end to end on both stores: metadata stored
verbatim and filtered in recall and listing, upsert by the caller's id (the old episode forgotten,
its words gone after purge), conversation turns with roles and empty text, read back in order."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.unit.service.test_service_stores import tenant, wm  # noqa: F401 - fixtures (both stores)
from worldgraph import InvalidInputError, WorldModel
from worldgraph.memory.embeddings import HashingEmbedder


def exp(text: str, **kw: object) -> dict[str, object]:
    return {"agent_id": "notes", "task_type": "note", "task_description": text, "outcome": "success", **kw}


def test_metadata_verbatim_and_filtered(wm: WorldModel, tenant: str) -> None:  # noqa: F811
    meta = {" spaced key ": " kept as is ", "nested": {"list": [1, 2.5, None, {"x": "é"}]}, "n": 0}
    first = wm.record_experience(tenant, exp("a red apple", metadata=meta))
    assert wm.get_episode(tenant, first)["metadata"] == meta
    ids = wm.record_experiences(tenant, [exp(f"apple pie number {i}", metadata={"color": ["red", "green"][i % 2],
                                                                                 "n": i, "user": {"id": f"u{i % 3}"}})
                                         for i in range(12)])
    no_floor = {"min_similarity": -1.0}

    def recalled(flt: dict[str, object]) -> list[int]:
        rs = wm.recall_experiences(tenant, None, "apple", limit=50, options={**no_floor, "metadata": flt})
        return sorted(int(r["metadata"]["n"]) for r in rs)

    assert recalled({"color": "red"}) == [0, 2, 4, 6, 8, 10]
    assert recalled({"n": {"$gt": 8}}) == [9, 10, 11]
    assert recalled({"user": {"id": "u1"}, "color": "green"}) == [1, 7]
    assert recalled({"n": {"$in": [0, 3]}}) == [0, 0, 3]  # the first episode has n 0 too
    assert recalled({"nested": {"list": [1, 2.5, None, {"x": "é"}]}}) == [0]
    assert recalled({"color": "purple"}) == []
    # results carry the metadata; so does every read path
    top = wm.recall_experiences(tenant, None, "apple pie number 4", options={"metadata": {"n": 4}})[0]
    assert top["episode_id"] == ids[4] and top["metadata"] == {"color": "red", "n": 4, "user": {"id": "u1"}}
    # listing: newest first, pages that continue the filter
    page = wm.list_episodes(tenant, metadata={"color": "green"}, limit=2)
    got = [e["metadata"]["n"] for e in page.items]
    while page.next_cursor:
        page = wm.list_episodes(tenant, metadata={"color": "green"}, limit=2, cursor=page.next_cursor)
        got += [e["metadata"]["n"] for e in page.items]
    assert sorted(got) == [1, 3, 5, 7, 9, 11]
    with pytest.raises(InvalidInputError) as err:  # a cursor belongs to its filter
        wm.list_episodes(tenant, metadata={"color": "red"}, cursor=wm.list_episodes(
            tenant, metadata={"color": "green"}, limit=1).next_cursor)
    assert err.value.field == "cursor"
    with pytest.raises(InvalidInputError) as err:
        wm.recall_experiences(tenant, None, "apple", options={"metadata": {"n": {"$near": 1}}})
    assert "$near" in str(err.value)


def test_a_narrow_filter_finds_its_nearest(wm: WorldModel, tenant: str) -> None:  # noqa: F811
    """The filter is pushed into the index search: 1 episode of 300 passing it is found, though
    299 others are nearer to the query (checking the candidates alone would miss it)."""
    wm.record_experiences(tenant, [exp(f"quarterly invoice reconciliation {i}", metadata={"user": "many"})
                                   for i in range(300)] + [exp("lunch menu", metadata={"user": "one"})])
    rs = wm.recall_experiences(tenant, None, "quarterly invoice reconciliation",
                               options={"metadata": {"user": "one"}, "min_similarity": -1.0})
    assert [r["task_description"] for r in rs] == ["lunch menu"]


def test_replace_forgets_the_old_episode(tmp_path: Path) -> None:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    secret, kept = f"zq{uuid.uuid4().hex[:10]}x", f"kp{uuid.uuid4().hex[:10]}x"
    data = tmp_path / "data"
    with WorldModel.open(data, embedder=HashingEmbedder(64)) as wm:
        wm.record_experience(tenant, exp(f"old {secret}", episode_id="item-1", metadata={"v": secret}))
        wm.record_experience(tenant, exp(f"other {kept}", episode_id="item-2", metadata={"v": kept}))
        wm.index.ensure_indexes(vector=False)  # the full-text and label indexes hold the words too
        with pytest.raises(InvalidInputError):  # without replace, an id is recorded once
            wm.record_experience(tenant, exp("new", episode_id="item-1"))
        with pytest.raises(InvalidInputError):  # a bad replacement leaves the old one alone
            wm.record_experience(tenant, exp("", episode_id="item-1"), replace=True)
        assert wm.get_episode(tenant, "item-1")["metadata"] == {"v": secret}
        assert wm.record_experience(tenant, exp("new text", episode_id="item-1", metadata={"v": 2}),
                                    replace=True) == "item-1"
        assert wm.get_episode(tenant, "item-1")["task_description"] == "new text"
        assert [r["episode_id"] for r in wm.recall_experiences(
            tenant, None, secret, options={"min_similarity": -1.0, "metadata": {"v": secret}})] == []
        assert wm.list_episodes(tenant, metadata={"v": 2}).items[0]["id"] == "item-1"
        log = wm.store.forget_log(tenant)
        assert [(a["kind"], a["target_id"], a["forgotten_by"]) for a in log] == [
            ("episode", "item-1", "replaced by record_experience")]
        wm.purge()
    holding = [p for p in data.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]
    assert holding == []
    assert any(kept.encode() in p.read_bytes() for p in data.rglob("*") if p.is_file())


def test_an_upsert_with_an_idempotency_key_is_done_once(wm: WorldModel, tenant: str) -> None:  # noqa: F811
    """replace and idempotency_key together: the retry of an upsert returns the first answer and
    forgets nothing more; the same key without replace is another request."""
    wm.record_experience(tenant, exp("first text", episode_id="item-1"), idempotency_key="create-1")
    upsert = exp("second text", episode_id="item-1", metadata={"v": 2})
    assert wm.record_experience(tenant, upsert, replace=True, idempotency_key="upsert-1") == "item-1"
    assert wm.record_experience(tenant, upsert, replace=True, idempotency_key="upsert-1") == "item-1"
    assert [(a["kind"], a["target_id"]) for a in wm.store.forget_log(tenant)] == [("episode", "item-1")]
    with pytest.raises(InvalidInputError) as err:  # a key names one request: with replace or without
        wm.record_experience(tenant, upsert, idempotency_key="upsert-1")
    assert err.value.field == "idempotency_key"
    assert wm.record_experiences(tenant, [upsert], replace=True, idempotency_key="upsert-2") == ["item-1"]
    assert wm.record_experiences(tenant, [upsert], replace=True, idempotency_key="upsert-2") == ["item-1"]
    assert [(a["kind"], a["target_id"]) for a in wm.store.forget_log(tenant)] == [("episode", "item-1")] * 2
    assert wm.get_episode(tenant, "item-1")["task_description"] == "second text"
    assert len(wm.list_episodes(tenant).items) == 1


def test_turns_with_roles_and_empty_text_read_back_in_order(wm: WorldModel, tenant: str) -> None:  # noqa: F811
    for n in range(3):  # three calls, each within the same clock tick or not
        wm.record_conversation(tenant, "chat-1", [
            {"role": "user", "text": f"question {n}"},
            {"role": "assistant", "text": "", "metadata": {"tool_calls": [{"id": f"c{n}", "name": "lookup"}]}},
            {"role": "tool", "speaker": "lookup", "text": f"answer {n}", "metadata": {"tool_call_id": f"c{n}"}}])
    items = list(reversed(wm.list_episodes(tenant, session_id="chat-1").items))
    assert [(e["agent_role"], e["agent_id"], e["task_description"]) for e in items[:3]] == [
        ("user", "user", "question 0"), ("assistant", "assistant", ""), ("tool", "lookup", "answer 0")]
    assert [e["task_description"] for e in items] == [
        t for n in range(3) for t in (f"question {n}", "", f"answer {n}")]
    assert items[1]["metadata"] == {"tool_calls": [{"id": "c0", "name": "lookup"}]}
    rs = wm.recall_experiences(tenant, "tool", "answer 2", options={"min_similarity": -1.0})
    assert rs[0]["task_description"] == "answer 2"


def test_a_limit_past_the_candidate_pool_gets_that_many(tmp_path: Path) -> None:
    with WorldModel.open(tmp_path / "d", embedder=HashingEmbedder(64), candidate_pool=10, fulltext_pool=5) as wm:
        wm.record_experiences("t", [exp(f"apple {i}") for i in range(40)])
        assert len(wm.recall_experiences("t", None, "apple", limit=30, options={"min_similarity": -1.0})) == 30


def test_a_narrow_filter_finds_its_nearest_in_a_table_searched_through_its_mirror(tmp_path: Path) -> None:
    """The in-process index of big tables (mirror.py) holds no metadata terms: a metadata filter
    on such a table is searched in LanceDB with the filter pushed in, and finds its one episode."""
    from worldgraph.config import WorldGraphConfig

    with WorldModel.open(tmp_path / "data", embedder=HashingEmbedder(64),
                         config=WorldGraphConfig(mirror_min_rows=1)) as wm:
        wm.index._small.max_rows = 0  # not the in-process copy of small tables: the mirror's path
        wm.record_experiences("t", [exp(f"quarterly invoice reconciliation {i}", metadata={"user": "many"})
                                    for i in range(300)] + [exp("lunch menu", metadata={"user": "one"})])
        plain = wm.recall_experiences("t", None, "quarterly invoice reconciliation", options={"min_similarity": -1.0})
        assert plain and wm.index.mirror_stats("t") is not None  # searched through the mirror
        rs = wm.recall_experiences("t", None, "quarterly invoice reconciliation",
                                   options={"metadata": {"user": "one"}, "min_similarity": -1.0})
        assert [r["task_description"] for r in rs] == ["lunch menu"]
