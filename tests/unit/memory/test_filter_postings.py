"""filter_postings.py: a mirror's rows by agent, canvas and time, so a narrow filter's rows are a
slice or a few instead of a mask of every row; searched through them, a filter gives the hits
the mask gives, rows recorded after the postings were built among them, rows forgotten never."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from tests.unit.memory.test_index_mirror import DAY, NOW, config, exact, loaded, make_rows, passes  # noqa: F401
from worldgraph.memory.index import filter_postings, mirror_search
from worldgraph.memory.index.columns import hash_value
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.mirror_search import MirrorSearch

D = 48


def _columns(n: int, split: int, seed: int) -> tuple[dict[str, list[np.ndarray]], dict[str, np.ndarray]]:
    """Random agent, canvas and ts columns of n rows, as a base of ``split`` rows and a tail."""
    rng = np.random.default_rng(seed)
    whole = {"agent": np.array([hash_value(f"a{i}") for i in rng.integers(0, 30, n)], np.uint64),
             "canvas": np.array([hash_value(f"c{i}") if i < 200 else hash_value(None)
                                 for i in rng.integers(0, 400, n)], np.uint64),
             "ts": NOW - np.round(rng.uniform(0, 90 * DAY, n) / 3600) * 3600}  # (whole hours: ties at the ends)
    return {f: [v[:split], v[split:]] for f, v in whole.items()}, whole


@pytest.mark.parametrize("split", [5_000, 3_000, 0])
def test_postings_give_exactly_each_clauses_rows(split):
    segments, whole = _columns(5_000, split, 3)
    post = filter_postings.build(segments, 5_000)
    ts = whole["ts"]
    some = float(ts[17])  # a timestamp some row has: the ends are inclusive
    clauses = [({"agent_id": "a3"}, whole["agent"] == hash_value("a3")),
               ({"agent_id": "a-none"}, np.zeros(5_000, bool)),
               ({"canvas_ids": "c5"}, whole["canvas"] == hash_value("c5")),
               ({"canvas_ids": ["c5", "c9", "c5", "c-none"]}, np.isin(whole["canvas"], [hash_value("c5"), hash_value("c9")])),
               ({"start": some}, ts >= some), ({"end": some}, ts <= some),
               ({"start": some, "end": some + 7_200}, (ts >= some) & (ts <= some + 7_200)),
               ({"start": some + 1, "end": some}, np.zeros(5_000, bool)),
               ({"start": datetime.fromtimestamp(some, timezone.utc).replace(tzinfo=None)}, ts >= some)]
    for clause, mask in clauses:
        assert post.count(clause) == int(mask.sum()), clause
        assert np.array_equal(np.sort(post.rows(clause)), np.flatnonzero(mask)), clause
    assert post.covered == 5_000 and not post.short(5_625) and post.short(5_626)
    assert post.nbytes == 5_000 * (4 + 4 + 4 + 8) + sum(a.nbytes for f in ("agent", "canvas")
                                                         for a in post._by_value[f][:2])


def test_postings_cover_the_first_rows_only():
    segments, whole = _columns(4_000, 4_000, 5)
    post = filter_postings.build(segments, 3_000)
    mask = whole["agent"][:3_000] == hash_value("a7")
    assert np.array_equal(np.sort(post.rows({"agent_id": "a7"})), np.flatnonzero(mask))


def test_a_closed_index_stops_a_build():
    segments, _ = _columns(1_000, 1_000, 1)
    with pytest.raises(filter_postings.Stopped):
        filter_postings.build(segments, 1_000, lambda: True)


def posted(loaded, monkeypatch):  # noqa: F811
    """The loaded index once its mirror's postings (from 100 rows here) cover its 3,000 rows."""
    monkeypatch.setattr(filter_postings, "MIN_ROWS", 100)
    idx, rows = loaded
    idx.vector_search("A", np.asarray(rows[0]["vector"], np.float32), k=5)
    assert idx.wait_for_maintenance(120)
    mirror = idx._mirrors.held("eph-41")
    assert mirror.postings is not None and mirror.postings.covered == 3_000
    return idx, rows, mirror


NARROW = [{"agent_id": "a3"}, {"canvas_ids": ["c5", "c7"]}, {"canvas_ids": ["c1"], "success_only": True},
          {"agent_role": "Sales", "start": NOW - 10 * DAY}, {"start": NOW - 3 * DAY, "end": NOW - 2 * DAY},
          {"agent_id": "a3", "canvas_ids": ["c3", "c25"], "end": NOW - 40 * DAY}]


