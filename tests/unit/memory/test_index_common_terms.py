"""common_terms.py: in a table searched through its mirror, a query of rare and common words whose
common words hold more than ``fulltext_common_budget`` rows finds the rows holding a rare word,
each with the score the whole query gives it; any other query is searched whole. A word is common
when a sample (read in the background) puts it in more than ``fulltext_common_share`` of the rows
(or more than ``fulltext_common_rows`` rows); each table (tenant) has its own; a purge lets go of
the table's set."""

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

SHARE = 0.2  # of 1,500 rows: the few most frequent words of the Zipf draw (more than 300 rows)


def open_index(path: Any, share: float = SHARE, budget: int = 0, common_rows: int = 0) -> EpisodeIndex:
    idx = EpisodeIndex(path, D, "test-embedder", WorldGraphConfig(
        mirror_min_rows=1, ann_index_min_rows=100_000, index_version_retention_seconds=0,
        fulltext_common_share=share, fulltext_common_budget=budget, fulltext_common_rows=common_rows))
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


def scored(hits: list[dict[str, Any]]) -> dict[str, float]:
    return {h["episode_id"]: round(h["bm25"], 4) for h in hits}


@pytest.fixture()
def index(tmp_path: Any) -> Any:
    idx = open_index(tmp_path / "db")
    yield idx
    idx.close()


@pytest.fixture()
def whole(tmp_path: Any) -> Any:
    """An index searching every query whole (no common words): the reference scores."""
    idx = open_index(tmp_path / "whole", share=0)
    yield idx
    idx.close()


def test_the_words_held_by_more_than_the_share_are_the_common_ones(index: EpisodeIndex) -> None:
    rows = make_rows("A", 1500, 1)
    load(index, rows)
    common = sampled(index, "A")
    # 1,500 rows is fewer than SAMPLE_ROWS: the sample is every row, so the set is exact
    held = held_rows(rows)
    assert common == {t for t, c in held.items() if c > SHARE * len(rows)}
    assert "w000" in common and MARK not in common and len(common) < 20


def test_a_count_makes_a_word_common_too(tmp_path: Any) -> None:
    idx = open_index(tmp_path / "db", share=0, common_rows=300)
    try:
        rows = make_rows("A", 1500, 1)
        load(idx, rows)
        assert sampled(idx, "A") == {t for t, c in held_rows(rows).items() if c > 300}
    finally:
        idx.close()


def both_loaded(index: EpisodeIndex, whole: EpisodeIndex) -> tuple[list[dict[str, Any]], frozenset[str], str]:
    """The same rows in both indexes, ``index`` sampled: (rows, its common terms, a rare word)."""
    rows = make_rows("A", 1500, 1)
    load(index, rows)
    load(whole, rows)
    common = sampled(index, "A")
    held = held_rows(rows)
    return rows, common, next(w for w in WORDS if 0 < held[w] < 40)


def test_the_rows_holding_a_rare_word_lead_with_the_whole_querys_scores(index: EpisodeIndex,
                                                                         whole: EpisodeIndex) -> None:
    rows, common, rare = both_loaded(index, whole)
    query = f"w000 w001 {rare}"
    assert {"w000", "w001"} <= common and rare not in common
    hits = index.text_search("A", query, k=50)
    everyone = whole.text_search("A", query, k=1500)
    holding = {r["episode_id"] for r in rows if rare in r["text"].split()}
    # the hits are the rows holding the rare word, every one of them, scored as the whole query scores them
    assert {h["episode_id"] for h in hits} == holding
    assert scored(hits) == {e: s for e, s in scored(everyone).items() if e in holding}
    # the whole query's hits also hold rows of the common words only (what this leaves out)
    assert len(everyone) > len(holding)
    # the marker (one row) and a common word: that one row
    assert [h["episode_id"] for h in index.text_search("A", f"w000 {MARK}", k=10)] == ["A7"]
    # a rare word held by no row: no hits, however many rows hold the common words
    assert index.text_search("A", "w000 w001 zzunheardof", k=10) == []
    # filtered searches take the same query: a filter checked on the hits, and a narrow date range
    # (LanceDB's prefilter), whose hits are the rows in range holding the rare word
    assert {h["episode_id"] for h in index.text_search("A", query, k=50, where={"agent_role": "r"})} == holding
    start, end = 1_700_000_000.0 + 300, 1_700_000_000.0 + 1_000
    in_range = {r["episode_id"] for r in rows if start <= r["timestamp"] <= end} & holding
    assert in_range and len(in_range) < len(holding)
    narrow = index.text_search("A", query, k=50, where={"start": start, "end": end})
    assert scored(narrow) == {e: s for e, s in scored(everyone).items() if e in in_range}
    assert index._common.counts["split"] >= 5


