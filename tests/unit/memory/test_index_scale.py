"""The episode index at scale: ANN index choice and retraining, the append path for new episodes,
delta segments and their merging, search knobs. Against a real LanceDB in tmp_path."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lancedb.index import IvfHnswSq, IvfPq, IvfRq, IvfSq

from worldgraph import WorldModel
from worldgraph.config import WorldGraphConfig
from worldgraph.errors import InvalidInputError
from worldgraph.memory.embeddings import HashingEmbedder
from worldgraph.memory.index.episode_index import EpisodeIndex
from worldgraph.memory.index.policy import (
    NEVER_DUE,
    ann_due_rows,
    ann_mirrored,
    ann_partitions_for,
    ann_search_params,
    vector_index_config,
)


def rows(start: int, stop: int, rng: np.random.Generator, tenant: str = "A", dims: int = 16) -> list[dict[str, Any]]:
    return [{"episode_id": f"e{i}", "tenant_id": tenant, "vector": rng.normal(size=dims), "text": f"word{i % 7} row {i}"}
            for i in range(start, stop)]


def segments(idx: EpisodeIndex, tenant: str = "A") -> dict[str, int]:
    ds = idx.table_for(tenant).to_lance()
    return {d.name: len(d.segments) for d in ds.describe_indices()}


def episode_ids(idx: EpisodeIndex, tenant: str = "A") -> list[str]:
    return idx.table_for(tenant).to_lance().to_table(columns=["episode_id"]).column("episode_id").to_pylist()


# --- the ANN index: which, how many partitions, when to retrain ------------------------------


def test_index_config_follows_the_settings():
    cfg = WorldGraphConfig()
    assert (cfg.ann_index_type, cfg.ann_rq_bits, cfg.ann_partition_rows) == ("IVF_RQ", 4, 8192)
    ix = vector_index_config(cfg, 1_000_000, 384)
    assert isinstance(ix, IvfRq) and ix.num_partitions == 122 and ix.distance_type == "cosine" and ix.num_bits == 4
    assert vector_index_config(WorldGraphConfig(ann_rq_bits=1), 1_000_000, 384).num_bits == 1
    pq = vector_index_config(WorldGraphConfig(ann_index_type="IVF_PQ"), 100_000, 384)
    assert isinstance(pq, IvfPq) and pq.num_partitions == 12 and pq.num_sub_vectors == 48
    assert vector_index_config(WorldGraphConfig(ann_index_type="IVF_PQ"), 100_000, 20).num_sub_vectors is None
    assert isinstance(vector_index_config(WorldGraphConfig(ann_index_type="IVF_SQ"), 10, 8), IvfSq)
    hnsw = vector_index_config(WorldGraphConfig(ann_index_type="IVF_HNSW_SQ", ann_partition_rows=1 << 20), 10**6, 8)
    assert isinstance(hnsw, IvfHnswSq) and hnsw.num_partitions == 1
    assert ann_partitions_for(cfg, 5) == 1
    with pytest.raises(ValueError):
        WorldGraphConfig(ann_index_type="IVF_FLAT")


def test_search_params_rerank_at_least_the_candidates():
    cfg = WorldGraphConfig(ann_candidates=500, ann_nprobes=12)
    assert ann_search_params(cfg, 10) == {"minimum_nprobes": 12, "refine_factor": 50}
    assert ann_search_params(cfg, 100) == {"minimum_nprobes": 12, "refine_factor": 5}
    assert "refine_factor" not in ann_search_params(cfg, 1000)  # never fewer than k: vector_search re-scores them
    assert ann_search_params(cfg, 300)["refine_factor"] == 2  # rounded up: 600 >= 500
    hnsw = WorldGraphConfig(ann_index_type="IVF_HNSW_SQ", ann_candidates=150)
    assert ann_search_params(hnsw, 100) == {"minimum_nprobes": 20, "refine_factor": 2, "ef": 200}
    default = WorldGraphConfig()  # re-rank the top 100 (recall's pool) exactly; 10 candidates per hit for k=10
    assert "refine_factor" not in ann_search_params(default, 100) and ann_search_params(default, 10)["refine_factor"] == 10


def test_retraining_is_geometric():
    cfg = WorldGraphConfig(ann_index_min_rows=10_000, ann_partition_rows=8192, ann_retrain_growth=4)
    assert ann_due_rows(cfg, None) == 10_000
    assert ann_due_rows(cfg, 1) == 4 * 8192
    assert ann_due_rows(cfg, 4) == 16 * 8192
    assert ann_due_rows(cfg, 16) == 64 * 8192  # 524,288 rows: the last retrain before 1M
    assert ann_partitions_for(cfg, 64 * 8192) == 64


def test_a_mirrored_tables_retrain_waits_longer():
    cfg = WorldGraphConfig(ann_partition_rows=8192, ann_retrain_growth=2, ann_retrain_growth_mirrored=4,
                           mirror_min_rows=20_000)
    assert ann_due_rows(cfg, 64) == 128 * 8192  # 1,048,576: LanceDB's index alone serves the table
    assert ann_due_rows(cfg, 64, mirrored=True) == 256 * 8192  # the mirror serves it: 2,097,152
    assert ann_mirrored(cfg, True, 64) and not ann_mirrored(cfg, False, 64)  # an object store: no mirror
    assert not ann_mirrored(cfg, True, 2) and ann_mirrored(cfg, True, 3)  # trained on >= 20,000 rows
    assert not ann_mirrored(cfg.model_copy(update={"mirror_min_rows": 0}), True, 64)  # mirrors off


def test_a_mirrored_tables_retrain_stops_at_the_row_cap():
    """From ~33k rows a mirrored table's retrains fall at 131k, 524k, 2.1M and 8.4M rows; the
    default cap (4M) keeps the last, and every later one, out; an unmirrored table has no cap."""
    cfg = WorldGraphConfig(ann_partition_rows=8192, ann_retrain_growth_mirrored=4, mirror_min_rows=20_000)
    assert cfg.ann_retrain_max_rows_mirrored == 4_000_000
    seq, partitions = [], 4  # trained at ~33k rows
    while (due := ann_due_rows(cfg, partitions, mirrored=True)) != NEVER_DUE and len(seq) < 10:
        seq.append(due)
        partitions = ann_partitions_for(cfg, due)
    assert seq == [16 * 8192, 64 * 8192, 256 * 8192]  # 131,072, 524,288, 2,097,152: then never
    assert ann_due_rows(cfg, 256) == 512 * 8192  # LanceDB's index alone serves the table: no cap
    assert ann_due_rows(cfg.model_copy(update={"ann_retrain_max_rows_mirrored": 0}), 256, mirrored=True) == 1024 * 8192


def test_a_mirrored_table_is_retrained_at_its_own_growth(tmp_path: Path):
    """The ANN index of a table its mirror serves is retrained at ann_retrain_growth_mirrored,
    not ann_retrain_growth; the rows past its partitions are folded in meanwhile."""
    cfg = WorldGraphConfig(ann_index_type="IVF_RQ", ann_index_min_rows=400, ann_partition_rows=200,
                           ann_retrain_growth=2, ann_retrain_growth_mirrored=3, mirror_min_rows=400,
                           compact_every_writes=10**6, optimize_every_rows=10**6)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(2)
    vecs = rng.normal(size=(1300, 16)).astype(np.float32)
    batch = lambda a, b: [{"episode_id": f"e{i}", "tenant_id": "A", "vector": vecs[i]} for i in range(a, b)]  # noqa: E731
    try:
        idx.upsert(batch(0, 500))  # 500 >= 400: built with 2 partitions, on 400 rows a mirror serves
        assert idx.wait_for_maintenance(300) and idx.has_vector_index("A")
        part = idx._part("A")
        assert idx._ann_partitions(part) == 2
        idx.upsert(batch(500, 900))  # 900 >= 2 * 2 * 200 = 800, < 3 * 2 * 200 = 1200: no retrain
        assert idx.wait_for_maintenance(300) and idx._ann_partitions(part) == 2
        idx.optimize("A")  # the new rows are folded into the old partitions
        assert part.table.index_stats("vector_idx").num_unindexed_rows == 0
        idx.upsert(batch(900, 1300))  # 1300 >= 1200: retrained with 1300 // 200 = 6 partitions
        assert idx.wait_for_maintenance(300) and idx._ann_partitions(part) == 6
    finally:
        idx.close()


def test_a_mirrored_table_past_the_row_cap_keeps_its_index(tmp_path: Path):
    """A mirrored table whose next retrain would fall past ann_retrain_max_rows_mirrored keeps
    its partitions: the rows past them are folded in, and searched through them."""
    cfg = WorldGraphConfig(ann_index_type="IVF_RQ", ann_index_min_rows=400, ann_partition_rows=200,
                           ann_retrain_growth_mirrored=3, ann_retrain_max_rows_mirrored=1000, mirror_min_rows=400,
                           compact_every_writes=10**6, optimize_every_rows=10**6)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(1700, 16)).astype(np.float32)
    batch = lambda a, b: [{"episode_id": f"e{i}", "tenant_id": "A", "vector": vecs[i]} for i in range(a, b)]  # noqa: E731
    try:
        idx.upsert(batch(0, 500))  # built with 2 partitions
        assert idx.wait_for_maintenance(300) and idx._ann_partitions(idx._part("A")) == 2
        part = idx._part("A")
        idx.upsert(batch(500, 1700))  # past 3 * 2 * 200 = 1200, which is past the cap of 1000
        assert idx.wait_for_maintenance(300)
        assert idx.ensure_indexes() == [] and idx._ann_partitions(part) == 2  # no retrain asked either
        idx.optimize("A")
        assert part.table.index_stats("vector_idx").num_unindexed_rows == 0  # folded into the 2 partitions
        assert idx._ann_partitions(part) == 2
    finally:
        idx.close()


def test_ann_index_is_retrained_as_the_table_grows(tmp_path: Path):
    cfg = WorldGraphConfig(ann_index_type="IVF_RQ", ann_index_min_rows=400, ann_partition_rows=200,
                           ann_retrain_growth=2, compact_every_writes=10**6, optimize_every_rows=10**6)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    idx._small.max_rows = 0  # LanceDB's ANN search, not the in-process copy of a small table
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(1300, 16)).astype(np.float32)
    batch = lambda a, b: [{"episode_id": f"e{i}", "tenant_id": "A", "vector": vecs[i]} for i in range(a, b)]  # noqa: E731
    idx.upsert(batch(0, 300))
    assert idx.wait_for_maintenance(120) and not idx.has_vector_index("A")
    idx.upsert(batch(300, 500))  # 500 >= 400: built with 500 // 200 = 2 partitions
    assert idx.wait_for_maintenance(300) and idx.has_vector_index("A")
    part = idx._part("A")
    assert idx._ann_partitions(part) == 2
    idx.upsert(batch(500, 700))  # 700 < 2 * 2 * 200 = 800: no retrain
    assert idx.wait_for_maintenance(300) and idx._ann_partitions(part) == 2
    idx.upsert(batch(700, 900))  # 900 >= 800: retrained with 900 // 200 = 4 partitions
    assert idx.wait_for_maintenance(300) and idx._ann_partitions(part) == 4
    assert any(["ann", part.name] in run["tasks"] and run["ok"] for run in idx.maintenance_runs)
    # a synchronous rebuild trains for the rows there are now
    idx.upsert(batch(900, 1300))
    idx.wait_for_maintenance(300)
    assert idx.rebuild_vector_index("A") and idx._ann_partitions(part) == 6
    assert not idx.rebuild_vector_index("nobody")
    # searches stay exact in order, and find a row written after the last build
    idx.upsert([{"episode_id": "far", "tenant_id": "A", "vector": -vecs[0] * 10}])
    assert [r["episode_id"] for r in idx.vector_search("A", -vecs[0], k=1)] == ["far"]
    idx.close()


# --- writes: the append window, no duplicate rows --------------------------------------------


def test_adding_appends_without_merge_and_upsert_still_replaces(tmp_path: Path):
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", WorldGraphConfig())
    rng = np.random.default_rng(2)
    with idx.adding("A") as add:
        add(rows(0, 50, rng))
    with idx.adding("A") as add:
        add(rows(50, 80, rng))
        add([])  # nothing to do
    assert idx.count("A") == 80 and sorted(episode_ids(idx)) == sorted(f"e{i}" for i in range(80))
    # upsert of existing ids replaces them: still one row each
    idx.upsert([dict(r, text="changed") for r in rows(0, 10, rng)])
    assert idx.count("A") == 80 and len(set(episode_ids(idx))) == 80
    assert idx.get("A", ["e3"])[0]["text"] == "changed"
    # the window checks its rows belong to its tenant
    with pytest.raises(InvalidInputError) as info, idx.adding("A") as add:
        add(rows(100, 101, rng, tenant="B"))
    assert info.value.field == "rows.tenant_id"
    assert idx.count("B") == 0
    idx.close()


def test_retry_of_a_recorded_batch_leaves_no_duplicate_rows(tmp_path: Path):
    with WorldModel.open(tmp_path, embedder=HashingEmbedder(384)) as wm:
        ids = wm.record_experiences("t1", [{"agent_id": "a", "task_type": "t", "task_description": f"task {i}",
                                            "outcome": "success"} for i in range(30)])
        assert wm.index.count("t1") == 30
        # as after a kill between the append and marking the batch indexed: pending, but in the index
        wm.store.set_index_status("t1", ids, "pending")
        assert wm.retry_indexing() == 30
        assert wm.index.count("t1") == 30 and sorted(episode_ids(wm.index, "t1")) == sorted(ids)
        assert wm.stats("t1")["indexed"] == 30


def test_concurrent_retry_never_duplicates_appended_rows(tmp_path: Path):
    """A second WorldModel (another process, as far as the locks go: each opens the lock files
    anew) re-indexes pending episodes while the first records: every id ends up once."""
    emb = HashingEmbedder(384)
    writer = WorldModel.open(tmp_path, embedder=emb)
    other = WorldModel.open(tmp_path, embedder=emb)
    stop = threading.Event()
    errors: list[BaseException] = []

    def retry_loop() -> None:
        try:
            while not stop.is_set():
                other.retry_indexing()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=retry_loop)
    t.start()
    try:
        recorded: list[str] = []
        for b in range(15):
            recorded += writer.record_experiences("t1", [{"agent_id": "a", "task_type": "t", "outcome": "success",
                                                          "task_description": f"batch {b} item {i}"}
                                                         for i in range(40)])
    finally:
        stop.set()
        t.join(120)
    assert not errors, errors
    stored = writer.index.table_for("t1").to_lance().to_table(columns=["episode_id"]).column("episode_id").to_pylist()
    assert len(stored) == len(set(stored)) == len(recorded) == 600
    other.close()
    writer.close()


# --- folding new rows: delta segments, merged when there are too many -----------------------


def test_new_rows_go_to_delta_segments_merged_past_the_limit(tmp_path: Path):
    cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=100,
                           index_max_segments=3)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(3)
    seen = []
    for b in range(6):
        with idx.adding("A") as add:
            add(rows(100 * b, 100 * (b + 1), rng))
        assert idx.wait_for_maintenance(120)
        seen.append(segments(idx)["text_idx"])
        stats = idx.table_for("A").index_stats("text_idx")
        assert stats.num_unindexed_rows == 0 and stats.num_indexed_rows == 100 * (b + 1)
    assert max(seen) <= 3 and max(seen) >= 2, seen  # deltas accumulate, then merge
    assert seen != sorted(seen), seen  # ... and were merged at least once
    idx.optimize()  # the explicit optimize leaves every index in one segment
    assert set(segments(idx).values()) == {1}
    hits = idx.text_search("A", "word3", k=200)
    assert len(hits) == len([i for i in range(600) if i % 7 == 3])
    idx.close()


def test_old_versions_are_cleaned_up(tmp_path: Path):
    cfg = WorldGraphConfig(index_version_retention_seconds=0, compact_every_writes=10**6, optimize_every_rows=10**6)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(4)
    for b in range(5):
        idx.upsert(rows(20 * b, 20 * (b + 1), rng))
    table = idx.table_for("A")
    before = len(table.list_versions())
    idx.optimize()
    table.checkout_latest()
    assert len(table.list_versions()) < before
    assert idx.count("A") == 100 and len(idx.vector_search("A", rng.normal(size=16), k=100)) == 100
    idx.close()


def test_background_cleanup_runs_at_most_every_index_cleanup_every_seconds(tmp_path: Path):
    """A background optimize (every few seconds during an ingest) deletes old versions at most every
    index_cleanup_every_seconds (the cleanup lists every file of the table); 0: each time; an
    explicit optimize always does."""
    from worldgraph.memory.index import maintenance

    def cleanups(every: float, runs: int, name: str) -> int:
        cfg = WorldGraphConfig(index_version_retention_seconds=0, index_cleanup_every_seconds=every,
                               compact_every_writes=10**6, optimize_every_rows=10**6)
        idx = EpisodeIndex(tmp_path / name, 16, "synthetic", cfg)
        rng = np.random.default_rng(5)
        try:
            for b in range(runs):
                idx.upsert(rows(20 * b, 20 * (b + 1), rng))
                idx._optimize_part(idx._part("A"))  # what the maintenance child runs
            return sum(s["step"] == "cleanup old versions" for s in idx.maintenance_steps)
        finally:
            idx.close()

    maintenance._last_cleanup.clear()
    assert cleanups(3600.0, 3, "hourly") == 1  # the first, then not within the hour
    assert cleanups(0.0, 3, "each") == 3
    cfg = WorldGraphConfig(index_version_retention_seconds=0, index_cleanup_every_seconds=3600.0)
    idx = EpisodeIndex(tmp_path / "hourly", 16, "synthetic", cfg)
    try:
        before = len(idx.maintenance_steps)
        idx.optimize("A")  # explicit: cleans up within the hour all the same
        assert [s["step"] for s in idx.maintenance_steps[before:]].count("cleanup old versions") == 1
    finally:
        idx.close()


def test_segment_merging_is_size_tiered():
    from worldgraph.memory.index.policy import segments_to_merge

    assert segments_to_merge([100, 5, 5], 3) == 0  # within the limit
    assert segments_to_merge([100, 5, 5, 5], 3) == 3  # the deltas, not the big base
    assert segments_to_merge([100, 40, 5, 5, 5, 5, 5, 5, 5], 8) == 7  # 35 < 40: the 40 waits
    assert segments_to_merge([100, 30, 5, 5, 5, 5, 5, 5, 5], 8) == 8  # 30 <= 35: taken in
    assert segments_to_merge([100, 10, 5], 2) == 2  # always at least the two newest
    assert segments_to_merge([10, 10, 10], 2) == 3  # equal sizes: everything


def test_segments_are_merged_alike_in_every_index():
    """One count, chosen from the rows the segments of the index with the most cover, then for every
    index the newest segments covering the same fragments (policy.aligned_merges)."""
    from worldgraph.memory.index.policy import aligned_merges, merges_covering, newest_covering

    rows = {1: 100, 2: 40, 3: 5, 4: 5, 5: 5, 6: 5}
    alike = [{1}, {2}, {3}, {4}, {5}, {6}]
    # by rows: 5+5+5+5 = 20 < 40, so the 40 waits, whatever bytes each index's segments hold
    assert aligned_merges({"a": alike, "b": list(alike)}, rows, 4) == {"a": 4, "b": 4}
    assert aligned_merges({"a": alike, "b": list(alike)}, rows, 6) == {}  # within the limit
    # an index whose segments drifted (an older version's merges): the newest covering the same
    drifted = [{1}, {2, 3}, {4, 5, 6}]
    assert aligned_merges({"a": alike, "b": drifted}, rows, 4) == {"a": 4, "b": 2}
    assert newest_covering(drifted, {7}) == 0  # written since the fold: in no segment
    assert merges_covering({"a": alike, "b": drifted}, {5, 6}) == {"a": 2}


def test_the_first_tier_counts_only_the_small_fragments_it_can_merge() -> None:
    """A small fragment that a segment covers together with a full-size one (the remainder of the
    last merge) is not merged by the first tier: it does not count towards it."""
    from types import SimpleNamespace

    from worldgraph.memory.index.policy import compaction_target, free_small_fragments

    sizes = {1: 100, 2: 90, 3: 40, 4: 30}
    frags = [SimpleNamespace(fragment_id=i, metadata=SimpleNamespace(physical_rows=r, deletion_file=None))
             for i, r in sizes.items()]
    ds = SimpleNamespace(get_fragments=lambda: frags)
    stuck = {"a": [{1, 2}, {3, 4}]}  # 90 rows beside the full 100 in one segment
    assert free_small_fragments(sizes, stuck, 100) == {3: 40, 4: 30}
    assert compaction_target(ds, 100) == 100  # without the segments: 160 small rows
    assert compaction_target(ds, 100, segments=stuck) is None  # 70 it can merge
    assert compaction_target(ds, 100, segments={"a": [{1}, {2, 3, 4}]}) == 100


def test_background_upkeep_merges_small_fragments_once_they_fill_one(tmp_path: Path) -> None:
    """Batches of 20 rows, the background optimize every 5 (as during an ingest): the first tier
    compacts about once per compact_target_rows rows, and every index's segments cover the same
    fragments. Each index merging its segments on its own schedule (by its bytes) made lance merge
    only the newest fragments, at nearly every run (bench/README.md, "The first compaction tier")."""
    cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                           compact_target_rows=400, index_max_segments=8, index_cleanup_every_seconds=3600)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(8)
    try:
        for b in range(100):
            with idx.adding("A") as add:
                add(rows(20 * b, 20 * (b + 1), rng))
            if b % 5 == 4:
                idx._optimize_part(idx._part("A"))
        steps = [s["step"] for s in idx.maintenance_steps]
        assert 3 <= steps.count("compact to 400") <= 2000 // 400 + 1, steps.count("compact to 400")
        ds = idx.table_for("A").to_lance()
        covered = {d.name: sorted(sorted(s.fragment_ids) for s in d.segments) for d in ds.describe_indices()}
        assert len({repr(c) for c in covered.values()}) == 1, covered
        assert idx.count("A") == 2000 and len(idx.text_search("A", "word3", k=400)) == len(range(3, 2000, 7))
    finally:
        idx.close()


def test_compaction_target_tiers() -> None:
    """Small fragments merge once they fill one; COMPACT_TIER full ones merge into one COMPACT_TIER
    times as big; deletions past lance's share force a rewrite; an explicit optimize merges all."""
    from types import SimpleNamespace

    from worldgraph.memory.index.policy import COMPACT_TIER, compaction_target

    def ds(*frags: int | tuple[int, int]) -> Any:
        out = []
        for f in frags:
            rows, deleted = f if isinstance(f, tuple) else (f, 0)
            dfile = SimpleNamespace(num_deleted_rows=deleted) if deleted else None
            out.append(SimpleNamespace(metadata=SimpleNamespace(physical_rows=rows, deletion_file=dfile)))
        return SimpleNamespace(get_fragments=lambda: out)

    big = 100 * COMPACT_TIER
    assert compaction_target(ds(40, 50), 100) is None  # 90 small rows: not a full fragment yet
    assert compaction_target(ds(100), 100) is None
    assert compaction_target(ds(40, 60), 100) == 100
    assert compaction_target(ds(*[150] * (COMPACT_TIER - 1), 30), 100) is None
    assert compaction_target(ds(*[150] * COMPACT_TIER, 30), 100) == big  # the second tier
    assert compaction_target(ds(*[big] * 5, 30, 20), 100) is None  # full-size fragments stay
    assert compaction_target(ds(big, (100, 11)), 100) == 100  # 11 % deleted
    assert compaction_target(ds(big, (100, 10)), 100) is None
    assert compaction_target(ds(big), 100, full=True) == big


