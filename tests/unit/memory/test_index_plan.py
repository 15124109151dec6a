"""plan.py: a wide date range is checked on the hits instead of pushed into the search, and the
searches return exactly what the pushed-down filter returns (a stale sample included)."""

from __future__ import annotations

import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.index import plan
from worldgraph.memory.index.episode_index import EpisodeIndex

D = 64
DAY = 86400.0
NOW = 1_800_000_000.0
WORDS = ["ledger", "invoice", "deploy", "refund", "audit", "schema", "cache", "churn"]


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> EpisodeIndex:
    """6,000 rows over 90 days, 3 roles: above the in-process size, so LanceDB searches them."""
    rng = np.random.default_rng(5)
    emb = HashingEmbedder(D)
    idx = EpisodeIndex(tmp_path_factory.mktemp("plan") / "db", D, emb.name, WorldGraphConfig())
    rows = []
    for i in range(6_000):
        text = " ".join(rng.choice(WORDS, 3)) + f" run {i}"
        rows.append({"episode_id": f"e{i}", "tenant_id": "A", "agent_role": ["Finance", "Ops", "Sales"][i % 3],
                     "agent_id": f"a{i % 7}", "timestamp": NOW - float(rng.uniform(0, 90 * DAY)), "text": text,
                     "vector": rng.standard_normal(D).astype(np.float32), "success": bool(i % 4)})
    for start in range(0, len(rows), 2_000):
        idx.upsert(rows[start:start + 2_000])
    idx.ensure_indexes()
    idx._small.max_rows = 0  # never the in-process copy: these tests are about LanceDB's searches
    yield idx
    idx.close()


def pushed_down(monkeypatch: pytest.MonkeyPatch, fn):
    """``fn()`` with every filter pushed into the search (the plan off)."""
    with monkeypatch.context() as m:
        m.setattr(plan, "POST_FILTER_SHARE", 2.0)
        return fn()


def same_ranking(got: list[dict], want: list[dict]) -> bool:
    """Equal BM25 scores in order, and the same episodes above the last score (rows tied at the
    cut may differ: which of equal scores LanceDB returns first is not fixed)."""
    scores = [round(h["bm25"], 4) for h in got]
    if scores != [round(h["bm25"], 4) for h in want] or not scores:
        return scores == [round(h["bm25"], 4) for h in want]
    above = lambda hits: {h["episode_id"] for h in hits if round(h["bm25"], 4) > scores[-1]}  # noqa: E731
    return above(got) == above(want)


WHERES = [{"start": NOW - 60 * DAY, "end": NOW}, {"agent_role": "Ops", "start": NOW - 45 * DAY},
          {"end": NOW - 30 * DAY, "success_only": True}, {"start": NOW - DAY, "end": NOW}]


@pytest.mark.parametrize("where", WHERES)
def test_filtered_searches_equal_the_pushed_down_filter(index, monkeypatch, where):
    rng = np.random.default_rng(9)
    for _ in range(5):
        q = rng.standard_normal(D).astype(np.float32)
        got = index.vector_search("A", q, k=20, where=where, columns=["episode_id"])
        want = pushed_down(monkeypatch, lambda q=q: index.vector_search("A", q, k=20, where=where,
                                                                        columns=["episode_id"]))
        assert [h["episode_id"] for h in got] == [h["episode_id"] for h in want]
        assert all(set(h) == {"episode_id", "vector", "similarity"} for h in got)
    for words in ("ledger audit", "refund cache churn"):
        got = index.text_search("A", words, k=15, where=where, columns=["episode_id"])
        want = pushed_down(monkeypatch, lambda: index.text_search("A", words, k=15, where=where,
                                                                  columns=["episode_id"]))
        assert same_ranking(got, want)
        assert "timestamp" not in got[0]


def test_wide_range_is_checked_on_the_hits_narrow_one_pushed_down(index):
    part = index._part("A")
    sample = index._sample(part, part.latest_dataset())
    assert sample.size == 4_096 and sample.rows == 6_000
    assert sample.share({"agent_role": "Ops"}) == pytest.approx(1 / 3, abs=0.05)
    wide = plan.time_check({"start": NOW - 60 * DAY}, 100, sample)
    assert wide is not None and 200 <= wide.fetch <= 260  # ~2/3 of the rows: 100 / 0.67 x 1.5
    assert plan.time_check({"start": NOW - DAY, "end": NOW}, 100, sample) is None  # ~1 %: pushed in
    assert plan.time_check({"start": NOW - 60 * DAY}, 2_000, sample) is None  # too many hits to ask
    assert plan.time_check({"agent_role": "Ops"}, 100, sample) is None  # no range


def test_a_stale_sample_still_gives_the_pushed_down_result(index, monkeypatch):
    """A sample that says a narrow range is wide (the table changed since): the hits that pass are
    fewer than k, so the search runs again with the range pushed in."""
    part = index._part("A")
    real = index._sample(part, part.latest_dataset())
    where = {"start": NOW - 2 * DAY, "end": NOW - DAY}
    stale = plan.Sample({**real.columns, "timestamp": np.linspace(NOW - 2 * DAY, NOW - DAY, real.size)}, real.rows)
    monkeypatch.setattr(part, "sample", stale)
    q = np.random.default_rng(3).standard_normal(D).astype(np.float32)
    assert plan.time_check(where, 20, stale) is not None
    got = index.vector_search("A", q, k=20, where=where, columns=["episode_id"])
    got_text = index.text_search("A", "ledger", k=20, where=where, columns=["episode_id"])
    monkeypatch.setattr(plan, "POST_FILTER_SHARE", 2.0)
    want = index.vector_search("A", q, k=20, where=where, columns=["episode_id"])
    assert [h["episode_id"] for h in got] == [h["episode_id"] for h in want] and len(got) == 20
    assert same_ranking(got_text, index.text_search("A", "ledger", k=20, where=where, columns=["episode_id"]))


def test_a_filter_few_rows_pass_is_searched_exactly(index, monkeypatch):
    """One agent on one day: ~10 of 6,000 rows, spread over every IVF partition. The exact scan
    returns the true nearest (numpy over the rows that pass); the plan chooses it from the sample."""
    part = index._part("A")
    sample = index._sample(part, part.latest_dataset())
    where = {"agent_id": "a3", "start": NOW - 3 * DAY, "end": NOW}
    assert plan.maybe_exact(where, sample) and not plan.maybe_exact({"success_only": True}, sample)
    everything = index.vector_search("A", np.ones(D, np.float32), k=6_000, columns=["timestamp", "agent_id"])
    passing = [h for h in everything if h["agent_id"] == "a3" and NOW - 3 * DAY <= h["timestamp"] <= NOW]
    assert 3 <= len(passing) <= 60
    rng = np.random.default_rng(21)
    for _ in range(5):
        q = rng.standard_normal(D).astype(np.float32)
        sims = {h["episode_id"]: float(h["vector"] @ q / np.linalg.norm(h["vector"]) / np.linalg.norm(q))
                for h in passing}
        want = sorted(sims, key=lambda e: -sims[e])[:10]
        got = [h["episode_id"] for h in index.vector_search("A", q, k=10, where=where, columns=["episode_id"])]
        assert got == want


def test_sample_is_taken_again_as_the_table_grows():
    assert not plan.sample_is_stale(1_000, 1_200)
    assert plan.sample_is_stale(1_000, 1_300) and plan.sample_is_stale(1_000, 700)