def test_a_query_of_common_words_only_or_rare_words_only_is_searched_whole(index: EpisodeIndex,
                                                                          whole: EpisodeIndex) -> None:
    _, common, rare = both_loaded(index, whole)
    for query in ("w000", " ".join(sorted(common)), rare, f"{rare} {MARK}"):
        assert scored(index.text_search("A", query, k=20)) == scored(whole.text_search("A", query, k=20)), query
    assert index._common.counts["split"] == 0


def test_common_words_holding_fewer_rows_than_the_budget_are_searched_whole(tmp_path: Any,
                                                                          whole: EpisodeIndex) -> None:
    rows = make_rows("A", 1500, 1)
    held = held_rows(rows)
    rare = next(w for w in WORDS if 0 < held[w] < 40)
    load(whole, rows)
    query = f"w000 {rare}"
    for budget, split in ((held["w000"] + 100, False), (held["w000"] - 100, True)):
        idx = open_index(tmp_path / f"db{budget}", budget=budget)
        try:
            load(idx, rows)
            sampled(idx, "A")
            hits = idx.text_search("A", query, k=50)
            assert (len(hits) < 50) is split
            if not split:
                assert scored(hits) == scored(whole.text_search("A", query, k=50))
            assert idx._common.counts["split"] == int(split)
        finally:
            idx.close()


def test_zero_share_and_rows_search_every_query_whole(whole: EpisodeIndex) -> None:
    load(whole, make_rows("A", 1500, 1))
    assert len(whole.text_search("A", "w000 zzunheardof", k=10)) == 10
    assert whole._common.held(table_name("A")) is None  # nothing sampled


def test_a_table_of_at_most_the_count_is_searched_whole(tmp_path: Any) -> None:
    idx = open_index(tmp_path / "db", share=0, common_rows=300)
    try:
        load(idx, make_rows("A", 300, 1))
        for _ in range(3):
            assert len(idx.text_search("A", "w000 zzunheardof", k=10)) == 10
        assert idx._common.held(table_name("A")) is None
    finally:
        idx.close()


def test_each_tenant_has_its_own_common_words(index: EpisodeIndex) -> None:
    load(index, make_rows("A", 1500, 1))
    load(index, make_rows("B", 1500, 2, vocabulary=list(reversed(WORDS))))  # w299 is B's most frequent
    a, b = sampled(index, "A"), sampled(index, "B")
    assert "w000" in a and "w000" not in b and "w299" in b and "w299" not in a
    # a common word of A with a word in no row: nothing in A, B's rows of w000 (rare there) in B
    assert index.text_search("A", "w000 zzunheardof", k=10) == []
    assert index.text_search("B", "w299 zzunheardof", k=10) == []
    assert index.text_search("B", "w000 zzunheardof", k=10)


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

    def broken(self: Any, ds: Any) -> dict[str, float]:
        raise OSError("disk gone")

    monkeypatch.setattr(common_terms.CommonTerms, "common_of", broken)
    common = sampled(index, "A")
    assert common == frozenset()  # not tried again until the table moves
    assert len(index.text_search("A", "w000 zzunheardof", k=10)) == 10


def test_split_cuts_words_where_the_tokenizer_does() -> None:
    common = frozenset(terms("reconcile sales pipeline"))
    assert common_terms.split("how to reconcile sales-pipeline q12 the_end", common) == \
        ("q12 end", "reconcile sales pipeline")
    assert common_terms.split("the of and", common) == ("", "")


def test_close_waits_for_a_sample_being_read(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that exits right after its first search must not end inside LanceDB's read (the
    sampling daemon thread aborted the interpreter's exit: 2 of 6 cold starts at 200k rows)."""
    import threading

    real = common_terms.CommonTerms.common_of
    reading = threading.Event()

    def slow(self: Any, ds: Any) -> dict[str, float]:
        reading.set()
        time.sleep(0.5)
        return real(self, ds)

    monkeypatch.setattr(common_terms.CommonTerms, "common_of", slow)
    idx = open_index(tmp_path / "db")
    load(idx, make_rows("A", 1500, 1))
    idx.text_search("A", "w000", k=5)
    assert reading.wait(10)
    idx.close()
    assert not [t for t in threading.enumerate() if t.name == "worldgraph-common-terms"]