def test_the_second_compaction_tier_merges_full_fragments(tmp_path: Path) -> None:
    cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                           compact_target_rows=100)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(6)
    part = idx._part("A", create=True)

    def sizes() -> list[int]:
        return [f.metadata.physical_rows for f in idx.table_for("A").to_lance().get_fragments()]
    for b in range(4):  # fragments of exactly compact_target_rows: the first tier leaves them alone
        with idx.adding("A") as add:
            add(rows(100 * b, 100 * (b + 1), rng))
        if b < 3:
            idx._optimize_part(part)  # what the background runs; each fold adds an index segment
            assert sizes() == [100] * (b + 1)
    idx._optimize_part(part)  # the 4th: the segments are merged, then the fragments
    assert sizes() == [400]
    assert max(segments(idx).values()) == 1
    assert idx.count("A") == 400 and idx.get("A", ["e0"])[0]["episode_id"] == "e0"
    idx.close()


def test_background_compaction_waits_for_a_full_fragment(tmp_path: Path):
    cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                           compact_target_rows=300)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(5)
    for b in range(5):
        with idx.adding("A") as add:
            add(rows(50 * b, 50 * (b + 1), rng))
    part = idx._part("A")

    def fragments() -> list[tuple[int, bool]]:
        return [(f.metadata.physical_rows, f.metadata.deletion_file is not None)
                for f in idx.table_for("A").to_lance().get_fragments()]

    assert len(fragments()) == 5
    idx._optimize_part(part)  # what the background runs: 250 small rows < 300, nothing rewritten
    assert len(fragments()) == 5
    with idx.adding("A") as add:
        add(rows(250, 300, rng))
    idx._optimize_part(part)  # 300 rows in small fragments: folded, their index segments merged,
    assert fragments() == [(300, False)]  # then compacted into one (policy.merge_for_compaction)
    before = fragments()
    idx.upsert([dict(r, text="again") for r in rows(0, 1, rng)])  # an update leaves a deleted row
    assert any(deleted for _, deleted in fragments())
    idx._optimize_part(part)  # 1 of 300 rows deleted: below lance's 10 %, not worth a rewrite
    assert len(fragments()) == len(before) + 1
    idx.upsert([dict(r, text="again") for r in rows(0, 31, rng)])  # 31 of 300: now it is
    idx._optimize_part(part)
    assert not any(deleted for _, deleted in fragments())
    assert idx.count("A") == 300 and idx.get("A", ["e0"])[0]["text"] == "again"
    idx.close()


