"""search.py: the full-text search of a filter the mirror can evaluate (role, agent, canvases, a
date range, success, episode ids and their combinations) over a mirrored table: a wide filter is
checked on LanceDB's unfiltered hits, episode ids whose terms are not held are searched by LanceDB
over their rows' addresses (``row_addr_allowlist``), a narrow filter goes to LanceDB's prefilter.
Every way gives the hits and scores of LanceDB's own search with the filter as SQL; a forgotten
row never comes back; row_addr_set writes what lance's own serializer writes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index import search
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.schema import metadata_filter
from worldgraph.memory.index.search import row_addr_set

D = 16
WORDS = [f"w{i:03d}" for i in range(300)]  # no English stems: one term each
T0 = 1_700_000_000.0


def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(WORDS) + 1)  # Zipf: common and rare terms, lengths 4-30
    p /= p.sum()
    rows = []
    for i in range(n):
        words = list(rng.choice(WORDS, size=int(rng.integers(4, 31)), p=p))
        rows.append({"episode_id": f"A{i}", "tenant_id": "A", "agent_role": f"role{i % 4}",
                     "agent_id": f"agent{i % 12}", "canvas_id": f"canvas-{i % 30}" if i % 3 else None,
                     "timestamp": T0 + i, "text": " ".join(words), "metadata_terms": [f"t{i % 5}"],
                     "vector": rng.standard_normal(D).astype(np.float32), "success": bool(i % 4 != 1)})
    return rows


@pytest.fixture()
def loaded(tmp_path: Any) -> Any:
    idx = EpisodeIndex(str(tmp_path / "db"), D, "test-embedder",
                       WorldGraphConfig(mirror_min_rows=1, ann_index_min_rows=100_000,
                                        index_version_retention_seconds=0))
    idx._small.max_rows = 0  # never the small-table copy: the mirror's path
    rows = make_rows(1500, 1)
    for start in range(0, len(rows), 500):  # three fragments
        idx.upsert(rows[start:start + 500])
    idx.ensure_indexes(vector=False)
    yield idx, rows
    idx.close()


def lance_filtered(idx: EpisodeIndex, query: str, where: dict[str, Any], k: int) -> list[tuple[str, float]]:
    """LanceDB's own BM25 with the filter as its SQL prefilter: the top ``k`` (episode id, score)."""
    from lance.query import MatchQuery

    ds = idx._part("A").latest_dataset()
    tbl = ds.to_table(columns=["episode_id", "_score"], full_text_query=MatchQuery(query, "text"),
                      filter=metadata_filter(where), prefilter=True, limit=k)
    return list(zip(tbl.column("episode_id").to_pylist(), tbl.column("_score").to_pylist()))


NONE_PASS = {"agent_role": "role1", "start": T0 + 100, "end": T0 + 900, "success_only": True}  # role1 rows fail
FILTERS = [
    {"agent_role": "role2"},  # 25 %
    {"success_only": True},  # 75 %
    {"agent_id": "agent5"},  # 8 %
    {"canvas_ids": ["canvas-7", "canvas-11"]},  # 4.4 %
    {"start": T0 + 300, "end": T0 + 339},  # 2.7 %
    NONE_PASS,
    {"agent_role": "role3", "start": T0 + 100, "end": T0 + 900},
    {"episode_ids": frozenset(f"A{i}" for i in range(0, 1500, 9)), "agent_role": "role2"},
]
QUERIES = ["w001 w040", "w120 w007 w007", "w299", "w010 w011 w012 w013 w014 w015"]


def check(idx: EpisodeIndex, where: dict[str, Any], k: int = 10) -> None:
    for query in QUERIES:
        hits = idx.text_search("A", query, k=k, where=where, columns=["episode_id"])
        want = lance_filtered(idx, query, where, k)
        assert [h["bm25"] for h in hits] == pytest.approx([s for _, s in want])  # its top k, its scores
        scores = dict(lance_filtered(idx, query, where, 1500))
        for h in hits:  # each hit passes the filter and has its own score (ties at the k-th place: either row)
            assert h["episode_id"] in scores and h["bm25"] == pytest.approx(scores[h["episode_id"]])


@pytest.mark.parametrize("where", FILTERS)
def test_a_filter_the_mirror_evaluates_checked_on_lancedbs_unfiltered_hits(loaded: Any, where: dict[str, Any],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    idx, _ = loaded
    monkeypatch.setattr(search, "WIDE_FILTER_SHARE", 0.0)  # every filter of the mirror's columns: checked
    monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 1_000_000)  # (episode ids too)
    check(idx, where)
    if where is not NONE_PASS:  # (no row passes: no search at all)
        assert idx._texts.counts["wide"] >= 1


