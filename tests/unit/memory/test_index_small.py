"""Small tables searched in process (memory/index/small.py) give LanceDB's answers, and see
every write: this object's, another object's on the same folder, another process's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.index.episode_index import EpisodeIndex, table_name
from worldgraph.memory.index.small import SMALL_TABLE_ROWS, rows_limit, terms

REPO = Path(__file__).resolve().parents[3]
D = 64
HASH = HashingEmbedder(D)
WORDS = ["apple", "banana", "cherry", "invoice", "ledger", "flight", "hotel", "deploy", "service", "rollback", "audit", "payroll", "inventory", "warehouse", "refund", "customer", "tax", "report", "budget", "forecast"]  # noqa: E501


def row(i: int, text: str, **kw: object) -> dict:
    base = dict(episode_id=f"e{i}", tenant_id="A", agent_id=f"agent-{i % 3}", agent_role="Finance" if i % 2 else "Ops",
                task_type="t", outcome="success", success=i % 4 != 0, confidence=0.5,
                timestamp=1_700_000_000.0 + i * 3600, canvas_id=f"c{i % 5}", canvas_action_ids=[], text=text,
                vector=HASH.embed([text])[0])
    base.update(kw)
    return base


def corpus(n: int, seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [row(i, " ".join(rng.choice(WORDS, size=int(rng.integers(2, 12))))) for i in range(n)]


def both(idx: EpisodeIndex, fn: str, *args: object, **kw: object) -> tuple[list[dict], list[dict]]:
    """The same search in process and through LanceDB."""
    fast = getattr(idx, fn)(*args, **kw)
    idx._small.max_rows = 0
    try:
        slow = getattr(idx, fn)(*args, **kw)
    finally:
        idx._small.max_rows = 5_000
    return fast, slow


@pytest.fixture
def index(tmp_path):
    idx = EpisodeIndex(tmp_path / "lancedb", D, HASH.name, WorldGraphConfig())
    idx.upsert(corpus(300))  # one write: LanceDB's text index then covers every row
    yield idx
    idx.close()


WHERES = [None, {"agent_id": "agent-1"}, {"agent_role": "Ops", "success_only": True},
          {"canvas_ids": ["c1", "c3"], "start": 1_700_000_000.0 + 50 * 3600, "end": 1_700_000_000.0 + 250 * 3600}]


@pytest.mark.parametrize("where", WHERES)
def test_vector_search_matches_lancedb(index, where):
    for text in ("apple invoice", "deploy rollback service", "tax"):
        fast, slow = both(index, "vector_search", "A", HASH.embed([text])[0], k=20, where=where, columns=["episode_id"])
        assert index._small._tables, "the small path was not taken"
        assert [r["episode_id"] for r in fast] == [r["episode_id"] for r in slow]
        assert [r["similarity"] for r in fast] == pytest.approx([r["similarity"] for r in slow], abs=1e-5)
        assert all(np.array_equal(a["vector"], b["vector"]) for a, b in zip(fast, slow))


@pytest.mark.parametrize("where", WHERES)
def test_bm25_matches_lancedb(index, where):
    for text in ("apple invoice", "the audits of the payroll", "refund refund customer", "zebra"):
        fast, slow = both(index, "text_search", "A", text, k=15, where=where, columns=["episode_id"])
        assert sorted(r["bm25"] for r in fast) == pytest.approx(sorted(r["bm25"] for r in slow), rel=1e-3)
        # the same rows, but for ties at the cut
        cut = min((r["bm25"] for r in slow), default=0.0) * 1.001
        assert {r["episode_id"] for r in fast if r["bm25"] > cut} == {r["episode_id"] for r in slow if r["bm25"] > cut}
        slow_scores = {r["episode_id"]: r["bm25"] for r in slow}
        assert all(r["bm25"] == pytest.approx(slow_scores[r["episode_id"]], rel=1e-3)
                   for r in fast if r["episode_id"] in slow_scores)


def test_terms_are_lancedbs():
    assert terms("What did Caroline do on 8 May? The Cats and Dogs, café") == \
        ["carolin", "8", "may", "cat", "dog", "cafe"]


def test_every_write_is_seen(index, tmp_path):
    other = EpisodeIndex(tmp_path / "lancedb", D, HASH.name, WorldGraphConfig())  # a second writer
    probe = "zebra quokka"
    assert index.text_search("A", probe, columns=["episode_id"]) == []
    copy = index._small._tables[table_name("A")]
    with other.adding("A") as add:  # an append: folded into the copy, not read again
        add([row(1000, probe)])
    hits = index.text_search("A", probe, columns=["episode_id"])
    assert [r["episode_id"] for r in hits] == ["e1000"]
    assert index._small._tables[table_name("A")].rows == copy.rows + 1
    assert index.vector_search("A", HASH.embed([probe])[0], k=1, columns=["episode_id"])[0]["episode_id"] == "e1000"
    other.upsert([row(1000, "plain apple")])  # a merge-insert rewrites the row
    assert index.text_search("A", probe, columns=["episode_id"]) == []
    assert "e1000" in [r["episode_id"] for r in index.text_search("A", "plain apple", columns=["episode_id"])]
    other.delete(["e1000", "e5"])
    found = {r["episode_id"] for r in index.vector_search("A", HASH.embed(["plain apple"])[0], k=400,
                                                          columns=["episode_id"])}
    assert len(found) == 299 and "e1000" not in found and "e5" not in found
    other.optimize("A")  # compaction: new fragments, same rows
    assert {r["episode_id"] for r in index.vector_search("A", HASH.embed(["x"])[0], k=400,
                                                         columns=["episode_id"])} == found
    other.close()


def test_another_process_write_is_seen(index, tmp_path):
    index.text_search("A", "apple", columns=["episode_id"])  # the copy exists
    code = (
        "import sys; from worldgraph.config import WorldGraphConfig; "
        "from worldgraph.memory.embeddings import HashingEmbedder; "
        "from worldgraph.memory.index.episode_index import EpisodeIndex; "
        f"h = HashingEmbedder({D}); idx = EpisodeIndex(sys.argv[1], {D}, h.name, WorldGraphConfig()); "
        "idx.upsert([dict(episode_id='far', tenant_id='A', text='okapi gazelle', vector=h.embed(['okapi gazelle'])[0])]); "
        "idx.close()"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "lancedb")], check=True, cwd=REPO)
    assert [r["episode_id"] for r in index.text_search("A", "okapi", columns=["episode_id"])] == ["far"]


def test_big_tables_and_full_rows_use_lancedb(index):
    index._small.max_rows = 100  # the table has 300 rows
    index._small.drop()
    assert index.vector_search("A", HASH.embed(["apple"])[0], k=5, columns=["episode_id"])
    assert not index._small._tables
    index._small.max_rows = 5_000
    full = index.vector_search("A", HASH.embed(["apple"])[0], k=5)  # every column: LanceDB
    assert not index._small._tables and "canvas_action_ids" in full[0]


def test_a_table_with_an_ann_index_is_searched_in_process_exactly(tmp_path):
    # a table under the mirror's threshold is searched in process even once its ANN index is
    # built: the exact top k (LanceDB's IVF search of the same table is approximate)
    cfg = WorldGraphConfig(ann_index_min_rows=200, ann_partition_rows=50, compact_every_writes=1000)
    idx = EpisodeIndex(tmp_path / "lancedb", D, HASH.name, cfg)
    rows = corpus(400, seed=9)
    idx.upsert(rows)
    assert idx.wait_for_maintenance(300) and idx.has_vector_index("A")
    stored = np.stack([np.asarray(r["vector"], np.float16).astype(np.float32) for r in rows])  # as the table keeps them
    unit = stored / np.linalg.norm(stored, axis=1, keepdims=True)
    for text in ("apple invoice", "deploy rollback service", "payroll tax"):
        q = HASH.embed([text])[0]
        found = idx.vector_search("A", q, k=10, columns=["episode_id"])
        assert idx.in_process("A"), "a table with an ANN index went to LanceDB"
        sims = unit @ (q / np.linalg.norm(q))
        assert [r["similarity"] for r in found] == pytest.approx(sorted(sims, reverse=True)[:10], abs=1e-5)
        assert idx.text_search("A", text, k=5, columns=["episode_id"])
    idx.close()


def test_in_process_limit_stays_below_the_mirror_and_the_copies_are_bounded_in_rows(tmp_path):
    assert rows_limit(0) == SMALL_TABLE_ROWS == 20_000  # no mirror
    assert rows_limit(20_000) == 19_999 and rows_limit(1) == 0  # a mirrored table is never copied too
    idx = EpisodeIndex(tmp_path / "lancedb", D, HASH.name, WorldGraphConfig())
    assert idx._small.max_rows == 19_999
    idx._small.max_cached_rows = 500
    for tenant, n in (("a", 300), ("b", 150), ("c", 200)):
        idx.upsert([{**r, "tenant_id": tenant} for r in corpus(n)])
        assert idx.vector_search(tenant, HASH.embed(["apple"])[0], k=3, columns=["episode_id"])
    # 300 + 150 + 200 rows > 500: the least recently searched copy went first
    assert list(idx._small._tables) == [table_name("b"), table_name("c")]
    idx.vector_search("a", HASH.embed(["apple"])[0], k=3, columns=["episode_id"])  # read again
    assert list(idx._small._tables) == [table_name("a")] or list(idx._small._tables) == [table_name("c"), table_name("a")]
    idx.close()