def test_segments_double_in_size_towards_the_oldest() -> None:
    """The second tier takes an older segment into its merge only once the newer rows have grown
    to about its size (policy.settled_run), so a big segment is rewritten about once per doubling."""
    from worldgraph.memory.index.policy import settled_run

    assert settled_run([1000, 400, 100, 100], 2) == 2  # 400 > 1.5 x 200: the run stays
    assert settled_run([1000, 200, 100, 100], 2) == 3  # 200 <= 1.5 x 200: taken in; 1000 > 1.5 x 400
    assert settled_run([400, 200, 100, 100], 2) == 4  # the whole index: the table doubled
    assert settled_run([1000, 296, 283], 1) == 2  # a run a little smaller than its neighbour takes it in
    assert settled_run([100, 100], 0) == 0


def test_tier_merges_leave_the_settled_segments_alone() -> None:
    """A second tier merges the newest segments covering its fragments, not a bigger older
    segment, and its compaction may rewrite only the fragments under its size that those cover."""
    from worldgraph.memory.index.policy import settled_segments, tier_merges

    rows = {1: 800, 2: 10, 3: 100, 4: 100, 5: 100, 6: 100, 7: 5}
    segs = [{1, 2}, {3}, {4}, {5}, {6, 7}]
    plan, only = tier_merges({"a": segs, "b": list(segs)}, rows, 100, 400)
    assert plan == {"a": 4, "b": 4} and only == {3, 4, 5, 6, 7}  # not 2: beside 1 in its segment
    assert settled_segments(segs, rows, 400) == 1
    # the first tier: only the small fragments no segment covers with a full one
    plan, only = tier_merges({"a": segs}, rows, 100, 100)
    assert plan == {} and only == set()
    plan, only = tier_merges({"a": segs + [{8}, {9}]}, {**rows, 8: 5, 9: 5}, 100, 100)
    assert plan == {"a": 2} and only == {8, 9}


