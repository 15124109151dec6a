"""passing_text.py: the full-text search of an episode-id filter (a feedback floor's or a session's
episodes) over a mirrored table runs in process, over the terms of the rows that pass, with
LanceDB's terms and BM25; a forget takes the forgotten rows' words out of this process at once and
out of another process at its next search; each table (tenant) keeps its own; on S3 too."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index import search
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.schema import table_name
from worldgraph.memory.index.small import K1, B, terms

D = 16
WORDS = [f"w{i:03d}" for i in range(300)]  # no English stems: one term each
MARK = "zqmarkerx"


def config() -> WorldGraphConfig:
    return WorldGraphConfig(mirror_min_rows=1, ann_index_min_rows=100_000, index_version_retention_seconds=0)


def make_rows(tenant: str, n: int, seed: int, vocabulary: list[str] = WORDS) -> list[dict[str, Any]]:
    """``n`` rows of ``tenant``: Zipf draws of ``vocabulary`` (its first words the commonest),
    lengths 4-30, ``MARK`` in row 7 only."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(vocabulary) + 1)  # Zipf: common and rare terms, lengths 4-30
    p /= p.sum()
    rows = []
    for i in range(n):
        words = list(rng.choice(vocabulary, size=int(rng.integers(4, 31)), p=p))
        if i == 7:
            words.append(MARK)
        rows.append({"episode_id": f"{tenant}{i}", "tenant_id": tenant, "agent_role": "r", "agent_id": "a",
                     "canvas_id": None, "timestamp": 1_700_000_000.0 + i, "text": " ".join(words),
                     "vector": rng.standard_normal(D).astype(np.float32), "success": True})
    return rows


def open_index(path: Any) -> EpisodeIndex:
    idx = EpisodeIndex(path, D, "test-embedder", config())
    idx._small.max_rows = 0  # never the small-table copy: the mirror's path
    return idx


@pytest.fixture(params=["local", "s3"])
def where_index(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "s3":
        return str(request.getfixturevalue("s3_env")["uri"])
    return str(tmp_path / "db")


@pytest.fixture()
def loaded(where_index: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    # every filter here is wide enough for LanceDB's unfiltered search checked (search.py); in
    # process up to passing_text.MAX_ROWS rows instead, but in the test of the wide path
    monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 0)
    idx = open_index(where_index)
    rows = make_rows("A", 1500, 1)
    for start in range(0, len(rows), 500):
        idx.upsert(rows[start:start + 500])
    idx.ensure_indexes(vector=False)
    yield idx, rows
    idx.close()


def reference(rows: list[dict[str, Any]], passing: set[str], query: str, k: int) -> list[tuple[str, float]]:
    """BM25 over the passing rows alone, written out (k1 1.2, b 0.75, LanceDB's idf and terms)."""
    docs = {r["episode_id"]: terms(r["text"]) for r in rows if r["episode_id"] in passing}
    avgdl = float(np.mean([len(t) for t in docs.values()]))
    n, scores = len(docs), {}
    for w in terms(query):
        df = sum(1 for t in docs.values() if w in t)
        idf = np.log(1.0 + (n - df + 0.5) / (df + 0.5))
        for e, t in docs.items():
            tf = t.count(w)
            if tf:
                scores[e] = scores.get(e, 0.0) + idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * len(t) / avgdl))
    return sorted(scores.items(), key=lambda x: -x[1])[:k]


def lance_filtered(idx: EpisodeIndex, query: str, passing: set[str], k: int) -> dict[str, float]:
    """LanceDB's own BM25 with the ids as a prefilter: every match, by episode id."""
    from lance.query import MatchQuery

    ds = idx._part("A").latest_dataset()
    pred = "episode_id IN (" + ", ".join(f"'{e}'" for e in passing) + ")"
    tbl = ds.to_table(columns=["episode_id", "_score"], full_text_query=MatchQuery(query, "text"), filter=pred,
                      prefilter=True, limit=max(len(passing), 1))
    return dict(zip(tbl.column("episode_id").to_pylist(), tbl.column("_score").to_pylist()))


def test_the_passing_rows_are_scored_in_process_as_lancedb_scores_them(loaded: Any) -> None:
    idx, rows = loaded
    rng = np.random.default_rng(4)
    passing = {f"A{i}" for i in rng.choice(1500, 400, replace=False)}
    where = {"episode_ids": frozenset(passing)}
    tie_overlap = []
    for n in range(12):
        query = " ".join(rng.choice(WORDS[:60], 3)) + (" w250" if n % 3 == 0 else "")
        hits = idx.text_search("A", query, k=10, where=where, columns=["episode_id"])
        every = dict(reference(rows, passing, query, len(passing)))
        want = sorted(every.values(), reverse=True)[:10]
        assert [h["bm25"] for h in hits] == pytest.approx(want)  # the same scores, best first
        for h in hits:  # each hit's own score (a tie at the 10th place may be either row)
            assert h["bm25"] == pytest.approx(every[h["episode_id"]]) and h["episode_id"] in passing
        # against LanceDB's prefiltered search (its idf and mean length are the whole table's): every
        # hit scores at least LanceDB's 10th score there, give or take the difference of statistics
        lance = lance_filtered(idx, query, passing, 10)
        tenth = sorted(lance.values(), reverse=True)[min(9, len(lance) - 1)]
        tie_overlap.append(np.mean([lance.get(h["episode_id"], -1.0) >= tenth - 1e-4 for h in hits]))
    assert idx._texts.counts["searches"] >= 12  # answered in process, not by LanceDB
    assert np.mean(tie_overlap) >= 0.9