def test_a_narrow_filters_rows_come_from_the_postings(loaded, tmp_path, monkeypatch):  # noqa: F811
    """Priced as at 10M rows (the mask ~1 ns a row there), a narrow filter's rows come from the
    postings of its narrowest clause: the same hits and scores as the mask gives; rows recorded
    since the postings were built are found, a row forgotten by another process is not."""
    idx, rows, mirror = posted(loaded, monkeypatch)
    monkeypatch.setattr(mirror_search, "MASK_NS_PER_ROW", 10_000_000 / 3_000)
    taken: list[int] = []
    real = MirrorSearch._posted_rows

    def counted(mirror, where):
        out = real(mirror, where)
        taken.append(-1 if out is None else len(out))
        return out

    monkeypatch.setattr(MirrorSearch, "_posted_rows", staticmethod(counted))
    rng = np.random.default_rng(9)
    queries = [np.asarray(rows[i * 89]["vector"], np.float32) + 0.6 * rng.standard_normal(D).astype(np.float32)
               for i in range(5)]

    def hits(where, q=None):
        return [[(h["episode_id"], round(h["similarity"], 6)) for h in idx.vector_search("A", v, k=10, where=where)]
                for v in ([q] if q is not None else queries)]

    by_postings = {repr(w): hits(w) for w in NARROW}
    assert len(taken) == len(NARROW) * len(queries) and min(taken) > 0
    by_id = {r["episode_id"]: r for r in rows}
    for w in NARROW:
        assert all(got and all(passes(by_id[e], w) for e, _ in got) for got in by_postings[repr(w)])
    post = mirror.postings
    mirror.postings = None  # the mask (or the scalar indexes) instead
    assert {repr(w): hits(w) for w in NARROW} == by_postings
    mirror.postings = post
    # a row recorded since (past the postings) that is the query itself: the first hit
    new = make_rows(3_000, 1, 4)[0] | {"agent_id": "a3", "vector": queries[0]}
    idx.upsert([new])
    assert hits({"agent_id": "a3"}, queries[0])[0][0][0] == "e3000"
    assert mirror.postings is post and post.covered == 3_000  # (not built again: 1 row past 3,000)
    # a row forgotten by another process is not among them
    top = by_postings[repr({"agent_id": "a3"})][1][0][0]
    other = EpisodeIndex(tmp_path / "db", D, "test-embedder", config())
    try:
        other.delete([top])
    finally:
        other.close()
    taken.clear()
    assert top not in {e for e, _ in hits({"agent_id": "a3"}, queries[1])[0]}
    assert taken and taken[-1] > 0


def test_the_postings_are_taken_where_they_cost_less(loaded, monkeypatch):  # noqa: F811
    """At 3,000 rows an agent's 273 rows cost more than the mask of every row (12 against ~0.9 ns a
    row), a canvas's 75 less; priced as at 10M every narrow filter takes the postings; a clause
    passing too many rows, or none the postings answer, keeps the other ways."""
    idx, rows, mirror = posted(loaded, monkeypatch)
    assert MirrorSearch._posted_rows(mirror, {"agent_id": "a3"}) is None
    assert len(MirrorSearch._posted_rows(mirror, {"canvas_ids": ["c5"]})) == 75
    monkeypatch.setattr(mirror_search, "MASK_NS_PER_ROW", 10_000_000 / 3_000)
    for w in NARROW:
        got = MirrorSearch._posted_rows(mirror, w)
        assert got is not None and np.array_equal(np.sort(got), np.flatnonzero(mirror.mask(w))), w
    assert MirrorSearch._posted_rows(mirror, {"agent_role": "Ops", "success_only": True}) is None
    assert MirrorSearch._posted_rows(mirror, {"episode_ids": ["e1"], "agent_id": "a1"}) is None
    monkeypatch.setattr(mirror_search, "POSTED_NS_PER_ROW", 10_000_000)
    assert MirrorSearch._posted_rows(mirror, {"agent_id": "a3"}) is None


def test_postings_are_built_again_once_the_mirror_outgrows_them(loaded, monkeypatch):  # noqa: F811
    idx, rows, mirror = posted(loaded, monkeypatch)
    first = mirror.postings
    idx.upsert(make_rows(3_000, 300, 2))  # 300 of 3,000: not yet an eighth more
    idx.vector_search("A", np.asarray(rows[0]["vector"], np.float32), k=5)
    assert idx.wait_for_maintenance(120) and mirror.postings is first
    idx.upsert(make_rows(3_300, 200, 3))
    idx.vector_search("A", np.asarray(rows[0]["vector"], np.float32), k=5)
    assert idx.wait_for_maintenance(120) and mirror.postings is not first and mirror.postings.covered == 3_500
    where = {"agent_id": "a4"}
    assert np.array_equal(np.sort(mirror.postings.rows(where)), np.flatnonzero(mirror.mask(where)))


