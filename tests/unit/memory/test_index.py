"""The LanceDB episode index, against a real LanceDB in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from worldgraph.config import WorldGraphConfig
from worldgraph.errors import EmbeddingDimensionError, InvalidInputError
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.index.episode_index import META_FILE, EpisodeIndex, build_filter, metadata_filter, sql_literal, table_name

REPO = Path(__file__).resolve().parents[3]
D = 384
HASH = HashingEmbedder(D)
COLUMNS = {"episode_id", "tenant_id", "agent_id", "agent_role", "task_type", "outcome", "success",
           "confidence", "timestamp", "canvas_id", "canvas_action_ids", "text", "vector", "metadata_terms"}


def row(eid: str, text: str, tenant: str = "A", **kw) -> dict:
    base = dict(episode_id=eid, tenant_id=tenant, agent_id="agent-1", agent_role="Finance",
                task_type="reconcile", outcome="success", success=True, confidence=0.8,
                timestamp=1_700_000_000.0, canvas_id=None, canvas_action_ids=[], text=text,
                vector=HASH.embed([text])[0])
    base.update(kw)
    return base


def ids(results: list[dict]) -> list[str]:
    return [r["episode_id"] for r in results]


@pytest.fixture
def index(tmp_path) -> EpisodeIndex:
    idx = EpisodeIndex(tmp_path / "lancedb", D, HASH.name, WorldGraphConfig())
    yield idx
    idx.close()


def q(text: str) -> np.ndarray:
    return HASH.embed([text])[0]


# --- writes ---------------------------------------------------------------------------------------


def test_upsert_insert_update_delete_count_clear(index):
    assert index.count() == 0
    index.upsert([row("e1", "reconcile inventory"), row("e2", "book a flight"),
                  row("e3", "deploy the service", tenant="B")])
    assert index.count() == 3 and index.count("A") == 2 and index.count("B") == 1 and index.count("C") == 0

    index.upsert([row("e1", "reconcile inventory in the warehouse", outcome="failure", success=False,
                      canvas_id="canvas-1", canvas_action_ids=["act-1", "act-2"], confidence=0.25)])
    assert index.count() == 3  # updated in place, not duplicated
    (got,) = index.get("A", ["e1"])
    assert set(got) == COLUMNS
    assert got["text"] == "reconcile inventory in the warehouse"
    assert got["outcome"] == "failure" and got["success"] is False
    assert got["canvas_id"] == "canvas-1" and got["canvas_action_ids"] == ["act-1", "act-2"]
    assert got["confidence"] == pytest.approx(0.25)
    assert isinstance(got["vector"], np.ndarray) and got["vector"].shape == (D,)
    # stored at half precision (schema.VECTOR_VALUE_TYPE), read back as float32
    assert np.array_equal(got["vector"], q("reconcile inventory in the warehouse").astype(np.float16).astype(np.float32))
    assert index.get("B", ["e1"]) == []  # another tenant's id is not visible

    index.delete(["e2", "does-not-exist"])
    assert index.count("A") == 1
    index.clear()
    assert index.count() == 0


def test_duplicate_ids_in_one_batch_last_wins(index):
    index.upsert([row("e1", "first version"), row("e2", "other"), row("e1", "second version")])
    assert index.count() == 2
    assert index.get("A", ["e1"])[0]["text"] == "second version"


def test_bulk_upsert_and_defaults(index):
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3000, D)).astype(np.float32)
    index.upsert([{"episode_id": f"e{i}", "tenant_id": "A", "vector": vecs[i]} for i in range(2000)])
    index.upsert([{"episode_id": f"e{i}", "tenant_id": "A", "vector": vecs[i], "text": "x"}
                  for i in range(1000, 3000)])
    assert index.count("A") == 3000
    got = index.get("A", ["e5"])[0]
    assert got["canvas_id"] is None and got["canvas_action_ids"] == [] and got["success"] is False
    assert got["text"] == "" and got["timestamp"] > 1.6e9


@pytest.mark.parametrize("bad,field", [
    ({"vector": np.ones(D - 1)}, "rows[0].vector"),
    ({"vector": np.full(D, np.nan)}, "rows[0].vector"),
])
def test_upsert_validates_vectors(index, bad, field):
    with pytest.raises(EmbeddingDimensionError) as info:
        index.upsert([{**row("e1", "x"), **bad}])
    assert info.value.field == field
    assert index.count() == 0


@pytest.mark.parametrize("bad,field", [
    (np.full(D, np.inf), "rows[2].vector"),  # the batch converts as a whole: the row is found in the matrix
    ([0.5] * (D + 1), "rows[2].vector"),  # it does not: row by row
    (["x"] * D, "rows[2].vector"),
    (np.ones((1, D)), None),  # one row of a 2-D array is a vector too
])
def test_upsert_names_the_bad_vector_of_a_batch(index, bad, field):
    """The vectors of a batch are converted and checked at once; an error still names its row."""
    rows = [row("e1", "x"), row("e2", "y", vector=list(HASH.embed(["y"])[0])), row("e3", "z", vector=bad), row("e4", "w")]
    if field is None:
        index.upsert(rows)
        assert index.count() == 4
        return
    with pytest.raises(EmbeddingDimensionError) as info:
        index.upsert(rows)
    assert info.value.field == field
    assert index.count() == 0


@pytest.mark.parametrize("bad,field", [
    ({"episode_id": ""}, "rows[0].episode_id"),
    ({"tenant_id": None}, "rows[0].tenant_id"),
    ({"timestamp": "yesterday"}, "rows[0].timestamp"),
])
def test_upsert_validates_keys(index, bad, field):
    with pytest.raises(InvalidInputError) as info:
        index.upsert([{**row("e1", "x"), **bad}])
    assert info.value.field == field


# --- vector search --------------------------------------------------------------------------------


def test_vector_search_orders_by_cosine_similarity(index):
    texts = ["reconcile inventory discrepancies", "inventory count in the warehouse",
             "book a flight to paris", "deploy the billing service", "reconcile the bank statement"]
    index.upsert([row(f"e{i}", t) for i, t in enumerate(texts)])
    query = q("reconcile inventory")
    res = index.vector_search("A", query, k=5)
    assert len(res) == 5
    sims = [r["similarity"] for r in res]
    assert sims == sorted(sims, reverse=True)
    expected = sorted(range(5), key=lambda i: -float(HASH.embed([texts[i]])[0] @ query))
    assert ids(res) == [f"e{i}" for i in expected]
    assert res[0]["episode_id"] == "e0"
    assert res[0]["similarity"] == pytest.approx(float(q(texts[0]) @ query), abs=1e-5)
    assert set(res[0]) == COLUMNS | {"similarity"}
    assert isinstance(res[0]["vector"], np.ndarray)
    assert len(index.vector_search("A", query, k=2)) == 2
    # only some columns: the same order and similarities, episode_id and vector always there
    slim = index.vector_search("A", query, k=5, columns=["episode_id"])
    assert ids(slim) == ids(res) and set(slim[0]) == {"episode_id", "vector", "similarity"}
    assert [r["similarity"] for r in slim] == pytest.approx(sims)
    assert set(index.vector_search("A", query, k=1, columns=["text"])[0]) == {"episode_id", "text", "vector",
                                                                             "similarity"}
    with pytest.raises(InvalidInputError) as info:
        index.vector_search("A", query, columns=["nope"])
    assert info.value.field == "columns"


def test_tenant_isolation(index):
    # tenant B holds the exact query text; a search of tenant A must still never see it
    index.upsert([row("a1", "book a flight to paris", tenant="A"),
                  row("b1", "reconcile inventory discrepancies", tenant="B"),
                  row("b2", "reconcile inventory", tenant="B")])
    res = index.vector_search("A", q("reconcile inventory discrepancies"), k=100)
    assert ids(res) == ["a1"]
    assert all(r["tenant_id"] == "A" for r in res)
    index.ensure_indexes()
    assert ids(index.text_search("A", "reconcile inventory")) == []
    assert set(ids(index.text_search("B", "reconcile inventory"))) == {"b1", "b2"}
    assert index.vector_search("C", q("x")) == []


def test_hostile_strings_are_literals(index):
    evil = "A' OR '1'='1"
    index.upsert([row("a1", "hello", tenant="A"), row("e1", "hello", tenant=evil, agent_role="x'); --")])
    assert ids(index.vector_search("A", q("hello"))) == ["a1"]
    assert ids(index.vector_search(evil, q("hello"))) == ["e1"]
    assert ids(index.vector_search(evil, q("hello"), where={"agent_role": "x'); --"})) == ["e1"]
    assert index.count("A' OR tenant_id = 'B") == 0
    index.delete(["a1' OR '1'='1"])
    assert index.count() == 2
    assert sql_literal("it's") == "'it''s'"
    with pytest.raises(InvalidInputError):
        sql_literal("nul\x00byte")


@pytest.fixture
def filtered(index):
    t0 = 1_700_000_000.0
    index.upsert([
        row("f1", "invoice reconciliation", agent_role="Finance", canvas_id="c1", timestamp=t0, success=True),
        row("f2", "invoice reconciliation", agent_role="Finance", canvas_id="c2", timestamp=t0 + 100, success=False),
        row("f3", "invoice reconciliation", agent_role="Ops", canvas_id="c1", timestamp=t0 + 200, success=True),
        row("f4", "invoice reconciliation", agent_role="Ops", canvas_id=None, timestamp=t0 + 300, success=False),
        row("x1", "invoice reconciliation", tenant="B", agent_role="Finance", canvas_id="c1", timestamp=t0),
    ])
    return index, t0


@pytest.mark.parametrize("where,expected", [
    (None, {"f1", "f2", "f3", "f4"}),
    ({}, {"f1", "f2", "f3", "f4"}),
    ({"agent_role": "Finance"}, {"f1", "f2"}),
    ({"agent_role": "Nobody"}, set()),
    ({"canvas_ids": ["c1"]}, {"f1", "f3"}),
    ({"canvas_ids": ["c1", "c2"]}, {"f1", "f2", "f3"}),
    ({"canvas_ids": []}, {"f1", "f2", "f3", "f4"}),  # empty list: no canvas filter
    ({"start": 100}, {"f2", "f3", "f4"}),
    ({"end": 200}, {"f1", "f2", "f3"}),
    ({"start": 100, "end": 200}, {"f2", "f3"}),
    ({"success_only": True}, {"f1", "f3"}),
    ({"success_only": False}, {"f1", "f2", "f3", "f4"}),
    ({"agent_role": "Ops", "success_only": True, "canvas_ids": ["c1"]}, {"f3"}),
])
def test_filters(filtered, where, expected):
    index, t0 = filtered
    if where:
        where = {k: (t0 + v if k in ("start", "end") else v) for k, v in where.items()}
    assert set(ids(index.vector_search("A", q("invoice reconciliation"), k=10, where=where))) == expected
    index.ensure_indexes()  # the same filters on indexed columns and through BM25
    assert set(ids(index.vector_search("A", q("invoice reconciliation"), k=10, where=where))) == expected
    assert set(ids(index.text_search("A", "invoice", k=10, where=where))) == expected


def test_metadata_filter_has_no_tenant_part():
    assert metadata_filter(None) is None and metadata_filter({}) is None
    assert metadata_filter({"agent_role": "x'y"}) == "(agent_role = 'x''y')"
    assert build_filter("A", {"agent_role": "R"}) == "(tenant_id = 'A') AND (agent_role = 'R')"


def test_filter_accepts_datetimes_and_rejects_unknown_keys(filtered):
    index, t0 = filtered
    start = datetime.fromtimestamp(t0 + 250, tz=timezone.utc)
    assert ids(index.vector_search("A", q("invoice"), where={"start": start})) == ["f4"]
    with pytest.raises(InvalidInputError) as info:
        index.vector_search("A", q("invoice"), where={"agent": "Finance"})
    assert info.value.field == "where"
    with pytest.raises(InvalidInputError):
        build_filter("A", {"start": float("nan")})
    with pytest.raises(InvalidInputError):
        build_filter("", None)
    with pytest.raises(InvalidInputError):
        build_filter("A", {"canvas_ids": [1]})


def test_vector_search_validates_query(index):
    index.upsert([row("e1", "x")])
    with pytest.raises(EmbeddingDimensionError) as info:
        index.vector_search("A", np.ones(D + 1))
    assert info.value.field == "vector"
    with pytest.raises(EmbeddingDimensionError):
        index.vector_search("A", np.zeros(D))
    with pytest.raises(InvalidInputError):
        index.vector_search("A", q("x"), k=0)


# --- full text -------------------------------------------------------------------------------------


def test_text_search_bm25(index):
    assert index.text_search("A", "inventory") == []  # no table rows, no FTS index yet: empty, no error
    index.upsert([row("e1", "Reconciled the inventory discrepancies in warehouse 7"),
                  row("e2", "Booked a flight to Paris"),
                  row("e3", "inventory inventory inventory audit"),
                  row("e4", "inventory in Berlin", tenant="B")])
    res = index.text_search("A", "inventory discrepancy")
    assert set(ids(res)) == {"e1", "e3"}
    assert ids(res)[0] == "e1"  # matches both terms (stemmed: discrepancies ~ discrepancy)
    assert all(r["bm25"] > 0 for r in res) and [r["bm25"] for r in res] == sorted(
        (r["bm25"] for r in res), reverse=True)
    assert isinstance(res[0]["vector"], np.ndarray) and res[0]["vector"].shape == (D,)
    assert set(res[0]) == COLUMNS | {"bm25"}
    slim = index.text_search("A", "inventory discrepancy", columns=["episode_id"])
    assert ids(slim) == ids(res) and set(slim[0]) == {"episode_id", "vector", "bm25"}
    # rows written after the FTS index was built are searchable too
    index.upsert([row("e5", "Paris inventory handover")])
    assert "e5" in ids(index.text_search("A", "handover"))
    assert len(index.text_search("A", "inventory", k=1)) == 1


@pytest.mark.parametrize("query", ["", "   ", "!!!", "the and of", "???  ***"])
def test_text_search_without_searchable_terms(index, query):
    index.upsert([row("e1", "the inventory of the shop")])
    assert index.text_search("A", query) == []


def test_text_search_query_syntax_is_plain_text(index):
    index.upsert([row("e1", "reconcile inventory"), row("e2", "tenant report")])
    for query in ['inventory AND OR "x', "tenant_id:'B'", "inventory' OR 1=1 --", "(inventory"]:
        assert all(r["tenant_id"] == "A" for r in index.text_search("A", query))
    assert ids(index.text_search("A", 'inventory AND OR "x')) == ["e1"]


# --- opening, labels, rebuild ------------------------------------------------------------------------


def test_meta_file_and_reopen(tmp_path):
    path = tmp_path / "db"
    idx = EpisodeIndex(path, D, HASH.name, WorldGraphConfig())
    idx.upsert([row("e1", "hello")])
    meta = json.loads((path / META_FILE).read_text())
    assert meta["embedder"] == HASH.name and meta["dimensions"] == D
    again = EpisodeIndex(path, D, HASH.name, WorldGraphConfig())
    assert again.count() == 1


def test_dimension_mismatch_needs_reindex(tmp_path):
    path = tmp_path / "db"
    EpisodeIndex(path, D, HASH.name, WorldGraphConfig()).upsert([row("e1", "hello")])
    with pytest.raises(InvalidInputError) as info:
        EpisodeIndex(path, 1536, "openai:text-embedding-3-small:1536", WorldGraphConfig())
    assert info.value.field == "embedder"
    assert "worldgraph reindex" in str(info.value) and "384" in str(info.value)


def test_embedder_mismatch_needs_reindex_and_rebuild_recreates(tmp_path):
    path = tmp_path / "db"
    EpisodeIndex(path, D, HASH.name, WorldGraphConfig()).upsert([row("e1", "hello")])
    with pytest.raises(InvalidInputError) as info:
        EpisodeIndex(path, D, "local:all-MiniLM-L6-v2", WorldGraphConfig())
    assert "worldgraph reindex" in str(info.value) and HASH.name in str(info.value)
    rebuilt = EpisodeIndex(path, D, "local:all-MiniLM-L6-v2", WorldGraphConfig(), rebuild=True)
    assert rebuilt.count() == 0
    assert json.loads((path / META_FILE).read_text())["embedder"] == "local:all-MiniLM-L6-v2"
    # a different dimension works after rebuild as well
    small = EpisodeIndex(path, 8, "tiny", WorldGraphConfig(), rebuild=True)
    small.upsert([{"episode_id": "e1", "tenant_id": "A", "vector": np.arange(1, 9, dtype=np.float32)}])
    assert ids(small.vector_search("A", np.arange(1, 9))) == ["e1"]
    assert EpisodeIndex(path, 8, "tiny", WorldGraphConfig()).count() == 1


def test_bad_constructor_arguments(tmp_path):
    with pytest.raises(InvalidInputError):
        EpisodeIndex(tmp_path / "db", 0, "x", WorldGraphConfig())
    with pytest.raises(InvalidInputError):
        EpisodeIndex(tmp_path / "db", D, "", WorldGraphConfig())


# --- indexes and maintenance ---------------------------------------------------------------------------


def test_scalar_and_fts_indexes_built_on_first_write(index):
    index.upsert([row("e1", "hello world")])
    names = {ix.name for ix in index.table_for("A").list_indices()}
    assert {"tenant_id_idx", "agent_role_idx", "canvas_id_idx", "timestamp_idx", "success_idx",
            "episode_id_idx", "text_idx"} <= names
    assert "vector_idx" not in names  # far below ann_index_min_rows
    assert index.ensure_indexes() == []  # idempotent
    kinds = {ix.name: ix.index_type for ix in index.table_for("A").list_indices()}
    assert kinds["agent_role_idx"] == kinds["agent_id_idx"] == kinds["success_idx"] == "Bitmap"
    assert kinds["timestamp_idx"] == kinds["episode_id_idx"] == "BTree"


def test_scalar_index_of_an_older_kind_is_rebuilt_in_place(index):
    """A table whose role and agent indexes are BTREEs (as earlier versions built them) gets
    BITMAPs from the next maintenance, and filtered searches answer the same before and after."""
    from lancedb.index import BTree

    index.upsert([row("e1", "alpha report", agent_role="Finance", agent_id="f-1"),
                  row("e2", "alpha summary", agent_role="Sales", agent_id="s-1")])
    table = index.table_for("A")
    for column in ("agent_role", "agent_id"):
        table.create_index(column, config=BTree(), name=f"{column}_idx", replace=True)
    old = EpisodeIndex(index.path, D, index.embedder_name, index.config)  # a process opening the old table
    kinds = {ix.name: ix.index_type for ix in old.table_for("A").list_indices()}
    assert kinds["agent_role_idx"] == kinds["agent_id_idx"] == "BTree"
    before = ids(old.vector_search("A", q("alpha"), k=5, where={"agent_role": "Sales", "agent_id": "s-1"}))
    assert before == ["e2"]
    old.optimize()  # what the background maintenance runs after writes
    kinds = {ix.name: ix.index_type for ix in old.table_for("A").list_indices()}
    assert kinds["agent_role_idx"] == kinds["agent_id_idx"] == "Bitmap"
    assert ids(old.vector_search("A", q("alpha"), k=5, where={"agent_role": "Sales", "agent_id": "s-1"})) == before
    assert ids(old.text_search("A", "alpha", k=5, where={"agent_role": "Finance"})) == ["e1"]


def test_ann_index_built_lazily_and_search_stays_exact(tmp_path):
    cfg = WorldGraphConfig(ann_index_min_rows=3000, compact_every_writes=1000)
    idx = EpisodeIndex(tmp_path / "db", 64, "synthetic", cfg)
    idx._small.max_rows = 0  # LanceDB's ANN search, not the in-process copy of a small table
    rng = np.random.default_rng(42)
    centers = rng.normal(size=(30, 64)).astype(np.float32)
    vecs = centers[rng.integers(0, 30, 4000)] + 0.5 * rng.normal(size=(4000, 64)).astype(np.float32)
    tenants = np.where(np.arange(4000) % 4 == 0, "small", "big")
    rows = [{"episode_id": f"e{i}", "tenant_id": str(tenants[i]), "agent_role": "R", "vector": vecs[i],
             "text": f"episode {i}"} for i in range(4000)]
    for start in range(0, 2000, 500):
        idx.upsert(rows[start:start + 500])
    assert idx.wait_for_maintenance(120)
    assert not idx.has_vector_index()  # 2000 < 3000
    for start in range(2000, 4000, 500):
        idx.upsert(rows[start:start + 500])
    assert idx.wait_for_maintenance(300)
    assert idx.has_vector_index()
    # per tenant: "big" reached 3000 rows, "small" (1000) is still an exact scan
    assert idx.has_vector_index("big") and not idx.has_vector_index("small")

    unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    recalls = []
    for _qi in range(10):
        query = vecs[rng.integers(0, 4000)] + 0.2 * rng.normal(size=64).astype(np.float32)
        for tenant in ("small", "big"):
            res = idx.vector_search(tenant, query, k=50)
            assert len(res) == 50 and all(r["tenant_id"] == tenant for r in res)
            sims = [r["similarity"] for r in res]
            assert sims == sorted(sims, reverse=True)
            # similarity is the exact cosine of the stored vector
            for r in res[:5]:
                i = int(r["episode_id"][1:])
                assert r["similarity"] == pytest.approx(float(unit[i] @ query / np.linalg.norm(query)), abs=1e-4)
            mask = tenants == tenant
            truth = np.flatnonzero(mask)[np.argsort(-(unit[mask] @ query))[:50]]
            recalls.append(len({f"e{i}" for i in truth} & set(ids(res))) / 50)
    assert np.mean(recalls) >= 0.9, recalls

    # rows written after the index was built are found too (flat search over unindexed rows)
    idx.upsert([{"episode_id": "new", "tenant_id": "small", "vector": -vecs[0]}])
    assert ids(idx.vector_search("small", -vecs[0], k=1)) == ["new"]
    idx.close()


def test_optimize_runs_every_n_writes(tmp_path):
    # compact_target_rows=4: the background compacts once the small fragments add up to 4 rows
    cfg = WorldGraphConfig(compact_every_writes=5, compact_target_rows=4)
    idx = EpisodeIndex(tmp_path / "db", D, HASH.name, cfg)
    for i in range(4):
        idx.upsert([row(f"e{i}", f"text {i}")])
    assert idx.wait_for_maintenance(60)
    table = idx.table_for("A")
    before = table.stats()["fragment_stats"]["num_fragments"]
    assert before >= 4
    idx.upsert([row("e4", "text 4")])  # 5th write: compaction in the background
    assert idx.wait_for_maintenance(120)
    table.checkout_latest()
    assert table.stats()["fragment_stats"]["num_fragments"] < before
    assert idx.count() == 5
    assert ids(idx.text_search("A", "text", k=10)) and len(idx.vector_search("A", q("text 3"), k=10)) == 5


_WRITER = """
import sys, numpy as np
from worldgraph.config import WorldGraphConfig
from worldgraph.memory.index.episode_index import EpisodeIndex
path, prefix = sys.argv[1], sys.argv[2]
idx = EpisodeIndex(path, 16, "proc", WorldGraphConfig(compact_every_writes=7))
rng = np.random.default_rng(abs(hash(prefix)) % 1000)
for b in range(15):
    idx.upsert([{"episode_id": f"{prefix}-{b}-{i}", "tenant_id": prefix, "vector": rng.normal(size=16),
                 "text": f"{prefix} batch {b}"} for i in range(20)])
    idx.upsert([{"episode_id": "shared", "tenant_id": "shared", "vector": rng.normal(size=16), "text": prefix}])