def test_many_unread_rows_are_read_in_the_background_while_lancedb_answers(loaded: Any) -> None:
    idx, rows = loaded
    idx._texts.sync_rows = 50
    passing = frozenset(f"A{i}" for i in range(0, 1500, 2))  # 750 rows, none read yet
    lance = lance_filtered(idx, "w001 w040", set(passing), 10)
    first = idx.text_search("A", "w001 w040", k=10, where={"episode_ids": passing}, columns=["episode_id"])
    assert idx._texts.counts["declined"] == 1 and idx._texts.counts["searches"] == 0
    assert {h["episode_id"] for h in first} <= set(lance)  # LanceDB's answer meanwhile
    deadline = time.monotonic() + 60
    while len(idx._texts.held(table_name("A")).docs) < len(passing) and time.monotonic() < deadline:
        time.sleep(0.05)
    hits = idx.text_search("A", "w001 w040", k=10, where={"episode_ids": passing}, columns=["episode_id"])
    assert idx._texts.counts["searches"] == 1
    every = dict(reference(rows, set(passing), "w001 w040", len(passing)))
    assert [h["bm25"] for h in hits] == pytest.approx(sorted(every.values(), reverse=True)[:10])
    assert all(h["bm25"] == pytest.approx(every[h["episode_id"]]) for h in hits)


def _holds(idx: EpisodeIndex, word: str) -> bool:
    texts = idx._texts.held(table_name("A"))
    return texts is not None and word in texts.vocab


def test_a_forget_takes_the_words_out_of_this_process_and_of_another_at_its_next_search(loaded: Any) -> None:
    idx, rows = loaded
    other = open_index(idx.path)  # another process's index on the same folder or bucket
    try:
        passing = frozenset(f"A{i}" for i in range(0, 300))
        for i in (idx, other):
            assert [h["episode_id"] for h in i.text_search("A", MARK, k=5, where={"episode_ids": passing},
                                                           columns=["episode_id"])] == ["A7"]
            assert _holds(i, MARK)
        idx.delete(["A7"])  # a forget in this process: its copy goes at once
        assert not _holds(idx, MARK)
        assert _holds(other, MARK)  # the other process has not searched since
        q = np.ones(D, np.float32)
        assert "A7" not in {h["episode_id"] for h in other.vector_search("A", q, k=400, where={"episode_ids": passing})}
        assert not _holds(other, MARK)  # its next search (a vector search too) saw the delete: the words went
        assert other.text_search("A", MARK, k=5, where={"episode_ids": passing}, columns=["episode_id"]) == []
        alive = other._mirrors.held(table_name("A")).alive
        assert all(alive[r] for r in other._texts.held(table_name("A")).docs)  # only rows still there
        hits = other.text_search("A", "w000", k=5, where={"episode_ids": passing}, columns=["episode_id"])
        assert hits and other._texts.counts["searches"] >= 2  # the others are still searched in process
    finally:
        other.close()


def test_each_table_keeps_its_own_words(loaded: Any) -> None:
    idx, _ = loaded
    idx.upsert([{**r, "text": r["text"].replace(MARK, "")} for r in make_rows("B", 600, 2)])
    idx.ensure_indexes(vector=False)
    a_ids = frozenset(f"A{i}" for i in range(300))
    assert idx.text_search("B", MARK, k=5, where={"episode_ids": a_ids}, columns=["episode_id"]) == []
    b_ids = frozenset(f"B{i}" for i in range(300))
    assert idx.text_search("B", "w000", k=5, where={"episode_ids": b_ids}, columns=["episode_id"])
    idx.text_search("A", MARK, k=5, where={"episode_ids": a_ids}, columns=["episode_id"])
    assert _holds(idx, MARK) and MARK not in idx._texts.held(table_name("B")).vocab
    idx.purge([], [], ["A"])  # the tenant's table dropped: its words too
    assert idx._texts.held(table_name("A")) is None and idx._texts.held(table_name("B")) is not None


@pytest.mark.parametrize("share", [2, 7, 60])  # one row in 2 (a fetch of 30 hits), in 7 (105), in 60 (1,350)
def test_a_wide_filter_is_lancedbs_unfiltered_search_checked(loaded: Any, share: int,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    idx, _ = loaded
    if share == 60:
        monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 2_000)  # a fetch of at most this many: checked
    else:
        # too many rows to keep their terms, a fetch over WIDE_TEXT_FETCH: LanceDB's search of the
        # passing rows' addresses (test_index_filtered_text.py)
        idx._texts.max_rows = 100
    passing = frozenset(f"A{i}" for i in range(0, 1500, share))
    for query in ("w001 w040", "w120 w007 w007", "w299"):
        hits = idx.text_search("A", query, k=10, where={"episode_ids": passing}, columns=["episode_id"])
        lance = lance_filtered(idx, query, set(passing), 10)
        want = sorted(lance.values(), reverse=True)[:10]
        assert [h["bm25"] for h in hits] == pytest.approx(want)  # LanceDB's filtered top 10, its scores
        assert all(lance[h["episode_id"]] == pytest.approx(h["bm25"]) for h in hits)
    assert idx._texts.held(table_name("A")) is None and idx._texts.counts["searches"] == 0
    assert idx._texts.counts["wide" if share == 60 else "allowed"] == 3