def _segment_ids(idx: EpisodeIndex, tenant: str = "A") -> dict[str, list[str]]:
    ds = idx.table_for(tenant).to_lance()
    return {d.name: [s.uuid for s in sorted(d.segments, key=lambda s: s.created_at)] for d in ds.describe_indices()}


def test_the_second_tier_rewrites_no_bigger_older_segment(tmp_path: Path) -> None:
    """Fragments of 800 rows, then 4 x 100 (compact_target_rows 100: the second tier merges them
    into 400): the segment of the 800 rows is neither merged nor remapped. The second tier merged
    every index into one segment first, and the compaction then remapped that one segment: two
    rewrites of the whole of every index each time (bench/README.md, "Whole index rewrites during
    the ingest"). Another 400 rows: the newer rows have grown to the older segments' size, and
    the merge takes in all of them (a doubling)."""
    cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                           compact_target_rows=100, index_cleanup_every_seconds=3600)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(9)
    part = idx._part("A", create=True)
    try:
        with idx.adding("A") as add:
            add(rows(0, 800, rng))
        idx._ensure_part(part, vector=False, fold=False)  # every index: one segment over the 800 rows
        first = {name: ids[0] for name, ids in _segment_ids(idx).items()}

        def sizes() -> list[int]:
            return [f.metadata.physical_rows for f in idx.table_for("A").to_lance().get_fragments()]
        for b in range(4):
            with idx.adding("A") as add:
                add(rows(800 + 100 * b, 900 + 100 * b, rng))
            idx._optimize_part(part)
        assert sizes() == [800, 400]
        after = _segment_ids(idx)
        assert all(ids[0] == first[name] and len(ids) == 2 for name, ids in after.items()), (first, after)
        for b in range(4):
            with idx.adding("A") as add:
                add(rows(1200 + 100 * b, 1300 + 100 * b, rng))
            idx._optimize_part(part)
        assert sizes() == [800, 400, 400]
        assert all(len(ids) == 1 and ids[0] != first[name] for name, ids in _segment_ids(idx).items())
        assert idx.count("A") == 1600 and len(idx.text_search("A", "word3", k=400)) == len(range(3, 1600, 7))
        assert idx.get("A", ["e5", "e1599"])[1]["episode_id"] == "e1599"
    finally:
        idx.close()


