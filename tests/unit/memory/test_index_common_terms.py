"""common_terms.py: a table searched through its mirror leaves out of its full-text query the words
more than ``fulltext_common_rows`` of its rows hold (estimated from a sample, read in the
background); the rare words are still searched; each table (tenant) has its own; 0 turns it off;
a purge lets go of the table's set."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from tests.unit.memory.test_index_passing_text import MARK, WORDS, D, make_rows
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index import common_terms
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.schema import table_name
from worldgraph.memory.index.small import terms

COMMON_ROWS = 300  # of 1,500 rows: the few most frequent words of the Zipf draw


def open_index(path: Any, common_rows: int = COMMON_ROWS) -> EpisodeIndex:
    idx = EpisodeIndex(path, D, "test-embedder", WorldGraphConfig(
        mirror_min_rows=1, ann_index_min_rows=100_000, index_version_retention_seconds=0,
        fulltext_common_rows=common_rows))
    idx._small.max_rows = 0  # never the small-table copy: the mirror's path
    return idx


def load(idx: EpisodeIndex, rows: list[dict[str, Any]]) -> None:
    for start in range(0, len(rows), 500):
        idx.upsert(rows[start:start + 500])
    idx.ensure_indexes(vector=False)


def held_rows(rows: list[dict[str, Any]]) -> Counter[str]:
    return Counter(t for r in rows for t in set(terms(r["text"])))


def sampled(idx: EpisodeIndex, tenant: str, query: str = "w000") -> frozenset[str]:
    """Search once (the first search of a big table starts its sample) and wait for the sample."""
    idx.text_search(tenant, query, k=5)
    deadline = time.monotonic() + 30
    while (common := idx._common.held(table_name(tenant))) is None:
        assert time.monotonic() < deadline, "the sample was never read"
        time.sleep(0.02)
    return common


@pytest.fixture()
def index(tmp_path: Any) -> Any:
    idx = open_index(tmp_path / "db")
    yield idx
    idx.close()


def test_the_words_held_by_more_rows_than_the_setting_are_the_common_ones(index: EpisodeIndex) -> None:
    rows = make_rows("A", 1500, 1)
    load(index, rows)
    common = sampled(index, "A")
    # 1,500 rows is fewer than SAMPLE_ROWS: the sample is every row, so the set is exact
    held = held_rows(rows)
    assert common == {t for t, c in held.items() if c > COMMON_ROWS}
    assert "w000" in common and MARK not in common and len(common) < 20


def test_a_common_word_is_not_searched_and_a_rare_one_still_is(index: EpisodeIndex) -> None:
    rows = make_rows("A", 1500, 1)
    load(index, rows)
    common = sampled(index, "A")
    rare = next(w for w in WORDS if 0 < held_rows(rows)[w] < 50)
    # the common word alone: nothing to search in this table
    assert index.text_search("A", "w000", k=10) == []
    assert index.text_search("A", " ".join(sorted(common)), k=10) == []
    # with a rare word: the rare word's rows, ranked by it alone
    hits = index.text_search("A", f"w000 {MARK}", k=10)
    assert [h["episode_id"] for h in hits] == ["A7"]
    with_common = index.text_search("A", f"w000 {rare}", k=50)
    alone = index.text_search("A", rare, k=50)
    assert [h["episode_id"] for h in with_common] == [h["episode_id"] for h in alone] and alone
    assert all(rare in r["text"].split() for r in rows if r["episode_id"] in {h["episode_id"] for h in alone})
    # filtered searches take the pruned query too
    assert index.text_search("A", "w000", k=10, where={"agent_role": "r"}) == []
    assert index._common.counts["emptied"] >= 3 and index._common.counts["pruned"] >= 2


def test_zero_searches_every_word(tmp_path: Any) -> None:
    idx = open_index(tmp_path / "db", common_rows=0)
    try:
        load(idx, make_rows("A", 1500, 1))
        assert len(idx.text_search("A", "w000", k=10)) == 10
        assert idx._common.held(table_name("A")) is None  # nothing sampled
    finally:
        idx.close()


def test_a_table_of_at_most_the_setting_is_searched_whole(index: EpisodeIndex) -> None:
    load(index, make_rows("A", COMMON_ROWS, 1))
    for _ in range(3):
        assert len(index.text_search("A", "w000", k=10)) == 10
    assert index._common.held(table_name("A")) is None


def test_each_tenant_has_its_own_common_words(index: EpisodeIndex) -> None:
    load(index, make_rows("A", 1500, 1))
    load(index, make_rows("B", 1500, 2, vocabulary=list(reversed(WORDS))))  # w299 is B's most frequent
    a, b = sampled(index, "A"), sampled(index, "B")
    assert "w000" in a and "w000" not in b and "w299" in b and "w299" not in a
    assert index.text_search("A", "w299", k=10) and not index.text_search("B", "w299", k=10)


def test_sampled_again_once_the_table_grew_by_a_quarter(index: EpisodeIndex) -> None:
    rows = make_rows("A", 1500, 1)
    load(index, rows)
    before = sampled(index, "A")
    # 600 rows more, every one holding a word the table had not held: common now
    more = make_rows("A", 600, 3)
    for i, r in enumerate(more):
        r["episode_id"], r["text"] = f"A-more{i}", r["text"] + " zznewword"
    load(index, more)
    assert "zznewword" not in before
    deadline = time.monotonic() + 30
    while "zznewword" not in (index._common.held(table_name("A")) or ()):
        assert time.monotonic() < deadline, "never sampled again"
        index.text_search("A", "w000", k=5)
        time.sleep(0.02)


def test_a_purge_lets_go_of_the_tables_set(index: EpisodeIndex) -> None:
    load(index, make_rows("A", 1500, 1))
    sampled(index, "A")
    index.purge([], [], ["A"])
    assert index._common.held(table_name("A")) is None
    index.release("A")


def test_a_failed_sample_leaves_the_queries_whole(index: EpisodeIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    load(index, make_rows("A", 1500, 1))

    def broken(self: Any, ds: Any) -> frozenset[str]:
        raise OSError("disk gone")

    monkeypatch.setattr(common_terms.CommonTerms, "common_of", broken)
    common = sampled(index, "A")
    assert common == frozenset()  # not tried again until the table moves
    assert len(index.text_search("A", "w000", k=10)) == 10