def test_a_filters_rows_from_the_postings_hold_before_the_lists_exist(loaded, monkeypatch):  # noqa: F811
    """Without lists yet (LanceDB's ANN index serves), more rows from the postings than are searched
    exactly still filter the ANN index's hits: every hit passes."""
    from worldgraph.memory.index import ivf

    monkeypatch.setattr(ivf, "MIN_ROWS", 10**9)
    idx, rows, mirror = posted(loaded, monkeypatch)
    assert mirror.lists is None
    monkeypatch.setattr(mirror_search, "MASK_NS_PER_ROW", 10_000_000 / 3_000)
    where = {"canvas_ids": [f"c{j}" for j in range(1, 20, 2)], "end": NOW - DAY}  # ~740 rows: above 300
    assert len(MirrorSearch._posted_rows(mirror, where)) > idx.config.mirror_exact_rows
    by_id = {r["episode_id"]: r for r in rows}
    for i in range(4):
        got = [h["episode_id"] for h in idx.vector_search("A", np.asarray(rows[i * 2 + 1]["vector"], np.float32),
                                                           k=10, where=where)]
        assert len(got) == 10 and all(passes(by_id[e], where) for e in got)


def test_many_rows_from_the_postings_go_through_the_lists(loaded, monkeypatch):  # noqa: F811
    """A filter's rows from the postings are cut to those of the lists nearest the query (one
    look-up a row) while there are fewer of them than the lists path would check; more go through
    the lists path. Both give the filtered top 10."""
    from worldgraph.memory.index import ivf

    monkeypatch.setattr(ivf, "MIN_ROWS", 100)
    monkeypatch.setattr(ivf, "MIN_PASSING", 1)  # the lists path checks ~40 x 3,000 / rows passing: ~346 at par
    idx, rows, mirror = posted(loaded, monkeypatch)
    assert idx.wait_for_maintenance(120) and mirror.lists is not None
    monkeypatch.setattr(mirror_search, "MASK_NS_PER_ROW", 10_000_000 / 3_000)
    ways: list[str] = []
    for name in ("_in_nearest_lists", "_list_rows"):
        real = getattr(MirrorSearch, name)
        monkeypatch.setattr(MirrorSearch, name, staticmethod(lambda *a, real=real, name=name: ways.append(name) or real(*a)))
    by_id = {r["episode_id"]: r for r in rows}
    for where, way in (({"agent_id": "a3"}, "_in_nearest_lists"),  # 273 rows
                       ({"canvas_ids": [f"c{j}" for j in range(1, 20, 2)]}, "_list_rows")):  # 750 (not wide: 1,200)
        ways.clear()
        q = np.asarray(rows[7]["vector"], np.float32)
        got = [h["episode_id"] for h in idx.vector_search("A", q, k=10, where=where)]
        assert ways == [way] and all(passes(by_id[e], where) for e in got)
        assert len(set(got) & set(exact(rows, q, 10, where))) >= 9


def test_a_failed_build_is_said_and_tried_again(loaded, monkeypatch, caplog):  # noqa: F811
    """A build that fails leaves the searches on the other ways, says so once, and the next search
    starts another."""
    monkeypatch.setattr(filter_postings, "MIN_ROWS", 100)
    idx, rows = loaded
    real = filter_postings.build
    calls: list[int] = []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("no room for the postings")
        return real(*args, **kwargs)

    monkeypatch.setattr(filter_postings, "build", failing_once)
    q = np.asarray(rows[0]["vector"], np.float32)
    with caplog.at_level("WARNING", logger="worldgraph.memory.index.episode_index"):
        idx.vector_search("A", q, k=5)
        assert idx.wait_for_maintenance(120)
    mirror = idx._mirrors.held("eph-41")
    assert mirror.postings is None and any("building the postings of eph-41 failed" in r.getMessage()
                                           for r in caplog.records)
    assert len(idx.vector_search("A", q, k=5, where={"agent_id": "a3"})) == 5
    assert idx.wait_for_maintenance(120) and len(calls) == 2 and mirror.postings is not None