def test_a_compaction_leaves_small_fragments_beside_a_big_one_in_its_segment(tmp_path: Path) -> None:
    """Two small fragments that one segment covers with a big one (indexed together) are not
    rewritten by a first-tier compaction of newer ones: lance would merge them (neighbours, the
    same segments) and remap the big fragment's whole segment with them."""
    cfg = WorldGraphConfig(ann_index_min_rows=10**6, compact_every_writes=10**6, optimize_every_rows=10**6,
                           compact_target_rows=100, index_cleanup_every_seconds=3600)
    idx = EpisodeIndex(tmp_path / "db", 16, "synthetic", cfg)
    rng = np.random.default_rng(10)
    part = idx._part("A", create=True)
    try:
        for start, stop in ((0, 800), (800, 810), (810, 820)):
            with idx.adding("A") as add:
                add(rows(start, stop, rng))
        idx._optimize_part(part)  # the 10 + 10 folded in (no compaction: 20 small rows)
        part.open_dataset().optimize.optimize_indices(num_indices_to_merge=2)  # one segment over 800, 10, 10
        assert all(len(ids) == 1 for ids in _segment_ids(idx).values())
        first = {name: ids[0] for name, ids in _segment_ids(idx).items()}
        for b in range(5):
            with idx.adding("A") as add:
                add(rows(820 + 20 * b, 840 + 20 * b, rng))
        idx._optimize_part(part)  # 100 rows in 5 free small fragments: the first tier
        sizes = [f.metadata.physical_rows for f in idx.table_for("A").to_lance().get_fragments()]
        assert sizes == [800, 10, 10, 100], sizes
        assert all(ids[0] == first[name] for name, ids in _segment_ids(idx).items())
        assert idx.count("A") == 920 and len(idx.text_search("A", "word3", k=400)) == len(range(3, 920, 7))
    finally:
        idx.close()


def test_the_second_tier_counts_only_the_fragments_it_can_merge() -> None:
    """A mid-size fragment that a segment covers together with a fragment of the second tier's size
    (its remainder) is not merged by it (tier_merges), so it does not count towards it."""
    from types import SimpleNamespace

    from worldgraph.memory.index.policy import compaction_target

    sizes = {1: 400, 2: 150, 3: 150, 4: 150, 5: 150}
    frags = [SimpleNamespace(fragment_id=i, metadata=SimpleNamespace(physical_rows=r, deletion_file=None))
             for i, r in sizes.items()]
    ds = SimpleNamespace(get_fragments=lambda: frags)
    assert compaction_target(ds, 100, segments={"a": [{1, 2}, {3}, {4}, {5}]}) is None  # 3 it can merge
    assert compaction_target(ds, 100, segments={"a": [{1}, {2}, {3}, {4}, {5}]}) == 400
    assert compaction_target(ds, 100) == 400  # without the segments: every mid-size fragment