def test_only_a_wide_filter_is_checked_on_the_hits(loaded: Any) -> None:
    idx, _ = loaded
    check(idx, {"agent_id": "agent5"})  # 8 %: LanceDB's prefilter, as before
    assert idx._texts.counts["wide"] == 0
    check(idx, {"success_only": True})  # 75 %
    assert idx._texts.counts["wide"] == len(QUERIES) and idx._texts.counts["allowed"] == 0


@pytest.mark.parametrize("share", [9, 2])
def test_episode_ids_whose_terms_are_not_held_are_searched_by_their_rows_addresses(
        loaded: Any, share: int, monkeypatch: pytest.MonkeyPatch) -> None:
    idx, _ = loaded
    monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 0)  # never LanceDB's unfiltered hits checked
    idx._texts.max_rows = 0  # nor the episode ids' terms in process
    ids = frozenset(f"A{i}" for i in range(0, 1500, share))
    for where in ({"episode_ids": ids}, {"episode_ids": ids, "agent_role": "role2"}):
        check(idx, where)
    assert idx._texts.counts["allowed"] == 2 * len(QUERIES) and idx._texts.counts["wide"] == 0


def test_a_fetch_with_too_few_passing_falls_back_to_lancedb(loaded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    idx, _ = loaded
    monkeypatch.setattr(search, "WIDE_TEXT_SLACK", 0.01)  # a fetch of k: too few of the filter's rows in it
    monkeypatch.setattr(search, "WIDE_FILTER_SHARE", 0.0)
    monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 1_000_000)
    idx._texts.max_rows = 0
    check(idx, {"agent_id": "agent5"})  # LanceDB's prefilter
    check(idx, {"episode_ids": frozenset(f"A{i}" for i in range(0, 1500, 9))})  # the rows' addresses
    assert idx._texts.counts["allowed"] >= len(QUERIES) - 1


def test_a_forgotten_row_is_never_a_hit(loaded: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    idx, _ = loaded
    monkeypatch.setattr(search, "WIDE_TEXT_FETCH", 0)
    idx._texts.max_rows = 0
    where = {"episode_ids": frozenset(f"A{i}" for i in range(0, 1500, 3))}
    first = idx.text_search("A", "w001 w040", k=5, where=where, columns=["episode_id"])
    gone = first[0]["episode_id"]
    idx.delete([gone])
    hits = idx.text_search("A", "w001 w040", k=5, where=where, columns=["episode_id"])
    assert gone not in {h["episode_id"] for h in hits} and len(hits) == 5
    assert [h["bm25"] for h in hits] == pytest.approx([s for _, s in lance_filtered(idx, "w001 w040", where, 5)])
    assert idx._texts.counts["allowed"] == 2


def test_episode_ids_and_metadata_terms_are_their_rows_addresses_and_sql(loaded: Any) -> None:
    idx, _ = loaded  # (metadata terms are not in the mirror: LanceDB evaluates them, beside the addresses)
    ids = frozenset(f"A{i}" for i in range(0, 1500, 2))
    check(idx, {"episode_ids": ids, "metadata_terms": ["t2"]})
    check(idx, {"episode_ids": ids, "metadata_terms": ["t2"], "start": T0, "end": T0 + 1200})
    assert idx.text_search("A", "w001", k=5, where={"episode_ids": frozenset(["nobody"]), "metadata_terms": ["t2"]},
                           columns=["episode_id"]) == []


def test_no_passing_row_finds_nothing(loaded: Any) -> None:
    idx, _ = loaded
    assert idx.text_search("A", "w001", k=5, where={"agent_id": "nobody"}, columns=["episode_id"]) == []


def test_row_addr_set_writes_what_lances_serializer_writes() -> None:
    from lance.dataset import serialize_row_addrs

    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(0, 12_000))
        frags = rng.integers(0, 4, n).astype(np.int64)
        span = int(rng.choice([100, 70_000, 300_000]))  # array containers, bitmaps, several keys a fragment
        offsets = np.arange(n) if trial % 3 == 0 else rng.integers(0, span, n)
        addrs = (frags << 32) | offsets
        given = rng.permutation(addrs) if trial % 2 else np.unique(addrs)
        assert row_addr_set(given) == serialize_row_addrs(sorted(set(addrs.tolist())))


def test_a_pylance_that_serializes_otherwise_gets_its_own_serializer(monkeypatch: pytest.MonkeyPatch) -> None:
    """row_addr_set checks its encoder against lance's once; on a mismatch lance's bytes are used."""
    from lance.dataset import serialize_row_addrs

    monkeypatch.setattr(search, "_ROW_ADDR_SET_OK", [])
    monkeypatch.setattr(search, "_row_addr_set", lambda addrs: b"not lance's format")
    addrs = np.array([7, 3, 3, (2 << 32) + 5], np.int64)
    assert search.row_addr_set(addrs) == bytes(serialize_row_addrs([3, 7, (2 << 32) + 5]))
    assert search._ROW_ADDR_SET_OK == [False]