idx.close()
"""


def test_concurrent_writers_in_separate_processes(tmp_path):
    path = tmp_path / "db"
    EpisodeIndex(path, 16, "proc", WorldGraphConfig())  # create the table first
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), p], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in ("p1", "p2", "p3")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    idx = EpisodeIndex(path, 16, "proc", WorldGraphConfig())
    for p in ("p1", "p2", "p3"):
        assert idx.count(p) == 300
    assert idx.count("shared") == 1  # the same id upserted by all three: still one row


# --- one table per tenant --------------------------------------------------------------------------------


def test_table_names_are_distinct_and_safe():
    assert table_name("bench") == "ep-bench"
    names = {table_name(t) for t in ("a", "A", "a.b", "a-b", "a_b", "A' OR '1'='1", "ü", "x" * 500, "eph-61")}
    assert len(names) == 9
    assert all(len(n) < 200 and all(c.isalnum() or c in "_.-" for c in n) for n in names)
    with pytest.raises(InvalidInputError):
        table_name("")


def test_two_tenants_two_tables_never_see_each_other(index):
    assert index.tenant_tables() == [] and index.table_for("A") is None
    index.upsert([row("a1", "reconcile inventory", tenant="A"), row("b1", "reconcile inventory", tenant="B"),
                  row("b2", "book a flight", tenant="B")])
    assert index.tenant_tables() == sorted([table_name("A"), table_name("B")])
    assert index.table_for("A").count_rows() == 1 and index.table_for("B").count_rows() == 2
    assert ids(index.vector_search("A", q("reconcile inventory"), k=10)) == ["a1"]
    assert set(ids(index.vector_search("B", q("reconcile inventory"), k=10))) == {"b1", "b2"}
    assert ids(index.text_search("A", "reconcile")) == ["a1"]
    assert ids(index.text_search("B", "reconcile")) == ["b1"]
    assert index.get("A", ["a1", "b1"])[0]["episode_id"] == "a1" and len(index.get("A", ["a1", "b1"])) == 1
    # another process sees both tenants' tables
    other = EpisodeIndex(index.path, D, HASH.name, WorldGraphConfig())
    assert other.count() == 3 and other.count("A") == 1 and other.count("B") == 2


def test_delete_tenant_removes_only_that_tenant(index):
    index.upsert([row("a1", "hello", tenant="A"), row("a2", "world", tenant="A"), row("b1", "hello", tenant="B")])
    index.delete_tenant("A")
    assert index.count("A") == 0 and index.count("B") == 1 and index.count() == 1
    assert index.vector_search("A", q("hello")) == [] and ids(index.vector_search("B", q("hello"))) == ["b1"]
    index.delete_tenant("nobody")  # no table: nothing to do
    index.upsert([row("a3", "again", tenant="A")])  # the tenant's table is reused
    assert index.count("A") == 1
    index.delete(["b1", "a3"])  # ids of several tenants at once
    assert index.count() == 0


def test_ensure_indexes_folds_in_unindexed_rows(tmp_path):
    cfg = WorldGraphConfig(ann_index_min_rows=500, compact_every_writes=1000, optimize_every_rows=100_000)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(900, 16)).astype(np.float32)
    idx.upsert([{"episode_id": f"e{i}", "tenant_id": "A", "vector": vecs[i], "text": f"row {i}"}
                for i in range(600)])
    assert idx.wait_for_maintenance(120)
    assert idx.ensure_indexes() == [] or idx.has_vector_index("A")
    assert idx.has_vector_index("A")
    table = idx.table_for("A")
    idx.upsert([{"episode_id": f"e{i}", "tenant_id": "A", "vector": vecs[i], "text": f"row {i}"}
                for i in range(600, 900)])
    assert idx.wait_for_maintenance(120)
    table.checkout_latest()
    assert table.index_stats("vector_idx").num_unindexed_rows == 300  # no optimize ran
    idx.ensure_indexes()
    table.checkout_latest()
    for name in ("vector_idx", "text_idx", "episode_id_idx"):
        stats = table.index_stats(name)
        assert stats.num_unindexed_rows == 0 and stats.num_indexed_rows == 900, name
    assert ids(idx.vector_search("A", vecs[850], k=1)) == ["e850"]


def test_optimize_every_rows_starts_background_optimize(tmp_path):
    cfg = WorldGraphConfig(ann_index_min_rows=100_000, compact_every_writes=1000, optimize_every_rows=50)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(4)
    for b in range(2):
        idx.upsert([{"episode_id": f"e{b}-{i}", "tenant_id": "A", "vector": rng.normal(size=16)}
                    for i in range(20)])
    assert idx.wait_for_maintenance(60)
    table = idx.table_for("A")
    # the indexes were built on the first write; 40 rows written < 50: no optimize yet
    assert table.index_stats("episode_id_idx").num_unindexed_rows == 20
    idx.upsert([{"episode_id": f"e2-{i}", "tenant_id": "A", "vector": rng.normal(size=16)} for i in range(20)])
    assert idx.wait_for_maintenance(120)  # 60 rows since the last optimize (none) >= 50: optimize started
    table.checkout_latest()
    assert table.index_stats("episode_id_idx").num_unindexed_rows == 0
    assert idx.count("A") == 60


def test_old_single_table_layout_is_migrated(tmp_path):
    import lancedb

    from worldgraph.memory.index.episode_index import TABLE_NAME, episode_schema

    path = tmp_path / "db"
    legacy = lancedb.connect(str(path)).create_table(TABLE_NAME, schema=episode_schema(D))
    fresh = EpisodeIndex(tmp_path / "scratch", D, HASH.name, WorldGraphConfig())
    old_rows = [row("a1", "reconcile inventory", tenant="A"), row("a2", "book a flight", tenant="A"),
                row("b1", "reconcile inventory", tenant="B")]
    legacy.add(fresh._to_arrow(old_rows))
    (path / META_FILE).write_text(json.dumps({"format": 1, "table": TABLE_NAME, "embedder": HASH.name,
                                              "dimensions": D}))
    with pytest.raises(InvalidInputError):  # the embedder check still applies to the old table
        EpisodeIndex(path, D, "other", WorldGraphConfig())
    idx = EpisodeIndex(path, D, HASH.name, WorldGraphConfig())
    assert idx.tenant_tables() == sorted([table_name("A"), table_name("B")])
    assert idx.count("A") == 2 and idx.count("B") == 1
    assert ids(idx.vector_search("B", q("reconcile inventory"))) == ["b1"]
    assert ids(idx.text_search("A", "flight")) == ["a2"]
    assert json.loads((path / META_FILE).read_text())["format"] == 2
    assert EpisodeIndex(path, D, HASH.name, WorldGraphConfig()).count() == 3  # migrated once
    idx.close()


def test_table_of_float32_vectors_from_an_earlier_version_keeps_working(tmp_path):
    """New tables store float16 vectors; a table made by an earlier version keeps its float32
    column, and appends, merge-inserts and searches work on it (LanceDB casts writes to it)."""
    import pyarrow as pa

    from worldgraph.memory.index.schema import episode_schema

    path = tmp_path / "lancedb"
    idx = EpisodeIndex(path, D, HASH.name, WorldGraphConfig())
    old = pa.schema([f if f.name != "vector" else pa.field("vector", pa.list_(pa.float32(), D), nullable=False)
                     for f in episode_schema(D)])
    idx._db.create_table(table_name("A"), schema=old)
    idx.close()
    idx = EpisodeIndex(path, D, HASH.name, WorldGraphConfig())
    idx.upsert([row("e1", "alpha report"), row("e2", "beta summary")])
    idx.upsert([row("e1", "alpha report, revised")])  # a merge-insert into the old table
    with idx.adding("A") as add:
        add([row("e3", "gamma notes")])
    assert idx.table_for("A").schema.field("vector").type.value_type == pa.float32()
    assert idx.count("A") == 3
    for text, eid in (("alpha report, revised", "e1"), ("gamma notes", "e3")):
        hit = idx.vector_search("A", q(text), k=1)[0]
        assert hit["episode_id"] == eid and hit["similarity"] == pytest.approx(1.0, abs=1e-3)
    assert ids(idx.text_search("A", "revised", k=5)) == ["e1"]
    fresh = EpisodeIndex(tmp_path / "new", D, HASH.name, WorldGraphConfig())
    fresh.upsert([row("e1", "alpha report")])
    assert fresh.table_for("A").schema.field("vector").type.value_type == pa.float16()


def test_episode_rows_make_the_same_table_as_their_rows_one_by_one(index) -> None:
    """``EpisodeRows`` (the recording path's index rows) is converted column by column; the table
    must be the one the row-by-row path makes of ``index_row``'s dicts, for records of every shape
    (a canvas and its actions, metadata, a conversation turn, no role), and what the column path
    does not take (a repeated id, a value of another type) goes the row path's way."""
    from worldgraph.clock import utcnow
    from worldgraph.memory.record import EpisodeRows, build_episode, index_row, parse_canvas, parse_experience

    now = utcnow()
    raws = [
        ({"agent_id": "fin-1", "agent_role": "Finance", "task_type": "reconcile", "task_description": "Reconcile SKU-1",
          "outcome": "success", "metadata": {"team": "emea", "tags": ["q3", "audit"], "n": 3}}, None),
        ({"agent_id": "ops-2", "task_type": "deploy", "task_description": "Deploy the gateway", "outcome": "failure",
          "error_message": "timeout", "canvas_action_ids": ["a0"]},
         {"id": "canvas-7", "name": "Board", "actions": [{"id": "a1", "type": "click"}]}),
        ({"agent_id": "Caroline", "task_type": "conversation", "task_description": "I went to the support group",
          "input_summary": "Mel: how was your week?", "outcome": "success", "session_id": "chat-1",
          "timestamp": "2023-05-08T10:00:00Z"}, None),
    ]
    eps = [build_episode("A", parse_experience(r), parse_canvas(c), now=now)[0] for r, c in raws]
    vecs = HASH.embed([e["task_description"] for e in eps])
    rows = EpisodeRows(eps, vecs, 65_536)
    assert len(rows) == 3 and rows[1]["canvas_id"] == "canvas-7" and rows[-1]["episode_id"] == eps[2]["id"]
    by_rows = index._to_arrow([index_row(e, v, 65_536) for e, v in zip(eps, vecs)])
    assert index._columns_to_arrow(rows) is not None  # the column path was taken
    assert index._to_arrow(rows).equals(by_rows)
    assert index._to_arrow(rows).column("canvas_action_ids").to_pylist()[1] == ["a0", "a1"]

    twice = EpisodeRows([eps[0], eps[1], dict(eps[0], outcome="failure")], HASH.embed(["x", "y", "z"]))
    assert index._columns_to_arrow(twice) is None
    assert index._to_arrow(twice).equals(index._to_arrow(list(twice)))  # the last row of an id wins
    odd = EpisodeRows([dict(eps[0], agent_role=7)], HASH.embed(["x"]))
    assert index._columns_to_arrow(odd) is None
    assert index._to_arrow(odd).column("agent_role").to_pylist() == ["7"]
    with pytest.raises(EmbeddingDimensionError):
        index._to_arrow(EpisodeRows(eps[:1], np.full((1, D), np.nan, dtype=np.float32)))
